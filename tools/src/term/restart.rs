//! `run --restart on-failure`: CMD's failures under the core's restart
//! intensity (DESIGN §5 "Work that fails"), one supervisor per lease. A
//! failure is restarted after its backoff, or escalated past the
//! intensity; either is reported as `work_failed`.

use std::collections::HashMap;
use std::sync::Mutex;

use picolease::supervise::RestartPolicy;
use picolease_core::supervision::{Supervisor, Verdict};

use super::child::{ChildEvent, EventSink, Pass, TermView};
use super::status::ChildStatus;

/// `--restart on-failure`'s policy and one supervisor per lease.
pub(super) struct Restarts {
    policy: RestartPolicy,
    supervisors: Mutex<HashMap<String, Supervisor>>,
    /// The supervisors' time zero.
    base: std::time::Instant,
}

impl Restarts {
    pub(super) fn new(policy: RestartPolicy) -> Self {
        Restarts {
            policy,
            supervisors: Mutex::new(HashMap::new()),
            base: std::time::Instant::now(),
        }
    }

    /// What follows CMD failing by itself at the end of a pass: restart
    /// (after the backoff) or escalate (then wait for the term's end).
    /// `None` when there is no restart policy, or CMD did not fail.
    pub(super) fn after_failure(
        &self,
        view: &impl TermView,
        status: &ChildStatus,
        events: &EventSink,
    ) -> Option<Pass> {
        let restarts = self;
        if *status == ChildStatus::Code(0) {
            return None;
        }
        let lease = view.term().lease();
        let now = picolease_core::Instant::from_nanos(
            u64::try_from(restarts.base.elapsed().as_nanos()).unwrap_or(u64::MAX),
        );
        let verdict = restarts
            .supervisors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(lease.as_str().to_string())
            .or_insert_with(|| Supervisor::new(restarts.policy))
            .work_failed(now);
        let epoch = view.term().epoch().get();
        let (count, escalated) = match verdict {
            Verdict::Restart { restarts, .. } => (restarts, None),
            Verdict::Escalate => (
                restarts.policy.intensity + 1,
                Some(restarts.policy.cool_down),
            ),
        };
        events(
            lease,
            ChildEvent::Failed {
                epoch,
                status: status.clone(),
                restarts: count,
                escalated,
            },
        );
        match verdict {
            Verdict::Restart { at, .. } => {
                // The backoff, cut short by the term's end.
                if view.ended(at.saturating_duration_since(now)) {
                    Some(Pass::Done)
                } else {
                    Some(Pass::Again)
                }
            }
            Verdict::Escalate => {
                // The core hands the lease over and ends the term; a
                // degraded leader that keeps it (no healthy node to take
                // it) still tries its CMD, after the longest backoff.
                if view.ended(restarts.policy.max_backoff) {
                    Some(Pass::Done)
                } else {
                    Some(Pass::Again)
                }
            }
        }
    }
}
