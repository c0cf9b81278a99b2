//! Candidates and preference (DESIGN §3 "Preferred holders"): a node's
//! rank, the rule by which a leader yields to a better live candidate, and
//! the text a candidate announces itself with.
//!
//! The rule is one comparison: a leader yields to a candidate whose rank is
//! **strictly** higher than its own. Ranks are totally ordered, so every
//! yield moves the lease to a strictly higher rank: two candidates of equal
//! rank never swap, and no sequence of yields comes back to where it
//! started (at most one yield per distinct rank above the first leader's).

use std::cmp::Ordering;
use std::fmt;

use crate::error::ConfigError;
use crate::names::HolderId;

/// The longest version tag, in bytes.
pub const MAX_VERSION_TAG_LEN: usize = 64;

/// How many characters of an announcement are its rank key
/// ([`Rank::key`]): 8 for the priority, 34 for the version.
pub const RANK_KEY_LEN: usize = 42;

/// The longest announcement a row holds: the holder column of MySQL is
/// `VARBINARY(255)`.
pub const MAX_CANDIDACY_LEN: usize = 255;

/// What separates the holder id from the version tag in an announcement:
/// a control character, which neither may contain.
const TAG_SEPARATOR: char = '\t';

/// A version tag read as a version: up to four dot-separated numbers after
/// an optional `v`, then an optional `-pre-release` or `+build` suffix
/// (`1.27.3`, `v2.0`, `1.28.0-rc.1`). Missing numbers count as 0; a
/// pre-release ranks below the release of the same numbers, and two
/// pre-releases of the same numbers rank equal (the rule never yields on
/// a difference it cannot order for certain).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    numbers: [u32; 4],
    release: bool,
}

impl Version {
    /// The version a tag spells, or `None` when it is not one (`blue`,
    /// `1..2`, `2024-05-01T10:00`, five numbers).
    pub fn parse(tag: &str) -> Option<Version> {
        let tag = tag
            .strip_prefix('v')
            .or_else(|| tag.strip_prefix('V'))
            .unwrap_or(tag);
        let end = tag.find(['-', '+']).unwrap_or(tag.len());
        let (numbers_text, suffix) = tag.split_at(end);
        let release = !suffix.starts_with('-');
        if suffix.len() == 1 {
            return None;
        }
        let mut numbers = [0u32; 4];
        for (count, part) in numbers_text.split('.').enumerate() {
            if count == numbers.len()
                || part.is_empty()
                || !part.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            numbers[count] = part.parse().ok()?;
        }
        Some(Version { numbers, release })
    }
}

/// A contender's rank: its priority (`--priority`, [`crate::Config::rank`]),
/// then its version tag (`--version-tag`). A higher priority ranks higher;
/// at equal priority a tag that reads as a newer [`Version`] does (the
/// rule of Kubernetes' coordinated leader election, KEP-4355: prefer the
/// newer binary), and a tag that is no version ranks below every version.
/// Tags that are not versions, and versions that are equal, rank equal.
///
/// The default rank (priority 0, no tag) is the lowest: a node with it
/// never needs to announce itself, since it can outrank nobody.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rank {
    priority: u32,
    tag: Option<String>,
    version: Option<Version>,
}

impl Rank {
    /// A rank of `priority` with version tag `tag` (1 to 64 bytes, no
    /// control characters).
    pub fn new(priority: u32, tag: Option<&str>) -> Result<Rank, ConfigError> {
        let tag = match tag {
            None => None,
            Some(tag) => {
                let problem = if tag.is_empty() {
                    Some("is empty")
                } else if tag.len() > MAX_VERSION_TAG_LEN {
                    Some("is longer than 64 bytes")
                } else if tag.chars().any(char::is_control) {
                    Some("contains a control character")
                } else {
                    None
                };
                if let Some(problem) = problem {
                    return Err(ConfigError::BadName {
                        kind: "version tag",
                        value: tag.chars().take(80).collect(),
                        problem,
                    });
                }
                Some(tag.to_string())
            }
        };
        let version = tag.as_deref().and_then(Version::parse);
        Ok(Rank {
            priority,
            tag,
            version,
        })
    }

    /// The priority.
    pub fn priority(&self) -> u32 {
        self.priority
    }

    /// The version tag, as given.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The version the tag reads as, if it reads as one.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    /// True for the default rank, which outranks nobody: such a node
    /// announces nothing.
    pub fn is_lowest(&self) -> bool {
        self.priority == 0 && self.version.is_none()
    }

    /// The rank as fixed-width lowercase hex whose byte order is the rank
    /// order ([`RANK_KEY_LEN`] characters): the priority, whether the tag
    /// is a version, its four numbers, whether it is a release. The
    /// database compares announcements by it, byte by byte.
    pub fn key(&self) -> String {
        let mut key = format!("{:08x}", self.priority);
        match self.version {
            Some(v) => {
                key.push('1');
                for n in v.numbers {
                    key.push_str(&format!("{n:08x}"));
                }
                key.push(if v.release { '1' } else { '0' });
            }
            None => key.push_str(&"0".repeat(RANK_KEY_LEN - 8)),
        }
        key
    }
}

impl Ord for Rank {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.priority, self.version).cmp(&(other.priority, other.version))
    }
}

impl PartialOrd for Rank {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Rank {
    /// `priority 3`, `priority 0, version 1.28.0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "priority {}", self.priority)?;
        match &self.tag {
            Some(tag) => write!(f, ", version {tag}"),
            None => Ok(()),
        }
    }
}

/// The preference rule (DESIGN §3 "Preferred holders"): whether a leader
/// of rank `own` hands its lease to a live candidate of rank `candidate`.
/// Only a strictly higher rank wins, so equal candidates never swap and a
/// chain of yields only climbs.
pub fn yields_to(own: &Rank, candidate: &Rank) -> bool {
    candidate > own
}

/// A candidate as announced in its lease's preferred-candidate row: its
/// holder id and rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The candidate's holder id.
    pub holder: HolderId,
    /// Its rank.
    pub rank: Rank,
}

impl Candidate {
    /// The announcement's text: [`Rank::key`], the holder id, a tab, the
    /// version tag (empty without one). Keys first, so that byte order
    /// compares ranks. `None` when it would not fit the holder column
    /// ([`MAX_CANDIDACY_LEN`] bytes).
    pub fn announcement(&self) -> Option<String> {
        let text = format!(
            "{}{}{TAG_SEPARATOR}{}",
            self.rank.key(),
            self.holder,
            self.rank.tag().unwrap_or("")
        );
        (text.len() <= MAX_CANDIDACY_LEN).then_some(text)
    }

    /// The reservation a holder on node `holder_node` hands its lease to
    /// for this candidate ([`HolderId::reserved_for`] its node), or `None`
    /// when the candidate runs on that same node: a reservation names a
    /// node, and the holder would take it back itself.
    pub fn successor_from(&self, holder_node: &str) -> Option<HolderId> {
        let node = self.holder.node();
        if node == holder_node {
            return None;
        }
        HolderId::reserved_for(node).ok()
    }

    /// Reads an announcement back; `None` for text no picolease wrote
    /// (a hand-edited row is ignored, never fatal).
    pub fn parse(text: &str) -> Option<Candidate> {
        let key = text.get(..RANK_KEY_LEN)?;
        let priority = u32::from_str_radix(key.get(..8)?, 16).ok()?;
        let (holder, tag) = text[RANK_KEY_LEN..].split_once(TAG_SEPARATOR)?;
        let holder = HolderId::new(holder).ok()?;
        let tag = (!tag.is_empty()).then_some(tag);
        let rank = Rank::new(priority, tag).ok()?;
        (rank.key() == key).then_some(Candidate { holder, rank })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(priority: u32, tag: Option<&str>) -> Rank {
        Rank::new(priority, tag).unwrap()
    }

    #[test]
    fn versions_parse_as_numbers_with_an_optional_suffix() {
        let v = |t| Version::parse(t).map(|v| (v.numbers, v.release));
        assert_eq!(v("1.27.3"), Some(([1, 27, 3, 0], true)));
        assert_eq!(v("v2"), Some(([2, 0, 0, 0], true)));
        assert_eq!(v("V1.2.3.4"), Some(([1, 2, 3, 4], true)));
        assert_eq!(v("1.28.0-rc.1"), Some(([1, 28, 0, 0], false)));
        assert_eq!(v("1.28.0+build.7"), Some(([1, 28, 0, 0], true)));
        for not in [
            "",
            "v",
            "blue",
            "1..2",
            "1.2.3.4.5",
            "1.",
            ".1",
            "1.2-",
            "1.x",
            "99999999999",
        ] {
            assert_eq!(Version::parse(not), None, "{not:?}");
        }
    }

    #[test]
    fn bad_tags_are_refused_by_name() {
        for (tag, problem) in [
            ("", "is empty"),
            ("a\nb", "contains a control character"),
            (&"x".repeat(65), "is longer than 64 bytes"),
        ] {
            let err = Rank::new(1, Some(tag)).unwrap_err();
            assert!(err.to_string().contains(problem), "{err}");
            assert!(err.to_string().contains("version tag"), "{err}");
        }
    }

    #[test]
    fn the_key_sorts_as_the_rank_does() {
        let ranks = [
            rank(0, None),
            rank(0, Some("blue")),
            rank(0, Some("1.2.0-rc.1")),
            rank(0, Some("1.2")),
            rank(0, Some("1.10")),
            rank(0, Some("2")),
            rank(1, None),
            rank(1, Some("0.1")),
            rank(4_000_000_000, None),
        ];
        for a in &ranks {
            assert_eq!(a.key().len(), RANK_KEY_LEN);
            for b in &ranks {
                assert_eq!(a.cmp(b), a.key().cmp(&b.key()), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn announcements_read_back_and_foreign_text_is_ignored() {
        let c = Candidate {
            holder: HolderId::new("web-2#a1b2c3").unwrap(),
            rank: rank(3, Some("1.28.0")),
        };
        let text = c.announcement().unwrap();
        assert_eq!(Candidate::parse(&text), Some(c));
        let bare = Candidate {
            holder: HolderId::new("web-3").unwrap(),
            rank: rank(2, None),
        };
        assert_eq!(Candidate::parse(&bare.announcement().unwrap()), Some(bare));
        for foreign in [
            "",
            "web-2",
            &"z".repeat(50),
            &format!("{}web-2", rank(1, None).key()),
        ] {
            assert_eq!(Candidate::parse(foreign), None, "{foreign:?}");
        }
        let long = Candidate {
            holder: HolderId::new(&"h".repeat(250)).unwrap(),
            rank: rank(1, None),
        };
        assert_eq!(long.announcement(), None);
    }
}
