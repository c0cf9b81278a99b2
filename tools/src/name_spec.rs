//! Lease-name specs as `--name` accepts them: a plain name (`jobs`), or a
//! name with one decimal range in braces (`shard-{0..15}`, `s{00..99}`).
//!
//! Pure: no I/O. The whole list is checked (syntax, order, duplicates, the
//! [`MAX_NAMES`] limit) before anything acts on it, and a range's size is
//! checked before its names are generated.

use std::collections::HashMap;

/// The most lease names that all `--name` options may expand to together.
pub const MAX_NAMES: usize = 100_000;

/// Why a list of `--name` specs does not expand; each message is one line
/// and names the offending spec.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NameSpecError {
    /// The spec is the empty string.
    #[error("--name \"\": a lease name cannot be empty")]
    Empty,
    /// A `{` without its `}`, a `}` without its `{`, or a brace inside braces.
    #[error("--name {spec:?}: {problem}; a range is written like {{0..9}}")]
    Brace {
        /// The spec as given.
        spec: String,
        /// Which brace is wrong.
        problem: String,
    },
    /// More than one `{…}` in one spec.
    #[error("--name {spec:?}: only one {{A..B}} range is allowed in a name")]
    TwoRanges {
        /// The spec as given.
        spec: String,
    },
    /// Braces that do not hold `A..B` with A and B decimal digit strings.
    #[error(
        "--name {spec:?}: {range:?} is not a range of decimal numbers; \
         write {{A..B}}, e.g. {{0..9}} or {{00..99}}"
    )]
    NotARange {
        /// The spec as given.
        spec: String,
        /// The braces and what they hold, e.g. `{a..b}`.
        range: String,
    },
    /// A bound of the range does not fit in a `u64`.
    #[error("--name {spec:?}: the number {number} is too large (at most {max})", max = u64::MAX)]
    NumberTooLarge {
        /// The spec as given.
        spec: String,
        /// The bound as written.
        number: String,
    },
    /// The range's end is below its start.
    #[error("--name {spec:?}: the range ends before it starts ({start} > {end})")]
    Backwards {
        /// The spec as given.
        spec: String,
        /// The start of the range.
        start: u64,
        /// The end of the range.
        end: u64,
    },
    /// Expanding up to and including this spec gives more than [`MAX_NAMES`].
    #[error(
        "--name {spec:?}: {total} lease names in total, more than the limit of {max}",
        max = MAX_NAMES
    )]
    TooMany {
        /// The spec that passes the limit.
        spec: String,
        /// The number of names up to and including this spec.
        total: u128,
    },
    /// The same lease name comes out twice.
    #[error("--name {spec:?}: lease name {name:?} is given twice (first by --name {first:?})")]
    Duplicate {
        /// The spec that repeats the name.
        spec: String,
        /// The repeated name.
        name: String,
        /// The spec that gave it first (may equal `spec`).
        first: String,
    },
}

/// One parsed spec: the text around the braces and the range, if any.
struct Spec<'a> {
    prefix: &'a str,
    range: Option<Range>,
    suffix: &'a str,
}

/// An inclusive range, and the width to zero-pad to (0: no padding).
struct Range {
    start: u64,
    end: u64,
    width: usize,
}

impl Spec<'_> {
    /// How many names the spec stands for (a range can hold 2^64).
    fn count(&self) -> u128 {
        match &self.range {
            None => 1,
            Some(r) => u128::from(r.end - r.start) + 1,
        }
    }

    /// The names in order; call only once [`Spec::count`] is known small.
    fn names(&self) -> impl Iterator<Item = String> + '_ {
        let (start, end, width) = match &self.range {
            None => (0, 0, None),
            Some(r) => (r.start, r.end, Some(r.width)),
        };
        (start..=end).map(move |n| match width {
            None => format!("{}{}", self.prefix, self.suffix),
            Some(width) => format!("{}{n:0width$}{}", self.prefix, self.suffix),
        })
    }
}

/// Expands the values of repeated `--name` options into lease names, in order.
///
/// Each spec's names come in the order given, ranges counting up; the specs'
/// names follow one another. Any error rejects the whole list.
pub fn expand_names(specs: &[String]) -> Result<Vec<String>, NameSpecError> {
    let mut names = Vec::new();
    // Each name seen so far, and the index of the spec that gave it.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut total: u128 = 0;
    for (index, spec) in specs.iter().enumerate() {
        let parsed = parse(spec)?;
        total += parsed.count();
        if total > MAX_NAMES as u128 {
            return Err(NameSpecError::TooMany {
                spec: spec.clone(),
                total,
            });
        }
        for name in parsed.names() {
            if let Some(&first) = seen.get(&name) {
                return Err(NameSpecError::Duplicate {
                    spec: spec.clone(),
                    name,
                    first: specs[first].clone(),
                });
            }
            seen.insert(name.clone(), index);
            names.push(name);
        }
    }
    Ok(names)
}

/// Splits a spec around its braces and reads the range in them.
fn parse(spec: &str) -> Result<Spec<'_>, NameSpecError> {
    if spec.is_empty() {
        return Err(NameSpecError::Empty);
    }
    let brace = |problem: &str| NameSpecError::Brace {
        spec: spec.to_owned(),
        problem: problem.to_owned(),
    };
    let mut open = None;
    let mut braces = None;
    let mut pairs = 0;
    for (at, c) in spec.char_indices() {
        match c {
            '{' if open.is_some() => return Err(brace("a '{' inside braces")),
            '{' => open = Some(at),
            '}' => {
                let start = open.take().ok_or_else(|| brace("a '}' without its '{'"))?;
                pairs += 1;
                braces.get_or_insert((start, at));
            }
            _ => {}
        }
    }
    if open.is_some() {
        return Err(brace("a '{' without its '}'"));
    }
    if pairs > 1 {
        return Err(NameSpecError::TwoRanges {
            spec: spec.to_owned(),
        });
    }
    let Some((open, close)) = braces else {
        return Ok(Spec {
            prefix: spec,
            range: None,
            suffix: "",
        });
    };
    let inside = &spec[open + 1..close];
    let not_a_range = || NameSpecError::NotARange {
        spec: spec.to_owned(),
        range: spec[open..=close].to_owned(),
    };
    let (a, b) = inside.split_once("..").ok_or_else(not_a_range)?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return Err(not_a_range());
    }
    let number = |s: &str| {
        s.parse::<u64>().map_err(|_| NameSpecError::NumberTooLarge {
            spec: spec.to_owned(),
            number: s.to_owned(),
        })
    };
    let (start, end) = (number(a)?, number(b)?);
    if end < start {
        return Err(NameSpecError::Backwards {
            spec: spec.to_owned(),
            start,
            end,
        });
    }
    let width = if a.len() > 1 && a.starts_with('0') {
        a.len()
    } else {
        0
    };
    Ok(Spec {
        prefix: &spec[..open],
        range: Some(Range { start, end, width }),
        suffix: &spec[close + 1..],
    })
}

#[cfg(test)]
#[path = "name_spec_error_tests.rs"]
mod error_tests;
#[cfg(test)]
#[path = "name_spec_tests.rs"]
mod tests;
