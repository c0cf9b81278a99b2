//! docs/operations.md stays true: every `picolease` command it shows names
//! a real subcommand and real flags, and the exit codes its table promises
//! for `run` are the ones the binary returns (on SQLite, in a temporary
//! directory).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

const GUIDE: &str = include_str!("../../docs/operations.md");

fn picolease() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_picolease"));
    command
        .env_remove("PICOLEASE_DB")
        .env_remove("PICOLEASE_LOG");
    command
}

/// Splits a shell line into words, honouring single and double quotes
/// (enough for the guide's examples).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// The arguments after `picolease` of every command the guide shows: the
/// `$ ` lines of its console blocks and the systemd unit's `ExecStart`
/// (with its continuation line), cut at `--` (CMD follows), a pipe, a
/// background `&` or a comment.
fn guide_commands() -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let lines: Vec<&str> = GUIDE.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let text = if let Some(rest) = line.strip_prefix("$ ") {
            rest.to_string()
        } else if let Some(rest) = line.strip_prefix("ExecStart=") {
            let mut text = rest.trim_end_matches('\\').to_string();
            if rest.ends_with('\\') {
                text.push(' ');
                text.push_str(lines[i + 1].trim());
            }
            text
        } else {
            continue;
        };
        let words = words(&text);
        let Some(start) = words
            .iter()
            .position(|w| w == "picolease" || w.ends_with("/picolease"))
        else {
            continue;
        };
        let args: Vec<String> = words[start + 1..]
            .iter()
            .take_while(|w| !matches!(w.as_str(), "--" | "|" | "&" | ";") && !w.starts_with('#'))
            .cloned()
            .collect();
        found.push((line.to_string(), args));
    }
    found
}

#[test]
fn every_picolease_command_in_the_guide_names_a_real_subcommand_and_real_flags() {
    let commands = guide_commands();
    assert!(
        commands.len() >= 15,
        "expected the guide's commands, found {}",
        commands.len()
    );
    for (line, args) in commands {
        // Global flags (--db, --table) come with a value; the first other
        // word is the subcommand.
        let mut flags = Vec::new();
        let mut subcommand = None;
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            if arg == "--db" || arg == "--table" {
                iter.next();
            } else if let Some(flag) = arg.strip_prefix("--") {
                flags.push(flag.split('=').next().unwrap_or(flag).to_string());
            } else if subcommand.is_none() && !arg.starts_with('-') {
                subcommand = Some(arg.clone());
            }
        }
        let subcommand = subcommand.unwrap_or_else(|| panic!("no subcommand in {line:?}"));
        let help = picolease()
            .args([subcommand.as_str(), "--help"])
            .output()
            .expect("picolease runs");
        assert!(
            help.status.success(),
            "{line:?}: `picolease {subcommand} --help` failed: {}",
            String::from_utf8_lossy(&help.stderr)
        );
        let help = String::from_utf8_lossy(&help.stdout);
        for flag in flags {
            assert!(
                help.contains(&format!("--{flag}")),
                "{line:?}: `picolease {subcommand}` has no --{flag}"
            );
        }
    }
}

struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "picolease-ops-guide-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn run(&self, extra: &[&str]) -> Output {
        let db = format!("sqlite://{}", self.0.join("app.db").display());
        picolease()
            .args(["--db", &db, "--table", "ops_guide_leases", "run"])
            .args(["--name", "once", "--node", "web-1", "--ttl", "2s"])
            .args(extra)
            .output()
            .expect("picolease runs")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn run_exits_as_the_guides_table_says() {
    let scratch = Scratch::new();
    // CMD's own status when it exits by itself.
    let out = scratch.run(&["--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // 128 + N when a signal N ended it.
    let out = scratch.run(&["--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    // 1: CMD cannot be started.
    let out = scratch.run(&["--", "/nonexistent/picolease-ops-guide-job"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // 2: a grace that does not fit, a malformed --listen.
    let out = scratch.run(&["--grace", "1s", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--grace 1.00s must be below"));
    let out = scratch.run(&["--listen", "9464"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn the_guide_keeps_the_place_for_the_bench_output() {
    assert!(GUIDE.contains("<!-- bench output -->"));
}
