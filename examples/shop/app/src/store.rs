//! The shop's data in PostgreSQL (`DATABASE_URL`, the environment's branch): the catalogue and the
//! orders the seed made tables for, and the storefront's migration.

use std::sync::Mutex;

use postgres::{Client, NoTls};
use serde_json::{Value, json};

use crate::lock;

/// The migration the storefront runs before it starts (`shop migrate`): orders looked up by
/// customer. Recorded in `schema_migrations`, so it applies once.
pub const MIGRATION: &str = "0002_orders_by_email";

/// One connection, made when first needed and again after it broke (`af db reset` ends every
/// session of the branch).
pub struct Store {
    url: String,
    client: Mutex<Option<Client>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it carries the password.
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    pub fn new(url: String) -> Store {
        Store {
            url,
            client: Mutex::new(None),
        }
    }

    /// Runs `work` on the connection; once more on a new connection when the first one was gone.
    fn with<T>(
        &self,
        work: impl Fn(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, String> {
        let mut slot = lock(&self.client);
        for attempt in 0..2 {
            if slot.as_ref().is_none_or(Client::is_closed) {
                *slot = Some(
                    Client::connect(&self.url, NoTls)
                        .map_err(|e| format!("connecting to the database: {e}"))?,
                );
            }
            let client = slot.as_mut().expect("connected above");
            match work(client) {
                Ok(value) => return Ok(value),
                Err(err) if attempt == 0 && (err.is_closed() || client.is_closed()) => {
                    *slot = None;
                }
                Err(err) => return Err(err.to_string()),
            }
        }
        Err("the database closed the connection twice".to_string())
    }

    /// Every order, oldest first, as the API shows them.
    pub fn orders(&self) -> Result<Vec<Value>, String> {
        self.with(|client| {
            let rows = client.query(
                "SELECT id, item, email, payment, confirmation FROM orders ORDER BY id",
                &[],
            )?;
            Ok(rows
                .iter()
                .map(|row| {
                    order(
                        row.get::<_, i32>(0),
                        row.get(1),
                        row.get(2),
                        row.get(3),
                        row.get(4),
                    )
                })
                .collect())
        })
    }

    /// The price of `item` in cents; `None` when the catalogue has no such product.
    pub fn price_of(&self, item: &str) -> Result<Option<i32>, String> {
        self.with(|client| {
            Ok(client
                .query_opt("SELECT price_cents FROM products WHERE name = $1", &[&item])?
                .map(|row| row.get(0)))
        })
    }

    /// The next order's number, taken before it is paid, so the payment and the mail name it.
    pub fn next_order_id(&self) -> Result<i32, String> {
        self.with(|client| {
            let row = client.query_one("SELECT nextval('orders_id_seq')::integer", &[])?;
            Ok(row.get(0))
        })
    }

    pub fn insert_order(
        &self,
        id: i32,
        item: &str,
        email: &str,
        payment: &Value,
        confirmation: &str,
    ) -> Result<Value, String> {
        self.with(|client| {
            client.execute(
                "INSERT INTO orders (id, item, email, payment, confirmation) VALUES ($1, $2, $3, $4, $5)",
                &[&id, &item, &email, payment, &confirmation],
            )?;
            Ok(order(
                id,
                item.to_string(),
                email.to_string(),
                payment.clone(),
                confirmation.to_string(),
            ))
        })
    }
}

fn order(id: i32, item: String, email: String, payment: Value, confirmation: String) -> Value {
    json!({"id": id, "item": item, "email": email, "payment": payment, "confirmation": confirmation})
}

/// `shop migrate`: applies [`MIGRATION`] to the branch unless `schema_migrations` says it was;
/// what it did.
pub fn migrate(url: &str) -> Result<String, String> {
    let mut client =
        Client::connect(url, NoTls).map_err(|e| format!("connecting to the database: {e}"))?;
    let mut transaction = client.transaction().map_err(|e| e.to_string())?;
    transaction
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (\
               name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .map_err(|e| e.to_string())?;
    let applied = transaction
        .execute(
            "INSERT INTO schema_migrations (name) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&MIGRATION],
        )
        .map_err(|e| e.to_string())?;
    if applied == 0 {
        return Ok(format!("migration {MIGRATION}: already applied"));
    }
    transaction
        .batch_execute("CREATE INDEX orders_by_email ON orders (email)")
        .map_err(|e| format!("migration {MIGRATION}: {e}"))?;
    transaction.commit().map_err(|e| e.to_string())?;
    Ok(format!("migration {MIGRATION}: applied"))
}
