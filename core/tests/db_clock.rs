//! Property: readings of the database clock that the local clock can
//! explain never demote a leader, whatever the statement latencies (busy
//! waits included) and however the database clock drifts within ρ; one step
//! beyond ρ·ttl always demotes it with `Demotion::Clock` (DESIGN §4b).

use std::time::Duration;

use picolease_core::{
    Command, Config, Demotion, Epoch, HolderId, Instant, LeaseName, LeaseState, Reply, RequestId,
};
use proptest::prelude::*;

const TTL_MS: u64 = 10_000;

fn ms(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000_000)
}

/// A leader whose term runs far past the readings below (its renewals
/// are not simulated: only the clock check is under test).
fn leader() -> LeaseState {
    let config = Config::with_ttl(
        LeaseName::new("l").unwrap(),
        HolderId::new("me").unwrap(),
        Duration::from_millis(TTL_MS),
    );
    let mut s = LeaseState::new(config, ms(0)).unwrap();
    s.handle_timeout(ms(0));
    s.handle_reply(
        ms(1),
        RequestId(1),
        Reply::Acquired {
            epoch: Epoch::new(1),
        },
    );
    while s.poll_command().is_some() {}
    s
}

/// Readings every 10–60 ms of local time, each statement taking 0–40 ms
/// (a busy wait), the database reading its clock anywhere inside it, with
/// the database clock running at a rate within ±0.5 % of the local one.
fn readings() -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
    (
        prop::collection::vec((10u64..60, 0u64..40, 0u64..=100), 2..40),
        -5i64..=5,
    )
        .prop_map(|(steps, rate_permille)| {
            let mut out = Vec::new();
            let mut t = 2u64;
            for (gap, latency, at_percent) in steps {
                let sent = t + gap;
                let replied = sent + latency;
                let read_at = sent + latency * at_percent / 100;
                let db = read_at as i64 + read_at as i64 * rate_permille / 1000;
                out.push((sent, replied, db as u64));
                t = replied;
            }
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn explainable_readings_never_demote(readings in readings()) {
        let mut s = leader();
        for (sent, replied, db) in readings {
            // Within the first ttl: the term is still running.
            prop_assume!(replied < TTL_MS / 2);
            prop_assert!(!s.handle_db_clock(ms(replied), ms(sent), 1_700_000_000_000 + db as i64));
            prop_assert_eq!(s.poll_command(), None);
        }
    }

    #[test]
    fn a_step_beyond_the_allowance_demotes_with_clock(
        readings in readings(),
        step in prop_oneof![150i64..100_000, -100_000i64..-150],
        at in 1usize..40,
    ) {
        let mut s = leader();
        let at = at.min(readings.len() - 1);
        let mut demoted = false;
        for (i, (sent, replied, db)) in readings.into_iter().enumerate() {
            prop_assume!(replied < TTL_MS / 2);
            let shift = if i >= at { step } else { 0 };
            let moved = s.handle_db_clock(ms(replied), ms(sent), 1_700_000_000_000 + db as i64 + shift);
            prop_assert_eq!(moved, i == at, "reading {} (step at {})", i, at);
            let commands: Vec<Command> = std::iter::from_fn(|| s.poll_command()).collect();
            if i == at {
                prop_assert!(commands.contains(&Command::StopWork { epoch: Epoch::new(1), reason: Demotion::Clock }), "{:?}", commands);
                demoted = true;
            }
        }
        prop_assert!(demoted);
    }
}
