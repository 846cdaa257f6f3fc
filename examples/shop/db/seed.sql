-- The shop's data as every new environment starts with it (af applies it once into a template,
-- and each environment's branch is a copy): the catalogue, and no orders yet.
CREATE TABLE products (
  name text PRIMARY KEY,
  price_cents integer NOT NULL CHECK (price_cents > 0)
);

INSERT INTO products (name, price_cents) VALUES
  ('green tea', 1200),
  ('black tea', 900),
  ('oolong', 1500);

CREATE TABLE orders (
  id serial PRIMARY KEY,
  item text NOT NULL REFERENCES products (name),
  email text NOT NULL,
  payment jsonb NOT NULL,
  confirmation text NOT NULL,
  placed_at timestamptz NOT NULL DEFAULT now()
);
