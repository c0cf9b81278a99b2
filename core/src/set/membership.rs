//! Membership rows and the rank they carry (DESIGN §9, §3 "Preferred
//! holders"): how a set's node announces itself and how the survey reads
//! the others back.
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

use crate::error::ConfigError;
use crate::names::{HolderId, MAX_NAME_LEN};
use crate::rank::{Rank, RANK_KEY_LEN};
use crate::sql::MEMBER_PREFIX;

/// The name of the membership row of `holder` with `rank`.
pub fn member_row_name(holder: &HolderId, rank: &Rank) -> Result<String, ConfigError> {
    let mut name = format!("{MEMBER_PREFIX}{holder}");
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
            problem: "with the rank is too long for a lease set's membership row (prefix, id, rank key and version tag must fit 255 bytes)",
        });
    }
    Ok(name)
}

/// Reads a membership row: the holder (the row's holder column, which the
/// name must start with after [`MEMBER_PREFIX`]) and the rank its name
/// carries. `None` for a row that is not a held membership row.
pub fn read_member_row(name: &str, holder: Option<&str>) -> Option<(HolderId, Rank)> {
    let holder = holder?;
    let suffix = name.strip_prefix(MEMBER_PREFIX)?.strip_prefix(holder)?;
    let holder = HolderId::new(holder).ok()?;
    let rank = read_rank(suffix).unwrap_or_default();
    Some((holder, rank))
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

    #[test]
    fn the_lowest_rank_keeps_the_plain_name() {
        let h = holder("web-1#ab12");
        let name = member_row_name(&h, &Rank::default()).unwrap();
        assert_eq!(name, "picolease.member:web-1#ab12");
        assert_eq!(
            read_member_row(&name, Some("web-1#ab12")),
            Some((h, Rank::default()))
        );
    }

    #[test]
    fn a_rank_reads_back_whatever_the_holder_id_holds() {
        for (id, rank) in [
            ("web-2", Rank::new(3, Some("1.28.0")).unwrap()),
            ("web 2 0000", Rank::new(0, Some("v2")).unwrap()),
            ("x", Rank::new(7, None).unwrap()),
            ("y", Rank::new(1, Some("blue green")).unwrap()),
        ] {
            let name = member_row_name(&holder(id), &rank).unwrap();
            assert_eq!(
                read_member_row(&name, Some(id)),
                Some((holder(id), rank.clone())),
                "{name}"
            );
        }
    }

    #[test]
    fn foreign_or_unheld_rows_are_not_members_and_odd_suffixes_rank_lowest() {
        assert_eq!(read_member_row("picolease.member:a", None), None);
        assert_eq!(read_member_row("picolease.member:a", Some("b")), None);
        assert_eq!(read_member_row("s1", Some("s1")), None);
        for odd in ["picolease.member:a zz", "picolease.member:a-suffix"] {
            assert_eq!(
                read_member_row(odd, Some("a")),
                Some((holder("a"), Rank::default())),
                "{odd}"
            );
        }
    }

    #[test]
    fn a_name_too_long_is_refused_by_the_holder_id() {
        let long = holder(&"h".repeat(200));
        let err = member_row_name(&long, &Rank::new(1, Some("1.2.3")).unwrap()).unwrap_err();
        assert!(err.to_string().contains("membership row"), "{err}");
        assert!(member_row_name(&long, &Rank::default()).is_ok());
    }
}
