//! How a sub-agent's progress reaches its parent's call, in lockstep: the child session's
//! outside world ([`crate::outside`]) is its parent's, plus this — at the child's
//! `before_tool_call`, `after_tool_call` and `on_step_finish` points it reports to the parent's
//! call and waits until the parent has recorded the report, before the child agent's hook runs.
//! The child never runs ahead of the parent's log, so the two sessions' events (and their clock
//! readings and ids, which they share) interleave the same way on every run. The child agent
//! itself runs unwrapped.

use std::sync::Arc;

use async_trait::async_trait;
use mull_core::LanguageModel;
use tokio::sync::{mpsc, oneshot};

use crate::outside::{HookPoint, Outside};
use crate::tool::ToolSet;

/// Something the child did that its parent's client should see.
#[derive(Debug, Clone)]
pub(super) enum Progress {
    /// A call of the child's is about to be decided.
    ToolStarted { call_id: String, tool: String },
    /// The call's outcome is known.
    ToolEnded { call_id: String, success: bool },
    /// A step of the child ended, with its text.
    StepText(String),
}

impl Progress {
    /// What the parent's client sees of the hook point, if anything.
    fn at(point: HookPoint<'_>) -> Option<Progress> {
        match point {
            HookPoint::BeforeToolCall(ctx) => Some(Progress::ToolStarted {
                call_id: ctx.tool_call_id.clone(),
                tool: ctx.tool_name.clone(),
            }),
            HookPoint::AfterToolCall(ctx) => Some(Progress::ToolEnded {
                call_id: ctx.tool_call_id.clone(),
                success: ctx.success,
            }),
            HookPoint::OnStepFinish(ctx) => Some(Progress::StepText(ctx.record.text.clone())),
            _ => None,
        }
    }
}

/// A report and the way to say it was recorded.
pub(super) type Report = (Progress, oneshot::Sender<()>);

/// The child session's outside world: the parent's, reporting at the three points above.
pub(super) struct Reporting {
    /// The parent session's outside world, which the child shares.
    pub outside: Arc<dyn Outside>,
    pub reports: mpsc::Sender<Report>,
}

#[async_trait]
impl Outside for Reporting {
    fn model(&self, chosen: Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        self.outside.model(chosen)
    }

    fn tools(&self, tools: ToolSet) -> ToolSet {
        self.outside.tools(tools)
    }

    /// Sends the point's progress and waits until the parent recorded it (or let go of the
    /// child).
    async fn at_hook(&self, point: HookPoint<'_>) {
        self.outside.at_hook(point).await;
        let Some(progress) = Progress::at(point) else {
            return;
        };
        let (recorded, wait) = oneshot::channel();
        if self.reports.send((progress, recorded)).await.is_ok() {
            // An error means the parent's call ended: nobody is waiting for more.
            let _ = wait.await;
        }
    }
}
