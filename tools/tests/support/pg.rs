//! Plain SQL on the test server, for the PostgreSQL CLI tests.

/// Runs `sql` on `url` (panics, failing the test, when the server is
/// unreachable) and returns every row as its columns' text joined by `|`.
pub fn sql(url: &str, sql: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("the PostgreSQL server at 127.0.0.1:5432 must be running for these tests");
        tokio::spawn(connection);
        client
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).unwrap_or("NULL").to_string())
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
                _ => None,
            })
            .collect()
    })
}

const ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database of a test's own on the test server, dropped at the end.
pub struct Database(pub String);

impl Database {
    /// `<prefix>_<pid>`, dropped first if a crashed run left it.
    pub fn new(prefix: &str) -> Self {
        let name = format!("{prefix}_{}", std::process::id());
        sql(
            ADMIN,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
        sql(ADMIN, &format!("CREATE DATABASE {name}"));
        Database(name)
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.0)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            sql(
                ADMIN,
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0),
            )
        });
    }
}
