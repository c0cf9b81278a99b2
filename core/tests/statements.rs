//! The rendered statements: one placeholder per parameter, identifiers
//! quoted, PostgreSQL placeholders renumbered for the fence, and decoding
//! that names what is wrong with a row.

use picolease_core::sql::{Cell, Dialect, Param, Statements};
use picolease_core::{Candidate, Epoch, HolderId, Operation, Rank, Reply, RowError, TableName};

fn placeholders(sql: &str, dialect: Dialect) -> usize {
    match dialect {
        Dialect::Sqlite => sql.matches('?').count(),
        _ => sql.matches('$').count(),
    }
}

#[test]
fn every_statement_has_one_placeholder_per_parameter() {
    let table = TableName::new("app.leases").unwrap();
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let s = Statements::new(dialect, &table);
        for st in [
            s.acquire(),
            s.renew(),
            s.release(),
            s.force_release(),
            s.status(),
            s.fence(),
        ] {
            assert_eq!(
                placeholders(st.sql(), dialect),
                st.params().len(),
                "{dialect:?}: {}",
                st.sql()
            );
            assert!(
                st.sql().contains("\"app\".\"leases\"") || st.sql().contains("\"leases\""),
                "{}",
                st.sql()
            );
        }
        assert_eq!(
            s.acquire().params(),
            &[Param::Lease, Param::Holder, Param::TtlMillis]
        );
        assert_eq!(
            s.renew().params(),
            &[Param::TtlMillis, Param::Lease, Param::Holder, Param::Epoch]
        );
        assert_eq!(
            s.release().params(),
            &[Param::Lease, Param::Holder, Param::Epoch]
        );
        assert!(s
            .create_table()
            .starts_with("CREATE TABLE IF NOT EXISTS \"app\".\"leases\""));
    }
}

#[test]
fn renew_and_release_are_conditioned_on_holder_and_epoch() {
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let s = Statements::new(dialect, &TableName::default());
        for st in [s.renew(), s.release(), s.fence()] {
            assert!(
                st.sql().contains("\"picolease_leases\".\"holder\" ="),
                "{}",
                st.sql()
            );
            assert!(
                st.sql().contains("\"picolease_leases\".\"epoch\" ="),
                "{}",
                st.sql()
            );
        }
    }
    let pg = Statements::new(Dialect::Postgres, &TableName::default());
    assert!(pg
        .release()
        .sql()
        .contains("pg_notify('picolease_leases_released'"));
}

#[test]
fn the_fence_renumbers_postgres_placeholders_after_the_users_own() {
    let pg = Statements::new(Dialect::Postgres, &TableName::default());
    let fence = pg.fence_from(3);
    assert!(fence.sql().starts_with("EXISTS"));
    assert!(fence.sql().contains("$3") && fence.sql().contains("$4") && fence.sql().contains("$5"));
    assert!(!fence.sql().contains("$1") && !fence.sql().contains("$6"));
    let sqlite = Statements::new(Dialect::Sqlite, &TableName::default());
    assert_eq!(sqlite.fence_from(3), sqlite.fence().clone());
}

#[test]
fn bound_values_follow_the_parameters() {
    use picolease_core::sql::{Bindings, Value};
    let s = Statements::new(Dialect::Sqlite, &TableName::default());
    let b = Bindings {
        lease: "l",
        holder: "h",
        ttl_millis: 10_000,
        ..Default::default()
    };
    let values: Vec<Value> = s.renew().bind(&b, Some(Epoch::new(7))).collect();
    assert_eq!(
        values,
        vec![
            Value::Int(10_000),
            Value::Text("l"),
            Value::Text("h"),
            Value::Int(7)
        ]
    );
}

#[test]
fn decoding_names_what_is_wrong_with_a_row() {
    let s = Statements::new(Dialect::Sqlite, &TableName::default());
    let me = HolderId::new("me").unwrap();
    let row = |holder: Cell, epoch: Cell, left: Cell| vec![vec![holder, epoch, left]];
    let ok = s.decode_reply(
        Operation::Acquire,
        &me,
        &row(Cell::Text("me".into()), Cell::Int(4), Cell::Int(10_000)),
    );
    assert_eq!(
        ok,
        Ok(Reply::Acquired {
            epoch: Epoch::new(4)
        })
    );
    let held = s.decode_reply(
        Operation::Acquire,
        &me,
        &row(Cell::Text("x".into()), Cell::Int(4), Cell::Int(900)),
    );
    assert_eq!(
        held,
        Ok(Reply::Held {
            holder: Some(HolderId::new("x").unwrap()),
            epoch: Epoch::new(4),
            expires_in: std::time::Duration::from_millis(900)
        })
    );
    assert_eq!(
        s.decode_reply(
            Operation::Acquire,
            &me,
            &row(Cell::Text("x".into()), Cell::Null, Cell::Int(1))
        ),
        Err(RowError::Null {
            lease: String::new(),
            column: "epoch"
        })
    );
    assert_eq!(
        s.decode_reply(
            Operation::Acquire,
            &me,
            &row(Cell::Text("x".into()), Cell::Int(-3), Cell::Int(1))
        ),
        Err(RowError::NegativeEpoch {
            lease: String::new(),
            epoch: -3
        })
    );
    let wrong = s.decode_reply(
        Operation::Acquire,
        &me,
        &row(Cell::Text("x".into()), Cell::Text("1".into()), Cell::Int(1)),
    );
    assert!(
        matches!(
            wrong,
            Err(RowError::WrongType {
                column: "epoch",
                ..
            })
        ),
        "{wrong:?}"
    );
    assert!(matches!(
        s.decode_reply(Operation::Acquire, &me, &[]),
        Err(RowError::RowCount { .. })
    ));
    assert_eq!(
        wrong.unwrap_err().to_string(),
        "lease \"\": column epoch holds text, expected integer"
    );
    let four = s.decode_reply(
        Operation::Renew {
            epoch: Epoch::new(1),
        },
        &me,
        &[vec![Cell::Int(1), Cell::Null, Cell::Null, Cell::Null]],
    );
    assert_eq!(
        four,
        Err(RowError::ColumnCount {
            statement: "renew",
            expected: 3,
            found: 4
        })
    );
    let short = s.decode_status(&[vec![Cell::Text("l".into())]]);
    assert!(matches!(
        short,
        Err(RowError::ColumnCount {
            statement: "status",
            ..
        })
    ));
    let other = s.decode_status(&[vec![
        Cell::Other("blob".into()),
        Cell::Null,
        Cell::Int(1),
        Cell::Int(0),
    ]]);
    assert_eq!(
        other.unwrap_err().to_string(),
        "lease \"\": column name holds blob, expected text"
    );
    let renew = Operation::Renew {
        epoch: Epoch::new(1),
    };
    assert_eq!(s.decode_reply(renew, &me, &[]), Ok(Reply::Rejected));
    assert_eq!(
        s.decode_reply(renew, &me, &[vec![Cell::Int(1), Cell::Null, Cell::Null]]),
        Ok(Reply::Accepted)
    );
    // The renewal's second column: an operator's handover request.
    assert_eq!(
        s.decode_reply(
            renew,
            &me,
            &[vec![Cell::Int(1), Cell::Text(String::new()), Cell::Null]]
        ),
        Ok(Reply::HandOverAsked { to: None })
    );
    assert_eq!(
        s.decode_reply(
            renew,
            &me,
            &[vec![Cell::Int(1), Cell::Text("web-2".into()), Cell::Null]]
        ),
        Ok(Reply::HandOverAsked {
            to: Some(HolderId::reserved_for("web-2").unwrap())
        })
    );
    assert_eq!(
        s.decode_reply(renew, &me, &[vec![Cell::Int(1), Cell::Text("x\ny".into()), Cell::Null]])
            .unwrap_err()
            .to_string(),
        "lease \"\": column handover request holds \"x\\ny\", expected a node name (1 to 254 bytes, no control characters)"
    );
    // The third column: the preferred candidate's announcement. Foreign
    // text is no candidate; a request in the second column wins.
    let candidate = Candidate {
        holder: HolderId::new("web-3:1").unwrap(),
        rank: Rank::new(2, Some("1.4.0")).unwrap(),
    };
    let text = candidate.announcement().unwrap();
    assert_eq!(
        s.decode_reply(
            renew,
            &me,
            &[vec![Cell::Int(1), Cell::Null, Cell::Text(text.clone())]]
        ),
        Ok(Reply::CandidateSeen {
            candidate: candidate.clone()
        })
    );
    assert_eq!(
        s.decode_reply(
            renew,
            &me,
            &[vec![Cell::Int(1), Cell::Null, Cell::Text("hello".into())]]
        ),
        Ok(Reply::Accepted)
    );
    assert_eq!(
        s.decode_reply(
            renew,
            &me,
            &[vec![
                Cell::Int(1),
                Cell::Text(String::new()),
                Cell::Text(text)
            ]]
        ),
        Ok(Reply::HandOverAsked { to: None })
    );
    let status = s.decode_status(&[vec![
        Cell::Text("l".into()),
        Cell::Null,
        Cell::Null,
        Cell::Int(0),
    ]]);
    assert_eq!(
        status.unwrap_err().to_string(),
        "lease \"l\": column epoch is NULL"
    );
    let free = s
        .decode_status(&[vec![
            Cell::Text("l".into()),
            Cell::Null,
            Cell::Int(3),
            Cell::Int(-5),
        ]])
        .unwrap();
    assert_eq!(free[0].expires_in_ms, None);
    let held = s
        .decode_status(&[vec![
            Cell::Text("l".into()),
            Cell::Text("h".into()),
            Cell::Int(3),
            Cell::Int(1234),
        ]])
        .unwrap();
    assert_eq!(held[0].expires_in_ms, Some(1234));
    assert_eq!(s.decode_force_release(&[]), Ok(None));
    assert_eq!(
        s.decode_force_release(&[vec![Cell::Int(5)]]),
        Ok(Some(Epoch::new(5)))
    );
    assert!(matches!(
        s.decode_force_release(&[vec![Cell::Int(5)], vec![Cell::Int(6)]]),
        Err(RowError::RowCount { .. })
    ));
}

#[test]
fn the_postgres_fence_locks_the_lease_row_for_key_share_and_sqlite_keeps_its_text() {
    let pg = Statements::new(Dialect::Postgres, &TableName::default());
    assert!(
        pg.fence().sql().ends_with(" FOR KEY SHARE)"),
        "{}",
        pg.fence().sql()
    );
    assert!(pg.fence_from(4).sql().ends_with(" FOR KEY SHARE)"));
    let sqlite = Statements::new(Dialect::Sqlite, &TableName::default());
    assert!(
        !sqlite.fence().sql().contains(" FOR "),
        "{}",
        sqlite.fence().sql()
    );
    assert_eq!(
        sqlite.fence().sql(),
        "EXISTS(SELECT 1 FROM \"picolease_leases\" WHERE \"picolease_leases\".\"name\" = ? \
         AND \"picolease_leases\".\"holder\" = ? AND \"picolease_leases\".\"epoch\" = ? \
         AND \"picolease_leases\".\"expires_at\" > (CAST(ROUND((julianday('now') - 2440587.5) \
         * 86400000.0) AS INTEGER)))"
    );
}

#[test]
fn the_fence_index_is_postgres_only_named_after_the_table_and_fits_63_bytes() {
    let sqlite = Statements::new(Dialect::Sqlite, &TableName::default());
    assert_eq!(sqlite.create_index(), None);

    let pg = Statements::new(Dialect::Postgres, &TableName::new("app.leases").unwrap());
    let index = pg.create_index().expect("PostgreSQL has the index");
    assert!(
        index.contains(
            "CREATE UNIQUE INDEX IF NOT EXISTS \"leases_fence\" ON \"app\".\"leases\" (\"name\", \"epoch\")"
        ),
        "{index}"
    );
    assert!(index.contains("'\"app\".\"leases\"'::regclass"), "{index}");
    assert!(index.contains("c.relname = 'leases_fence'"), "{index}");
    assert!(!index.contains('?') && !index.contains("$1"), "{index}");

    let plain = Statements::new(Dialect::Postgres, &TableName::default());
    assert!(plain
        .create_index()
        .unwrap()
        .contains("\"picolease_leases_fence\" ON \"picolease_leases\" (\"name\", \"epoch\")"));

    // The longest table part allowed still gives a valid identifier.
    let longest = "t".repeat(picolease_core::MAX_TABLE_LEN);
    let pg = Statements::new(Dialect::Postgres, &TableName::new(&longest).unwrap());
    let name = format!("{longest}_fence");
    assert!(name.len() <= 63, "{} bytes", name.len());
    assert!(pg.create_index().unwrap().contains(&format!("\"{name}\"")));
}

/// The epoch after an adoption counts the adopting server's clock (DESIGN
/// §3 "Failover"): two adoptions of the same old row a millisecond apart
/// land apart by more than any run of terms in between, and a clock
/// behind the old row still moves the epoch up by 2^20.
#[test]
fn the_epoch_after_an_adoption_counts_the_clock() {
    use picolease_core::sql::{adopted_epoch, ADOPTION_EPOCH_SHIFT};
    let unit = 1i64 << ADOPTION_EPOCH_SHIFT;
    let t = 1_780_000_000_000;
    assert_eq!(adopted_epoch(1, t), t * unit);
    // The chain of issue 44: both adopters start from a's epoch 1.
    let first = adopted_epoch(1, t);
    let second = adopted_epoch(1, t + 1);
    assert!(second > first + (unit - 1), "{first} {second}");
    // The old constant (2^32) gave both 1 + 2^32.
    // A clock behind the old row: still past it and its lost terms.
    let ahead = (t + 60_000) * unit + 5;
    assert_eq!(adopted_epoch(ahead, t), ahead + unit);
    // It fits a signed 64-bit epoch for centuries.
    let year_2200 = 7_258_118_400_000;
    assert!(adopted_epoch(1, year_2200) > 0);
}

/// The runbook's statement, in every dialect: binds the ttl alone, leaves
/// the handover requests and preferred-candidate rows alone, clears the
/// holder and takes the clock-derived epoch.
#[test]
fn the_after_failover_statement_holds_every_row_but_the_requests() {
    for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql] {
        let s = Statements::new(dialect, &TableName::new("leases").unwrap());
        let st = s.after_failover();
        assert_eq!(st.params(), [Param::TtlMillis], "{dialect:?}: {}", st.sql());
        let sql = st.sql();
        assert!(sql.contains("NOT LIKE 'picolease.handover:%'"), "{sql}");
        assert!(sql.contains("NOT LIKE 'picolease.preferred:%'"), "{sql}");
        assert!(sql.contains("= NULL"), "{sql}");
        assert!(sql.contains("* 1048576"), "{sql}");
        assert_eq!(
            st.read_back().is_some(),
            dialect == Dialect::Mysql,
            "{dialect:?}: MySQL reads the rows back"
        );
    }
}
