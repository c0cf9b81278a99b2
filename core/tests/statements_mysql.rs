//! The `mysql` dialect's statements as text: only syntax MySQL 8 and
//! MariaDB 10.6+ both accept, one `?` per parameter (write and read-back
//! alike), every reporting write paired with a locking read-back in the
//! order it needs, and the clock read independently of the session's
//! time zone. What they do is checked against MariaDB by
//! `tests/tests/model_vs_mysql.rs`.

use picolease_core::sql::{db_now_millis, Dialect, Param, ReadOrder, Statement, Statements};
use picolease_core::TableName;

fn mysql() -> Statements {
    Statements::new(Dialect::Mysql, &TableName::new("app.leases").unwrap())
}

/// Every statement of the protocol, by name, with its read-back if any.
fn all(s: &Statements) -> Vec<(&'static str, &Statement)> {
    vec![
        ("acquire", s.acquire()),
        ("renew", s.renew()),
        ("release", s.release()),
        ("force_release", s.force_release()),
        ("status", s.status()),
        ("lease_row", s.lease_row()),
        ("fence", s.fence()),
        ("acquire_batch", s.acquire_batch()),
        ("renew_batch", s.renew_batch()),
        ("release_batch", s.release_batch()),
        ("survey", s.survey()),
    ]
}

/// Each statement and each read-back: as many `?` as parameters.
#[test]
fn every_mysql_statement_and_read_back_has_one_question_mark_per_parameter() {
    let s = mysql();
    for (name, st) in all(&s) {
        let mut texts = vec![st];
        texts.extend(st.read_back().map(|r| r.statement()));
        for st in texts {
            assert_eq!(
                st.sql().matches('?').count(),
                st.params().len(),
                "{name}: {}",
                st.sql()
            );
            assert!(!st.sql().contains("$1"), "{name}: {}", st.sql());
            assert!(st.sql().contains("`leases`"), "{name}: {}", st.sql());
        }
    }
    // The single-lease parameters are the other dialects' (the same
    // bindings serve every driver).
    let pg = Statements::new(Dialect::Postgres, &TableName::new("app.leases").unwrap());
    for (st, other) in [
        (s.acquire(), pg.acquire()),
        (s.renew(), pg.renew()),
        (s.release(), pg.release()),
        (s.force_release(), pg.force_release()),
        (s.fence(), pg.fence()),
    ] {
        assert_eq!(st.params(), other.params(), "{}", st.sql());
    }
    // The forced release binds the ttl: a row another server incarnation
    // wrote is adopted for one.
    assert_eq!(s.force_release().params(), [Param::TtlMillis, Param::Lease]);
}

/// No syntax one of the two servers refuses: no `RETURNING`, no `FOR
/// SHARE`, no `FOR UPDATE OF`, no double-quoted identifiers (a string
/// unless `ANSI_QUOTES`), no row alias after `VALUES`, no `ON CONFLICT`.
#[test]
fn mysql_statements_avoid_syntax_mysql_8_or_mariadb_refuses() {
    let s = mysql();
    let mut texts = vec![s.create_table().to_string()];
    for (_, st) in all(&s) {
        texts.push(st.sql().to_string());
        if let Some(r) = st.read_back() {
            texts.push(r.statement().sql().to_string());
        }
    }
    for text in &texts {
        for refused in [
            "RETURNING",
            "FOR SHARE",
            "FOR UPDATE OF",
            "FOR KEY SHARE",
            "ON CONFLICT",
            "\"",
            "excluded",
            "pg_notify",
            "julianday",
            "NOW()",
            "UNIX_TIMESTAMP",
        ] {
            assert!(!text.contains(refused), "{refused:?} in {text}");
        }
    }
    // The index is in CREATE TABLE; what is left is the migration of an
    // older table's incarnation column, prepared only when it is missing.
    let migrate = s.create_index().expect("the migration");
    assert!(!migrate.contains("CREATE INDEX"), "{migrate}");
    assert!(migrate.contains("information_schema.COLUMNS"), "{migrate}");
    assert!(
        !migrate.contains("IF NOT EXISTS"),
        "MySQL 8 has none: {migrate}"
    );
    assert!(s.listen().is_none() && s.change_counter().is_none());
}

/// The table: InnoDB, byte-compared `VARBINARY(255)` names and holders,
/// the unique `(name, epoch)` index named after the table.
#[test]
fn the_mysql_table_is_innodb_with_binary_names_and_the_fence_index() {
    let create = mysql().create_table().to_string();
    assert!(
        create.starts_with("CREATE TABLE IF NOT EXISTS `app`.`leases`"),
        "{create}"
    );
    assert!(create.ends_with("ENGINE=InnoDB"), "{create}");
    assert!(
        create.contains("`name` varbinary(255) NOT NULL PRIMARY KEY"),
        "{create}"
    );
    assert!(create.contains("`holder` varbinary(255) NULL"), "{create}");
    assert!(
        create.contains("UNIQUE KEY `leases_fence` (`name`, `epoch`)"),
        "{create}"
    );
}

/// Which operations read back, and when: after the write where the row as
/// written is the answer, before it where the write erases the evidence
/// (a freed row no longer names its holder). Reads lock (`FOR UPDATE`),
/// so the order cannot matter to what they see.
#[test]
fn reporting_writes_read_back_locked_in_the_order_they_need() {
    let s = mysql();
    let expected = [
        ("acquire", Some(ReadOrder::AfterWrite)),
        ("renew", Some(ReadOrder::AfterWrite)),
        ("release", Some(ReadOrder::BeforeWrite)),
        ("force_release", Some(ReadOrder::AfterWrite)),
        ("status", None),
        ("lease_row", None),
        ("fence", None),
        ("acquire_batch", Some(ReadOrder::AfterWrite)),
        ("renew_batch", Some(ReadOrder::AfterWrite)),
        ("release_batch", Some(ReadOrder::BeforeWrite)),
        ("survey", None),
    ];
    for ((name, st), (expected_name, order)) in all(&s).into_iter().zip(expected) {
        assert_eq!(name, expected_name);
        assert_eq!(st.read_back().map(|r| r.order()), order, "{name}");
        if let Some(r) = st.read_back() {
            let read = r.statement().sql();
            assert!(read.starts_with("SELECT "), "{name}: {read}");
            assert!(read.ends_with(" FOR UPDATE"), "{name}: {read}");
            assert!(r.statement().read_back().is_none());
        }
    }
    assert_eq!(
        s.acquire().read_back().unwrap().statement().params(),
        &[Param::Lease]
    );
    assert_eq!(
        s.release().read_back().unwrap().statement().params(),
        &[Param::Lease, Param::Holder, Param::Epoch]
    );
    assert_eq!(
        s.renew_batch().params(),
        &[Param::Batch, Param::TtlMillis, Param::Holder]
    );
    assert_eq!(
        s.renew_batch().read_back().unwrap().statement().params(),
        &[Param::Batch, Param::Holder]
    );
    assert_eq!(
        s.acquire_batch().params(),
        &[Param::Holder, Param::TtlMillis, Param::Batch]
    );
    // SQLite and PostgreSQL return their rows themselves.
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let other = Statements::new(dialect, &TableName::default());
        for (name, st) in all(&other) {
            assert!(st.read_back().is_none(), "{dialect:?} {name}");
        }
    }
}

/// The fence locks the lease row in share mode (MariaDB's spelling), and
/// numbering it "from" a position changes nothing (`?` is positional).
#[test]
fn the_mysql_fence_locks_in_share_mode_and_is_positional() {
    let s = mysql();
    let fence = s.fence().sql();
    assert!(
        fence.starts_with("EXISTS(SELECT 1 FROM `app`.`leases`"),
        "{fence}"
    );
    assert!(fence.ends_with(" LOCK IN SHARE MODE)"), "{fence}");
    assert_eq!(s.fence_from(3), s.fence().clone());
}

/// The batches unpack their JSON with `JSON_TABLE` as utf8mb4 text; the
/// acquire feeds its upsert in byte order of the names and reuses the
/// single acquire's `ON DUPLICATE KEY UPDATE` clause verbatim.
#[test]
fn the_mysql_batches_use_json_table_and_the_single_acquires_clause() {
    let s = mysql();
    let single = s.acquire().sql();
    let clause = &single[single.find(" ON DUPLICATE KEY UPDATE ").unwrap()..];
    let batch = s.acquire_batch().sql();
    assert!(batch.ends_with(clause), "{batch}");
    assert!(
        batch.contains("ORDER BY CAST(`j`.`name` AS BINARY) ON DUPLICATE KEY UPDATE"),
        "{batch}"
    );
    for st in [s.acquire_batch(), s.renew_batch(), s.release_batch()] {
        assert!(
            st.sql().contains(
                "JSON_TABLE(?, '$[*]' COLUMNS (`name` VARCHAR(255) CHARACTER SET utf8mb4"
            ),
            "{}",
            st.sql()
        );
    }
    // The upsert's CASEs decide on the caller of the derived table
    // `picolease_caller` (a grace row inserts no holder, so not
    // `VALUES(holder)`), and on `VALUES(expires_at)`, which MariaDB and
    // MySQL 8 both know (no `AS new` row alias).
    assert!(!single.contains("VALUES(`holder`)"), "{single}");
    assert!(single.contains("`picolease_caller`.`holder`"), "{single}");
    assert!(single.contains("VALUES(`expires_at`)"), "{single}");
}

/// The clock: `UTC_TIMESTAMP(6)` as whole milliseconds since 1970 through
/// calendar arithmetic, so neither the session's `time_zone` nor a DST
/// fold enters; microseconds in, milliseconds out (never seconds).
#[test]
fn the_mysql_clock_is_utc_in_milliseconds_and_time_zone_free() {
    let now = db_now_millis(Dialect::Mysql);
    assert_eq!(
        now,
        "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000"
    );
    let s = mysql();
    assert!(s.renew().sql().contains(now));
    assert!(s.status().sql().contains(now));
}
