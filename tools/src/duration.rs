//! Durations as the CLI accepts them: `500ms`, `2s`, `1.5s`, `1m`, `1h`.

use std::time::Duration;

/// Parses a duration with a unit; the message names the value on failure.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("duration {text:?} needs a unit: ms, s, m or h (e.g. 500ms, 2s)"))?;
    let (number, unit) = text.split_at(split);
    let millis_per_unit = match unit {
        "ms" => 1.0,
        "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => {
            return Err(format!(
                "duration {text:?} has unknown unit {unit:?}: use ms, s, m or h"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} does not start with a number"))?;
    let millis = value * millis_per_unit;
    if !millis.is_finite() || millis > 1e12 {
        return Err(format!("duration {text:?} is too large"));
    }
    Ok(Duration::from_micros((millis * 1000.0).round() as u64))
}

/// Formats a duration the way the CLI prints it: `850ms`, `2.04s`.
pub fn show(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.2}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bad_values() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in [
            "",
            "5",
            "s",
            "5x",
            "-1s",
            "1..2s",
            "99999999999999999h",
            "1e3s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
