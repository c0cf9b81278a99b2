//! Prints every statement of the protocol for every dialect.
use picolease_core::sql::{Dialect, Statements};
use picolease_core::TableName;

fn main() {
    let table = std::env::args()
        .nth(1)
        .unwrap_or_else(|| picolease_core::DEFAULT_TABLE.to_string());
    let table = match TableName::new(&table) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql] {
        let s = Statements::new(dialect, &table);
        println!("-- {dialect:?}");
        println!("-- create table\n{};", s.create_table());
        if let Some(index) = s.create_index() {
            println!("-- create index (if missing)\n{index};");
        }
        for (what, st) in [
            ("acquire", s.acquire()),
            ("renew", s.renew()),
            ("release", s.release()),
            ("force release", s.force_release()),
            ("status", s.status()),
            ("fence", s.fence()),
        ] {
            println!("-- {what} {:?}\n{};", st.params(), st.sql());
            if let Some(read_back) = st.read_back() {
                println!(
                    "-- {what}: its read-back {:?}\n{};",
                    read_back.order(),
                    read_back.statement().sql()
                );
            }
        }
    }
}
