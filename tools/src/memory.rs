//! Memory as `picolease check` budgets it: sizes as the CLI accepts them
//! (`512MiB`, `8GiB`, `2GB`), and the readings the budget needs on Linux
//! (the process's resident set, the machine's available memory).

/// Parses a size with a unit: `B`, `KiB`, `MiB`, `GiB`, `TiB` (powers of
/// 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000); a fraction is allowed
/// (`1.5GiB`). The message names the value on failure.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("size {text:?} needs a unit: MiB or GiB (e.g. 512MiB, 8GiB)"))?;
    let (number, unit) = text.split_at(split);
    let bytes_per_unit: f64 = match unit.trim() {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            return Err(format!(
            "size {text:?} has unknown unit {other:?}: use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"
        ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("size {text:?} does not start with a number"))?;
    let bytes = value * bytes_per_unit;
    if !bytes.is_finite() || !(64.0 * 1024.0 * 1024.0..=1e15).contains(&bytes) {
        return Err(format!(
            "size {text:?} is out of range: at least 64MiB (the checker's own start), at most 1PB"
        ));
    }
    Ok(bytes as u64)
}

/// A size for people: `512 MiB`, `8.0 GiB`.
pub fn show_size(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    if mib < 1024.0 {
        format!("{mib:.0} MiB")
    } else {
        format!("{:.1} GiB", mib / 1024.0)
    }
}

/// A `kB` field of a `/proc` file (`VmRSS:  1234 kB`), in bytes.
fn proc_kb(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// This process's resident set (`VmRSS`), in bytes; `None` off Linux.
pub fn resident_bytes() -> Option<u64> {
    proc_kb("/proc/self/status", "VmRSS")
}

/// This process's peak resident set so far (`VmHWM`), in bytes; `None`
/// off Linux.
pub fn peak_bytes() -> Option<u64> {
    proc_kb("/proc/self/status", "VmHWM")
}

/// The machine's available memory (`MemAvailable`), in bytes; `None` off
/// Linux.
pub fn available_bytes() -> Option<u64> {
    proc_kb("/proc/meminfo", "MemAvailable")
}

/// The share of the available memory a check may use by default: it leaves
/// room for everything else the machine runs.
pub const DEFAULT_SHARE: f64 = 0.75;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size(" 100MB "), Ok(100_000_000));
    }

    #[test]
    fn bad_sizes_name_the_value() {
        for bad in ["8", "8gib", "GiB", "10MiB", "x1GiB", "2PiB", ""] {
            let error = parse_size(bad).expect_err(bad);
            assert!(error.contains(&format!("{:?}", bad.trim())), "{error}");
        }
    }

    #[test]
    fn readings_come_from_proc_on_linux() {
        if cfg!(target_os = "linux") {
            let resident = resident_bytes().expect("VmRSS");
            assert!(resident > 1 << 20, "{resident}");
            assert!(peak_bytes().expect("VmHWM") >= resident);
            assert!(available_bytes().expect("MemAvailable") > resident);
        }
    }
}
