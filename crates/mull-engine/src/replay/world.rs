//! The outside world a replay presents to the session it re-executes: the agent's models and
//! tools by name, answering from the recording, and recorded cancellations and stops
//! re-enacted before the agent's hooks. The agent itself runs as it is.

use std::sync::Arc;

use async_trait::async_trait;
use mull_core::LanguageModel;

use crate::outside::{HookPoint, Outside};
use crate::tool::ToolSet;

use super::Shared;

/// The recording, standing in for the world (see the module docs of [`super`]).
pub(super) struct Recorded {
    pub(super) shared: Arc<Shared>,
}

#[async_trait]
impl Outside for Recorded {
    fn model(&self, chosen: Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        self.shared.present(&chosen)
    }

    fn tools(&self, tools: ToolSet) -> ToolSet {
        self.shared.wrap_tools(tools)
    }

    /// Before every hook the replay stops where the recorded process stopped; before every
    /// hook but `on_chat_response` (which runs after the turn, where no cancellation can land)
    /// it also re-issues the recorded cancellations that are due.
    async fn at_hook(&self, point: HookPoint<'_>) {
        match point {
            HookPoint::OnChatResponse(_) => self.shared.stop_point().await,
            _ => self.shared.checkpoint().await,
        }
    }
}
