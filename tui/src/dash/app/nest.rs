//! Sub-agents in the dashboard: from a parent turn's tool call that ran a sub-agent, `>` opens
//! the child session's turn; `<` (or Esc on the child's timeline) comes back to the parent's
//! timeline as it was left, the call still selected. Frames stack, so a sub-agent's sub-agent
//! nests one level further.

use mull_store::projection::TurnSummary;
use mull_store::SessionToolCalls;

use super::{App, Effect, Pane, TurnView, View};
use crate::dash::cost::SessionCost;
use crate::dash::timeline::ItemKind;

/// Where the dashboard stood when it opened a sub-agent: what backing out restores.
#[derive(Debug, Clone)]
pub struct NestFrame {
    /// How the breadcrumb names the parent: "travel-desk turn 6 › research".
    pub label: String,
    session_id: Option<String>,
    turns: Vec<TurnSummary>,
    turn_selected: usize,
    session_tools: Option<SessionToolCalls>,
    session_cost: Option<SessionCost>,
    turn: Option<TurnView>,
    focus: Pane,
}

impl App {
    /// Whether `session_id` is a sub-agent's session (its overview names a parent).
    pub(super) fn is_subagent_session(&self, session_id: &str) -> bool {
        self.overviews
            .get(session_id)
            .is_some_and(|o| o.parent.is_some())
    }

    /// Whether the session shown is a sub-agent's that was entered as a session of its own (not
    /// through its parent's call): following can do that before the link is known.
    pub(super) fn strayed_into_subagent(&self) -> bool {
        self.nest.is_empty()
            && self
                .session_id
                .as_deref()
                .is_some_and(|id| self.is_subagent_session(id))
    }

    /// Opens the sub-agent the selected tool call ran (timeline only).
    pub(super) fn subagent_in(&mut self) -> Vec<Effect> {
        if self.view != View::Timeline {
            return Vec::new();
        }
        let selected = self.turn.as_ref().and_then(TurnView::selected_item);
        let Some(ItemKind::Tool(tool)) = selected.map(|i| &i.kind) else {
            self.status = Some("select a tool call that ran a sub-agent, then >".into());
            return Vec::new();
        };
        let Some(child) = tool.subagent.clone() else {
            self.status = Some(format!("the {} call ran no sub-agent", tool.tool));
            return Vec::new();
        };
        let parent = self.session_id.clone().unwrap_or_default();
        let agent = self
            .overviews
            .get(&parent)
            .and_then(|o| o.agent.clone())
            .unwrap_or_else(|| parent.clone());
        let turn = self
            .open_turn_number()
            .map(|n| format!(" turn {n}"))
            .unwrap_or_default();
        let label = format!("{agent}{turn} › {}", tool.tool);
        self.nest.push(NestFrame {
            label,
            session_id: self.session_id.take(),
            turns: std::mem::take(&mut self.turns),
            turn_selected: self.turn_selected,
            session_tools: self.session_tools.take(),
            session_cost: self.session_cost.take(),
            turn: self.turn.take(),
            focus: self.focus,
        });
        self.follow = false;
        self.opening_subagent = Some(child.clone());
        self.enter_session(child)
    }

    /// Once the sub-agent's turns arrived, opens its turn (a sub-agent session runs one).
    pub(super) fn open_subagent_turn(&mut self, session_id: &str) -> Option<Vec<Effect>> {
        if self.opening_subagent.as_deref() != Some(session_id) || self.turns.is_empty() {
            return None;
        }
        self.opening_subagent = None;
        self.turn_selected = 0;
        Some(self.open_timeline())
    }

    /// Back to the parent's timeline the sub-agent was opened from.
    pub(super) fn subagent_out(&mut self) -> Vec<Effect> {
        let Some(frame) = self.nest.pop() else {
            self.status = Some("not inside a sub-agent".into());
            return Vec::new();
        };
        self.opening_subagent = None;
        self.session_id = frame.session_id;
        self.turns = frame.turns;
        self.turn_selected = frame.turn_selected;
        self.session_tools = frame.session_tools;
        self.session_cost = frame.session_cost;
        self.turn = frame.turn;
        self.focus = frame.focus;
        self.view = if self.turn.is_some() {
            View::Timeline
        } else {
            View::Turns
        };
        // What the parent wrote meanwhile is read again, as for any reopened view.
        let Some(session_id) = self.session_id.clone() else {
            return Vec::new();
        };
        let mut effects = vec![Effect::Turns {
            session_id: session_id.clone(),
        }];
        if let Some(turn) = &self.turn {
            effects.push(Effect::TimelinePage {
                session_id,
                turn_id: turn.turn_id.clone(),
                after_seq: turn.events.last().map_or(0, |e| e.seq),
            });
        }
        effects
    }
}
