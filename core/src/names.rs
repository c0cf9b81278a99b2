//! The validated names the protocol carries: lease names, holder ids,
//! epochs and table names.
//!
//! Lease names and holder ids are always bound as parameters, never spliced
//! into SQL; they are validated only so that a typo (an empty string, a
//! stray newline, a megabyte of text) is caught at configuration time with
//! an error that names it. Table names *are* spliced (SQL cannot bind an
//! identifier), so they are restricted to plain identifiers and quoted by
//! the builder.

use std::fmt;
use std::sync::Arc;

use crate::error::ConfigError;

/// The longest lease name or holder id accepted, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// What ends a row's holder when the row is reserved for a node by a
/// planned handover ([`HolderId::reserved_for`]).
pub const RESERVATION_MARK: char = '#';
/// The longest table name accepted (schema prefix included), in bytes.
/// PostgreSQL identifiers stop at 63 bytes, and the release notification
/// channel is the table name plus `_released` (9 bytes), which must fit too.
pub const MAX_TABLE_LEN: usize = 54;

/// The fencing token: bumped on every acquisition, never reused.
///
/// Stored as a 64-bit signed integer in the database; a negative value in a
/// row is rejected when the row is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(u64);

impl Epoch {
    /// An epoch from its number.
    pub const fn new(epoch: u64) -> Self {
        Epoch(epoch)
    }

    /// The epoch's number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The epoch as the database stores it. Epochs come from the database,
    /// which stores `i64`, so every epoch the core sees fits.
    pub fn to_i64(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

fn check_name(kind: &'static str, value: &str) -> Result<(), ConfigError> {
    let problem = if value.is_empty() {
        Some("is empty")
    } else if value.len() > MAX_NAME_LEN {
        Some("is longer than 255 bytes")
    } else if value.chars().any(char::is_control) {
        Some("contains a control character")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(ConfigError::BadName {
            kind,
            value: value.chars().take(80).collect(),
            problem,
        }),
        None => Ok(()),
    }
}

/// The name of a lease: the primary key of its row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseName(Arc<str>);

impl LeaseName {
    /// A lease name: 1 to 255 bytes, no control characters.
    pub fn new(name: &str) -> Result<Self, ConfigError> {
        check_name("lease name", name)?;
        Ok(LeaseName(name.into()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Looked up by its text: a driver finds a lease named in a statement's
/// result without building a name (hash and order are the text's).
impl std::borrow::Borrow<str> for LeaseName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The id of one running contender. Must be unique per running instance:
/// the acquire statement lets a holder take its own row back without
/// waiting (to recover from a lost reply), so two live processes sharing an
/// id would both believe they lead.
///
/// Cloning is cheap (a reference count), so leadership updates that carry
/// the current holder do not allocate.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HolderId(Arc<str>);

impl HolderId {
    /// A holder id: 1 to 255 bytes, no control characters, not ending in
    /// `#` (a row whose holder ends in `#` is reserved for a node, DESIGN
    /// §3 "Planned handover": no running holder may look like one).
    pub fn new(id: &str) -> Result<Self, ConfigError> {
        check_name("holder id", id)?;
        if id.ends_with(RESERVATION_MARK) {
            return Err(ConfigError::BadName {
                kind: "holder id",
                value: id.chars().take(80).collect(),
                problem: "ends with '#', which marks a row reserved for a node",
            });
        }
        Ok(HolderId(id.into()))
    }

    /// The reservation a planned handover writes for node `node` (DESIGN
    /// §3 "Planned handover"): the node's name and `#`, which no running
    /// holder's id can be. Any process of that node may take the row at
    /// once (its acquire binds [`HolderId::reservation`]); nobody else can
    /// until the reservation runs out. An error names a node that cannot
    /// be reserved for (empty, a control character, over 254 bytes).
    pub fn reserved_for(node: &str) -> Result<Self, ConfigError> {
        check_name("node name", node)?;
        if node.len() >= MAX_NAME_LEN {
            return Err(ConfigError::BadName {
                kind: "node name",
                value: node.chars().take(80).collect(),
                problem: "is longer than 254 bytes (a reservation adds '#')",
            });
        }
        Ok(HolderId(format!("{node}{RESERVATION_MARK}").into()))
    }

    /// A holder read back from a row: a holder id, or a reservation
    /// ([`HolderId::reserved_for`]).
    pub fn from_row(text: &str) -> Result<Self, ConfigError> {
        match text.strip_suffix(RESERVATION_MARK) {
            Some(node) => HolderId::reserved_for(node),
            None => HolderId::new(text),
        }
    }

    /// The reservation that lets this holder take a row handed over to its
    /// node: `<node>#` ([`HolderId::node`]).
    pub fn reservation(&self) -> String {
        format!("{}{RESERVATION_MARK}", self.node())
    }

    /// For a row's holder: the node it is reserved for, if it is a
    /// reservation ([`HolderId::reserved_for`]) rather than a holder.
    pub fn reserved_node(&self) -> Option<&str> {
        self.0.strip_suffix(RESERVATION_MARK)
    }

    /// The conventional unique id of a running instance: host, process id
    /// and a random suffix supplied by the caller (the core has no entropy).
    pub fn unique(host: &str, pid: u32, nonce: u64) -> Self {
        // At most 200 bytes of host (not characters: the id must stay
        // within MAX_NAME_LEN bytes whatever the script of the host name).
        let mut host_part = String::new();
        for c in host.chars().filter(|c| !c.is_control()) {
            if host_part.len() + c.len_utf8() > 200 {
                break;
            }
            host_part.push(c);
        }
        let host = host_part;
        let host = if host.is_empty() { "host".into() } else { host };
        HolderId(format!("{host}-{pid}-{:06x}", nonce & 0xff_ffff).into())
    }

    /// The id of one running process of node `node`: the node's name, `#`
    /// and a per-process incarnation (the low 24 bits of `nonce`, in hex).
    /// Operators give stable names (a host or pod name), and two processes
    /// may be given the same one: the incarnation keeps their ids apart, so
    /// the acquire's `holder = me` clause (which lets a process recover its
    /// own lost reply) never lets one take the row from the other.
    pub fn incarnation(node: &str, nonce: u64) -> Result<Self, ConfigError> {
        const SUFFIX: usize = 7; // '#' and six hex digits
        check_name("node name", node)?;
        if node.len() + SUFFIX > MAX_NAME_LEN {
            return Err(ConfigError::BadName {
                kind: "node name",
                value: node.chars().take(80).collect(),
                problem: "is longer than 248 bytes (the holder id adds 7)",
            });
        }
        Ok(HolderId(format!("{node}#{:06x}", nonce & 0xff_ffff).into()))
    }

    /// The node name an id was made from by [`HolderId::incarnation`] (the
    /// text before the last `#`), or the whole id.
    pub fn node(&self) -> &str {
        self.0.rsplit_once('#').map_or(&self.0, |(node, _)| node)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A table name, optionally schema-qualified (`schema.table`). Each part is
/// a plain identifier: an ASCII letter or underscore, then letters, digits
/// or underscores.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableName {
    schema: Option<String>,
    table: String,
}

/// The table used when none is configured.
pub const DEFAULT_TABLE: &str = "picolease_leases";

impl TableName {
    /// Validates `name` as `table` or `schema.table`.
    pub fn new(name: &str) -> Result<Self, ConfigError> {
        let bad = |problem: &'static str| ConfigError::BadTableName {
            value: name.chars().take(80).collect(),
            problem,
        };
        if name.is_empty() {
            return Err(bad("is empty"));
        }
        if name.len() > MAX_TABLE_LEN {
            return Err(bad("is longer than 54 bytes"));
        }
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() > 2 {
            return Err(bad(
                "has more than one dot (expected table or schema.table)",
            ));
        }
        for part in &parts {
            let mut chars = part.chars();
            match chars.next() {
                None => return Err(bad("has an empty part")),
                Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
                    return Err(bad("must start with an ASCII letter or underscore"))
                }
                _ => {}
            }
            if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(bad(
                    "may contain only ASCII letters, digits and underscores",
                ));
            }
        }
        Ok(match parts.as_slice() {
            [table] => TableName {
                schema: None,
                table: table.to_string(),
            },
            [schema, table] => TableName {
                schema: Some(schema.to_string()),
                table: table.to_string(),
            },
            _ => unreachable!("checked above"),
        })
    }

    /// The schema, if the name was qualified.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The table part of the name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The PostgreSQL notification channel on which releases are announced.
    pub fn release_channel(&self) -> String {
        format!("{self}_released")
    }
}

impl Default for TableName {
    fn default() -> Self {
        TableName {
            schema: None,
            table: DEFAULT_TABLE.to_string(),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers() {
        assert!(TableName::new("picolease_leases").is_ok());
        assert_eq!(TableName::new("s1.t_2").unwrap().schema(), Some("s1"));
        for bad in [
            "",
            "x\"; DROP TABLE y; --",
            "a b",
            "1abc",
            "a.b.c",
            ".t",
            "t'",
            "tablé",
            &"t".repeat(55),
        ] {
            let err = TableName::new(bad).unwrap_err();
            assert!(
                matches!(err, ConfigError::BadTableName { .. }),
                "{bad:?} gave {err:?}"
            );
        }
    }

    #[test]
    fn names_reject_empty_long_and_control_characters() {
        assert!(LeaseName::new("maintenance").is_ok());
        assert!(LeaseName::new("").is_err());
        assert!(LeaseName::new(&"x".repeat(256)).is_err());
        assert!(HolderId::new("node\n1").is_err());
        let err = HolderId::new("").unwrap_err();
        assert_eq!(err.to_string(), "holder id \"\" is empty");
    }

    #[test]
    fn names_up_to_255_bytes_and_epochs_read_back() {
        assert!(LeaseName::new(&"x".repeat(255)).is_ok());
        assert!(HolderId::new(&"é".repeat(127)).is_ok());
        let lease = LeaseName::new("maintenance").unwrap();
        assert_eq!(
            (lease.as_str(), lease.to_string()),
            ("maintenance", "maintenance".to_string())
        );
        // The host part keeps up to 200 bytes, whole characters only.
        let id = HolderId::unique(&"h".repeat(200), 1, 0);
        assert_eq!(id.as_str(), format!("{}-1-000000", "h".repeat(200)));
        let id = HolderId::unique(&"é".repeat(101), 1, 0);
        assert_eq!(id.as_str(), format!("{}-1-000000", "é".repeat(100)));
        assert_eq!(id.to_string(), id.as_str());
        let e = Epoch::new(42);
        assert_eq!(
            (e.get(), e.to_i64(), e.to_string()),
            (42, 42, "42".to_string())
        );
    }

    #[test]
    fn incarnations_of_one_node_differ_and_name_their_node() {
        let a = HolderId::incarnation("web-1", 0xabcdef).unwrap();
        let b = HolderId::incarnation("web-1", 0x123456).unwrap();
        assert_eq!(a.as_str(), "web-1#abcdef");
        assert_ne!(a, b);
        assert_eq!((a.node(), b.node()), ("web-1", "web-1"));
        assert_eq!(HolderId::new("plain").unwrap().node(), "plain");
        assert!(HolderId::incarnation(&"x".repeat(248), 1).is_ok());
        let long = HolderId::incarnation(&"x".repeat(249), 1).unwrap_err();
        assert!(long.to_string().contains("248"), "{long}");
        assert!(HolderId::incarnation("", 1).is_err());
        assert!(HolderId::incarnation("a\nb", 1).is_err());
    }

    #[test]
    fn unique_holder_ids_carry_host_pid_and_nonce() {
        let id = HolderId::unique("web-1", 42, 0xabcdef);
        assert_eq!(id.as_str(), "web-1-42-abcdef");
        assert!(HolderId::new(id.as_str()).is_ok());
    }
}
