//! Calls the process writing the log will approve by itself when nobody answers (the demo does,
//! after a minute): that process tells the dashboard beside it, so the screen can say so and
//! when, before it happens. The plan is not in the log — nothing has happened yet — so it is
//! shared in memory with the writer's thread; the answer itself, once given, is in the log and
//! names who gave it.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use mull_core::{Clock, SystemClock};
use mull_store::PendingApproval;

use super::App;

/// One call the writer will approve by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfAnswer {
    pub session_id: String,
    pub approval_id: String,
    pub tool: String,
    /// When it stops waiting for a person (the writer's clock).
    pub at: DateTime<Utc>,
    /// Who approves it, as the screen says it ("mull demo").
    pub who: String,
}

/// The plans a writer in this process announced, shared with its thread; empty for a plain
/// `mull dash`.
#[derive(Debug, Clone, Default)]
pub struct SelfAnswers(Arc<Mutex<Vec<SelfAnswer>>>);

impl SelfAnswers {
    /// Announces a plan (the writer's thread calls this).
    pub fn announce(&self, plan: SelfAnswer) {
        if let Ok(mut plans) = self.0.lock() {
            plans.retain(|p| p.approval_id != plan.approval_id);
            plans.push(plan);
        }
    }

    /// The plan for `approval_id` in `session_id`, if one was announced.
    fn get(&self, session_id: &str, approval_id: &str) -> Option<SelfAnswer> {
        let plans = self.0.lock().ok()?;
        plans
            .iter()
            .find(|p| p.session_id == session_id && p.approval_id == approval_id)
            .cloned()
    }
}

/// The wall clock the dashboard counts deadlines down with (tests fix it).
#[derive(Clone)]
pub struct WallClock(pub Arc<dyn Clock>);

impl Default for WallClock {
    fn default() -> WallClock {
        WallClock(Arc::new(SystemClock))
    }
}

impl std::fmt::Debug for WallClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WallClock")
    }
}

impl App {
    /// The first call of the open session that still waits for a person and that the writer
    /// will approve by itself, with its plan — while the deadline is ahead.
    pub fn pending_self_answer(&self) -> Option<(&PendingApproval, SelfAnswer)> {
        let session_id = self.session_id.as_deref()?;
        let now = self.clock.0.now();
        self.unanswered_approvals().into_iter().find_map(|p| {
            let plan = self.self_answers.get(session_id, &p.approval_id)?;
            (plan.at > now && !self.answer_sent(p)).then_some((p, plan))
        })
    }

    /// Whole seconds until `at`, by the dashboard's clock (zero once passed).
    pub fn seconds_until(&self, at: DateTime<Utc>) -> i64 {
        let left = at - self.clock.0.now();
        // Rounded up: "in 1 s" until it happens, never "in 0 s" before.
        (left.num_milliseconds().max(0) + 999) / 1000
    }
}
