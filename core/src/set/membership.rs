//! Membership rows and what they carry (DESIGN §9, §3 "Preferred
//! holders", §5 "Work that fails"): how a set's node announces itself,
//! its rank and its health, and how the survey reads the others back.
//!
//! A membership row is a lease named [`MEMBER_PREFIX`] + the holder id,
//! held by that holder. A node with a rank above the lowest appends it to
//! the name: a space, the 42-character rank key ([`Rank::key`], whose byte
//! order is the rank order) and, with a version tag, a space and the tag.
//! The name, not another column, carries the rank, because every
//! statement of a set binds one holder for all its rows: the membership
//! row is renewed in the same batch as the leases. A reader splits the
//! name at the holder column's value, so a holder id that itself contains
//! a space is read right; text no picolease wrote reads as the lowest
//! rank, never as an error.
//!
//! A node whose health probe fails holds its **unhealthy row** instead:
//! the same name with [`UNHEALTHY_MARK`] before the holder id. A
//! picolease from before set health does not read that row as a member
//! (its name no longer starts with the holder id after the prefix), so
//! every version agrees that an unhealthy node is out of the share: new
//! ones because they read the mark, old ones because they see no member.

use crate::error::ConfigError;
use crate::names::{HolderId, MAX_NAME_LEN};
use crate::rank::{Rank, RANK_KEY_LEN};
use crate::sql::MEMBER_PREFIX;

/// What comes before the holder id in an unhealthy member's row.
pub const UNHEALTHY_MARK: char = '~';

/// A live member as its membership row tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRow {
    /// The member's holder id.
    pub holder: HolderId,
    /// The rank the row's name carries.
    pub rank: Rank,
    /// False for an unhealthy row ([`UNHEALTHY_MARK`]).
    pub healthy: bool,
}

/// The name of the membership row of `holder` with `rank`.
pub fn member_row_name(holder: &HolderId, rank: &Rank) -> Result<String, ConfigError> {
    row_name(holder, rank, true)
}

/// The name of the row `holder` holds instead of its membership row while
/// its health probe fails: [`member_row_name`] with [`UNHEALTHY_MARK`]
/// before the holder id.
pub fn unhealthy_row_name(holder: &HolderId, rank: &Rank) -> Result<String, ConfigError> {
    row_name(holder, rank, false)
}

fn row_name(holder: &HolderId, rank: &Rank, healthy: bool) -> Result<String, ConfigError> {
    let mut name = String::from(MEMBER_PREFIX);
    if !healthy {
        name.push(UNHEALTHY_MARK);
    }
    name.push_str(holder.as_str());
    if !rank.is_lowest() {
        name.push(' ');
        name.push_str(&rank.key());
        if let Some(tag) = rank.tag() {
            name.push(' ');
            name.push_str(tag);
        }
    }
    if name.len() > MAX_NAME_LEN {
        return Err(ConfigError::BadName {
            kind: "holder id",
            value: holder.as_str().chars().take(80).collect(),
            problem: "with the rank is too long for a lease set's membership row (prefix, health mark, id, rank key and version tag must fit 255 bytes)",
        });
    }
    Ok(name)
}

/// Reads a membership row: the holder (the row's holder column, which the
/// name must start with after [`MEMBER_PREFIX`], or after it and
/// [`UNHEALTHY_MARK`]), the rank its name carries and whether it is an
/// unhealthy row. `None` for a row that is not a held membership row.
pub fn read_member_row(name: &str, holder: Option<&str>) -> Option<MemberRow> {
    let holder_text = holder?;
    let rest = name.strip_prefix(MEMBER_PREFIX)?;
    let plain = rest.strip_prefix(holder_text);
    let marked = rest
        .strip_prefix(UNHEALTHY_MARK)
        .and_then(|r| r.strip_prefix(holder_text));
    // The plain reading wins unless its suffix is one picolease never
    // writes and the marked reading's is (a holder id that itself starts
    // with the mark).
    let written = |s: &&str| s.is_empty() || s.starts_with(' ');
    let (suffix, healthy) = match (plain, marked) {
        (Some(p), Some(m)) if !written(&p) && written(&m) => (m, false),
        (Some(p), _) => (p, true),
        (None, Some(m)) => (m, false),
        (None, None) => return None,
    };
    let holder = HolderId::new(holder_text).ok()?;
    let rank = read_rank(suffix).unwrap_or_default();
    Some(MemberRow {
        holder,
        rank,
        healthy,
    })
}

/// The rank after the holder id: ` <key>` or ` <key> <tag>`.
fn read_rank(suffix: &str) -> Option<Rank> {
    let rest = suffix.strip_prefix(' ')?;
    let key = rest.get(..RANK_KEY_LEN)?;
    let tag = match &rest[RANK_KEY_LEN..] {
        "" => None,
        more => Some(more.strip_prefix(' ')?),
    };
    let priority = u32::from_str_radix(key.get(..8)?, 16).ok()?;
    let rank = Rank::new(priority, tag).ok()?;
    (rank.key() == key).then_some(rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(id: &str) -> HolderId {
        HolderId::new(id).unwrap()
    }

    fn member(id: &str, rank: Rank, healthy: bool) -> Option<MemberRow> {
        Some(MemberRow {
            holder: holder(id),
            rank,
            healthy,
        })
    }

    #[test]
    fn the_lowest_rank_keeps_the_plain_name() {
        let h = holder("web-1#ab12");
        let name = member_row_name(&h, &Rank::default()).unwrap();
        assert_eq!(name, "picolease.member:web-1#ab12");
        assert_eq!(
            read_member_row(&name, Some("web-1#ab12")),
            member("web-1#ab12", Rank::default(), true)
        );
    }

    #[test]
    fn a_rank_and_health_read_back_whatever_the_holder_id_holds() {
        for (id, rank) in [
            ("web-2", Rank::new(3, Some("1.28.0")).unwrap()),
            ("web 2 0000", Rank::new(0, Some("v2")).unwrap()),
            ("x", Rank::new(7, None).unwrap()),
            ("y", Rank::new(1, Some("blue green")).unwrap()),
            ("~z", Rank::default()),
            ("~", Rank::new(2, None).unwrap()),
            ("~~ 1", Rank::new(0, Some("1.0")).unwrap()),
        ] {
            let name = member_row_name(&holder(id), &rank).unwrap();
            assert_eq!(
                read_member_row(&name, Some(id)),
                member(id, rank.clone(), true),
                "{name}"
            );
            let name = unhealthy_row_name(&holder(id), &rank).unwrap();
            assert_eq!(
                read_member_row(&name, Some(id)),
                member(id, rank.clone(), false),
                "{name}"
            );
        }
    }

    #[test]
    fn the_unhealthy_row_is_marked_before_the_holder_id() {
        let rank = Rank::new(1, Some("2.0")).unwrap();
        assert_eq!(
            unhealthy_row_name(&holder("web-1"), &Rank::default()).unwrap(),
            "picolease.member:~web-1"
        );
        assert_eq!(
            unhealthy_row_name(&holder("web-1"), &rank).unwrap(),
            format!("picolease.member:~web-1 {} 2.0", rank.key())
        );
        // An older reader (the name must start with the holder id after
        // the prefix) finds no member in it.
        let name = unhealthy_row_name(&holder("web-1"), &rank).unwrap();
        assert!(!name["picolease.member:".len()..].starts_with("web-1"));
    }

    #[test]
    fn foreign_or_unheld_rows_are_not_members_and_odd_suffixes_rank_lowest() {
        assert_eq!(read_member_row("picolease.member:a", None), None);
        assert_eq!(read_member_row("picolease.member:a", Some("b")), None);
        assert_eq!(read_member_row("picolease.member:~a", Some("b")), None);
        assert_eq!(read_member_row("s1", Some("s1")), None);
        for odd in ["picolease.member:a zz", "picolease.member:a-suffix"] {
            assert_eq!(
                read_member_row(odd, Some("a")),
                member("a", Rank::default(), true),
                "{odd}"
            );
        }
        assert_eq!(
            read_member_row("picolease.member:~a zz", Some("a")),
            member("a", Rank::default(), false)
        );
    }

    #[test]
    fn a_name_too_long_is_refused_by_the_holder_id() {
        let long = holder(&"h".repeat(200));
        let err = member_row_name(&long, &Rank::new(1, Some("1.2.3")).unwrap()).unwrap_err();
        assert!(err.to_string().contains("membership row"), "{err}");
        assert!(member_row_name(&long, &Rank::default()).is_ok());
        let edge = holder(&"h".repeat(255 - "picolease.member:".len()));
        assert!(member_row_name(&edge, &Rank::default()).is_ok());
        assert!(unhealthy_row_name(&edge, &Rank::default()).is_err());
    }
}
