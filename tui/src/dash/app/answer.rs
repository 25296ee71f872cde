//! Answering a pending approval from the dashboard: inside a session (its turns, a timeline),
//! `w` selects a waiting call, `a` / `x` ask to approve / deny it, a confirmation line takes `y` (or Enter), and the answer is posted to
//! the log's inbox ([`mull_store::inbox`]) — the dashboard never writes the log itself; the
//! process that writes the session takes the answer and records it as an input event. Until
//! that event appears, the call shows "answer sent, waiting for the writer".

use mull_store::PendingApproval;

use super::{App, Effect, View};

/// An answer the user asked for and has not confirmed yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirm {
    pub session_id: String,
    pub approval_id: String,
    pub tool: String,
    pub approved: bool,
}

/// The dashboard's side of answering approvals.
#[derive(Debug, Default)]
pub struct Answering {
    /// The selected waiting call, an index into the unanswered ones.
    pub selected: usize,
    /// The answer waiting for `y`.
    pub confirm: Option<Confirm>,
    /// Approval ids whose answer this dashboard posted.
    pub sent: Vec<String>,
    /// The last thing answering did, for the status bar.
    pub notice: Option<String>,
    /// The answer the notice says waits for the writer: the notice goes once the log shows it.
    notice_waits_for: Option<String>,
}

impl App {
    /// The session's calls that still wait for an answer, in the order the section lists them.
    pub fn unanswered_approvals(&self) -> Vec<&PendingApproval> {
        self.session_tools
            .as_ref()
            .map(|tools| {
                tools
                    .approvals
                    .iter()
                    .filter(|p| p.is_unanswered())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The waiting call `a` / `x` act on.
    pub fn selected_approval(&self) -> Option<&PendingApproval> {
        let waiting = self.unanswered_approvals();
        let at = self.answering.selected.min(waiting.len().saturating_sub(1));
        waiting.get(at).copied()
    }

    /// Whether this dashboard posted an answer to `approval_id` that the log does not show yet.
    pub fn answer_sent(&self, approval: &PendingApproval) -> bool {
        approval.is_unanswered() && self.answering.sent.contains(&approval.approval_id)
    }

    /// Whether the notice says an answer waits for the writer, and the log shows it recorded
    /// (the call no longer waits unanswered).
    pub(super) fn answer_notice_settled(&mut self) -> bool {
        let Some(id) = self.answering.notice_waits_for.as_deref() else {
            return false;
        };
        let waits = self
            .unanswered_approvals()
            .iter()
            .any(|p| p.approval_id == id);
        if !waits {
            self.answering.notice_waits_for = None;
        }
        !waits
    }

    /// `w`: the next waiting call.
    pub(super) fn next_approval(&mut self) -> Vec<Effect> {
        let len = self.unanswered_approvals().len();
        if len > 0 {
            self.answering.selected = (self.answering.selected + 1) % len;
        }
        Vec::new()
    }

    /// `a` / `x`: asks to confirm the answer to the selected waiting call.
    pub(super) fn ask_answer(&mut self, approved: bool) -> Vec<Effect> {
        if self.view == View::Sessions {
            self.answering.notice = Some("open a session to answer its waiting calls".into());
            return Vec::new();
        }
        let (Some(session_id), Some(pending)) = (self.session_id.clone(), self.selected_approval())
        else {
            self.answering.notice = Some("no call of this session waits for approval".into());
            return Vec::new();
        };
        if self.answer_sent(pending) {
            self.answering.notice = Some(format!(
                "{} is answered already; waiting for the writer",
                pending.approval_id
            ));
            return Vec::new();
        }
        self.answering.confirm = Some(Confirm {
            session_id,
            approval_id: pending.approval_id.clone(),
            tool: pending.tool.clone(),
            approved,
        });
        self.answering.notice = None;
        Vec::new()
    }

    /// `y` / Enter posts the answer waiting for confirmation; any other key drops it.
    pub(super) fn confirm_answer(&mut self, yes: bool) -> Vec<Effect> {
        let Some(confirm) = self.answering.confirm.take() else {
            return Vec::new();
        };
        if !yes {
            self.answering.notice = Some("not answered".into());
            return Vec::new();
        }
        vec![Effect::PostAnswer {
            session_id: confirm.session_id,
            approval_id: confirm.approval_id,
            approved: confirm.approved,
        }]
    }

    /// The inbox took the answer (or refused it).
    pub(super) fn answer_posted(
        &mut self,
        approval_id: String,
        approved: bool,
        posted: Result<(), String>,
    ) -> Vec<Effect> {
        self.answering.notice = Some(match posted {
            Ok(()) => {
                let verb = if approved { "approval" } else { "denial" };
                let notice = format!("{verb} of {approval_id} sent; waiting for the writer");
                self.answering.notice_waits_for = Some(approval_id.clone());
                self.answering.sent.push(approval_id);
                notice
            }
            Err(why) => {
                self.answering.notice_waits_for = None;
                format!("could not send the answer to {approval_id}: {why}")
            }
        });
        Vec::new()
    }
}
