//! The fuzz bodies on stable: every committed corpus file of every target
//! in `fuzz/corpus/<target>/` is replayed through the body the fuzzer runs
//! (`picolease_core::fuzzing`), and so are a few thousand pseudo-random
//! inputs from a fixed seed. A body panics on a broken invariant, so a
//! corpus file that reproduces a bug fails this test by name.

use std::path::{Path, PathBuf};

use picolease_core::fuzzing::TARGETS;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

fn replay(target: &str, body: fn(&[u8]), name: &str, data: &[u8]) {
    let outcome = std::panic::catch_unwind(|| body(data));
    if let Err(panic) = outcome {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "fuzz target {target}: input {name} ({} bytes) broke an invariant: {message}",
            data.len()
        );
    }
}

/// Every target has a committed corpus, and every file in it passes.
#[test]
fn every_committed_corpus_file_passes_its_fuzz_body() {
    for &(target, body) in TARGETS {
        let dir = corpus_dir(target);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus {} unreadable: {e}", dir.display()))
            .map(|entry| entry.expect("directory entry").path())
            .filter(|path| path.is_file())
            .collect();
        files.sort();
        assert!(
            files.len() >= 5,
            "corpus {} has only {} files",
            dir.display(),
            files.len()
        );
        for path in files {
            let data = std::fs::read(&path).expect("corpus file");
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            replay(target, body, &name, &data);
        }
    }
}

/// Beyond the corpus: pseudo-random inputs of every length up to 2 KiB,
/// from a fixed seed (so a failure reproduces), through every body.
#[test]
fn pseudo_random_inputs_pass_every_fuzz_body() {
    let mut state = 0x5eed_u64;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let cases: usize = std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    for case in 0..cases {
        let len = (next() % 2048) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        for &(target, body) in TARGETS {
            replay(target, body, &format!("pseudo-random #{case}"), &data);
        }
    }
}

// Findings of the fuzz bodies (and of writing them) that were bugs in the
// core, each reduced to a test; fixed in the core since, they stay as
// regression tests.

mod findings {
    use std::time::Duration;

    use picolease_core::sql::{Cell, Dialect, Statements};
    use picolease_core::{
        Command, Config, Demotion, Epoch, HolderId, Instant, LeaseName, LeaseState, Operation,
        Reply, TableName,
    };

    fn leader() -> LeaseState {
        let config = Config::new(
            LeaseName::new("lease").unwrap(),
            HolderId::new("me").unwrap(),
        );
        let mut lease = LeaseState::new(config, Instant::ZERO).unwrap();
        lease.handle_timeout(Instant::ZERO);
        let Some(Command::Execute {
            request,
            operation: Operation::Acquire,
        }) = lease.poll_command()
        else {
            panic!("expected an acquire")
        };
        lease.handle_reply(
            Instant::ZERO + Duration::from_millis(1),
            request,
            Reply::Acquired {
                epoch: Epoch::new(1),
            },
        );
        while lease.poll_command().is_some() {}
        assert!(lease.leadership().is_leader());
        lease
    }

    /// Found by `lease_state` (a monotone run: leader, then a release
    /// notice arriving after the deadline, with no timeout in between — a
    /// driver paused past its wake-up). Every other input checks the
    /// deadline first; `handle_release_notice` returns early for a leader,
    /// so the node still reports itself leader past its deadline until the
    /// next input.
    #[test]
    fn release_notice_past_the_deadline_demotes() {
        let mut lease = leader();
        let deadline = lease.leader_deadline().unwrap();
        lease.handle_release_notice(deadline + Duration::from_secs(1));
        let commands: Vec<Command> = std::iter::from_fn(|| lease.poll_command()).collect();
        assert!(
            !lease.leadership().is_leader(),
            "still leading {:?} past the deadline; commands {commands:?}",
            Duration::from_secs(1)
        );
        assert!(commands.contains(&Command::StopWork {
            epoch: Epoch::new(1),
            reason: Demotion::Expired
        }));
    }

    /// `Statements::fence_from(first)` overflows `usize` (a panic with
    /// debug assertions, a wrapped `$0` without) when `first` is within
    /// three of `usize::MAX`, instead of refusing or saturating.
    #[test]
    fn fence_from_never_panics() {
        let s = Statements::new(Dialect::Postgres, &TableName::default());
        let outcome = std::panic::catch_unwind(|| s.fence_from(usize::MAX).sql().to_string());
        assert!(outcome.is_ok(), "fence_from(usize::MAX) panicked");
    }

    /// `HolderId::unique` keeps up to 200 *characters* of the host name,
    /// so a non-ASCII host gives an id over the 255-byte limit that
    /// `HolderId::new` enforces; another node that reads this holder from
    /// the row then fails to decode its acquire reply (a fatal error).
    #[test]
    fn unique_holder_ids_are_valid_holder_ids() {
        let id = HolderId::unique(&"é".repeat(200), 42, 7);
        assert!(
            HolderId::new(id.as_str()).is_ok(),
            "unique id of {} bytes is not a valid holder id",
            id.as_str().len()
        );
        let s = Statements::new(Dialect::Sqlite, &TableName::default());
        let row = vec![vec![
            Cell::Text(id.as_str().to_string()),
            Cell::Int(1),
            Cell::Int(5000),
        ]];
        let other = HolderId::new("other").unwrap();
        assert!(
            s.decode_reply(Operation::Acquire, &other, &row).is_ok(),
            "a follower cannot decode a row held by a unique id"
        );
    }
}
