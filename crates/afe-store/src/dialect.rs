//! The two SQL dialects the store speaks. Statements are written once, PostgreSQL-style (`$1`
//! parameters, `{now}` for the database's clock in milliseconds); SQLite gets `?1` and its own
//! clock expression. Schema statements get SQLite's types.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    pub fn of_url(url: &str) -> Option<Dialect> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Dialect::Postgres)
        } else if url.starts_with("sqlite:") {
            Some(Dialect::Sqlite)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
        }
    }

    /// A statement in this dialect.
    pub fn sql(self, statement: &str) -> String {
        match self {
            Dialect::Postgres => statement.replace(
                "{now}",
                "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
            ),
            Dialect::Sqlite => {
                let statement = statement
                    .replace(
                        "{now}",
                        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
                    )
                    .replace("BIGSERIAL PRIMARY KEY", "INTEGER PRIMARY KEY AUTOINCREMENT")
                    .replace("BYTEA", "BLOB");
                numbered_parameters(&statement)
            }
        }
    }
}

/// `$1` → `?1`: SQLite numbers `$1` by first appearance, `?1` by its digits.
fn numbered_parameters(statement: &str) -> String {
    let mut out = String::with_capacity(statement.len());
    let mut chars = statement.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_gets_numbered_parameters_its_clock_and_types() {
        let sql = Dialect::Sqlite.sql("SELECT $2, $10 FROM t WHERE at < {now} -- $x");
        assert!(
            sql.starts_with("SELECT ?2, ?10 FROM t WHERE at < CAST((julianday"),
            "{sql}"
        );
        assert!(sql.ends_with("-- $x"));
        assert_eq!(
            Dialect::Sqlite.sql("id BIGSERIAL PRIMARY KEY, data BYTEA"),
            "id INTEGER PRIMARY KEY AUTOINCREMENT, data BLOB"
        );
        assert_eq!(Dialect::Postgres.sql("SELECT $1"), "SELECT $1");
    }
}
