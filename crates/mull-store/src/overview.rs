//! Overviews: what a list of sessions shows at a glance — which agent, what the user first
//! asked, how its turns ended, what it cost in tokens — folded from a handful of lifecycle
//! events per turn, so listing every session of a large log never reads a chunk.
//!
//! [`SessionOverview::apply`] takes one envelope at a time (older or repeated seqs are
//! ignored), so a snapshot read with [`LogReader::session_overviews`] is kept current from a
//! tail without reading again.
//!
//! [`LogReader::session_overviews`]: crate::LogReader::session_overviews

use std::collections::BTreeMap;

use mull_core::{Envelope, Event, Role, TurnStatus, UIMessage, UIPart, Usage};
use serde::Serialize;

/// The event kinds an overview folds; the reader decodes only these.
pub const OVERVIEW_KINDS: &[&str] = &[
    "session_opened",
    "user_messages_saved",
    "turn_started",
    "turn_configured",
    "turn_finished",
    "session_forked",
    "subagent_finished",
    "subagent_linked",
];

/// Characters of a user's message kept as its preview.
pub const PREVIEW_CHARS: usize = 160;

/// How a session's turn attempts ended so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatusMix {
    pub running: u64,
    pub completed: u64,
    pub error: u64,
    pub aborted: u64,
    /// Left running by a writer that is gone (see [`TurnStatus::Interrupted`]).
    pub interrupted: u64,
}

impl StatusMix {
    /// Turn attempts started.
    pub fn total(&self) -> u64 {
        self.running + self.completed + self.error + self.aborted + self.interrupted
    }
}

/// One session at a glance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionOverview {
    pub session_id: String,
    /// The agent of the newest `session_opened`.
    pub agent: Option<String>,
    /// The model the newest turn was configured with.
    pub model_id: Option<String>,
    /// The first user message's text, cut to [`PREVIEW_CHARS`].
    pub first_prompt: Option<String>,
    /// Each request's user message preview, by request id (what a turn list shows).
    pub prompts: BTreeMap<String, String>,
    pub status: StatusMix,
    /// Usage of every finished turn attempt, and of the sub-agents they ran.
    pub usage: Usage,
    /// The session whose tool call this one runs for, when it is a sub-agent's.
    pub parent: Option<String>,
    /// The last event applied (0 before any).
    pub last_seq: u64,
    /// The session and seq this one was forked from, when it is a fork.
    pub forked_from: Option<(String, u64)>,
}

impl SessionOverview {
    /// A session before any event.
    pub fn new(session_id: impl Into<String>) -> SessionOverview {
        SessionOverview {
            session_id: session_id.into(),
            agent: None,
            model_id: None,
            first_prompt: None,
            prompts: BTreeMap::new(),
            status: StatusMix::default(),
            usage: Usage::default(),
            parent: None,
            last_seq: 0,
            forked_from: None,
        }
    }

    /// The preview of the user message saved under `request_id`.
    pub fn prompt(&self, request_id: &str) -> Option<&str> {
        self.prompts.get(request_id).map(String::as_str)
    }

    /// Folds one event in. Events of other sessions and events at or before
    /// [`SessionOverview::last_seq`] are ignored, so overlapping reads are harmless.
    pub fn apply(&mut self, env: &Envelope) {
        if env.session_id != self.session_id || env.seq <= self.last_seq {
            return;
        }
        self.last_seq = env.seq;
        match &env.event {
            Event::SessionOpened { agent, .. } => self.agent = Some(agent.clone()),
            Event::SessionForked {
                origin, origin_seq, ..
            } => self.forked_from = Some((origin.clone(), *origin_seq)),
            Event::UserMessagesSaved {
                request_id,
                messages,
            } => {
                let Some(text) = messages.iter().rev().find_map(user_text) else {
                    return;
                };
                let text = preview(text);
                if self.first_prompt.is_none() {
                    self.first_prompt = Some(text.clone());
                }
                if let Some(request_id) = request_id {
                    self.prompts.insert(request_id.clone(), text);
                }
            }
            Event::TurnStarted { .. } => self.status.running += 1,
            Event::TurnConfigured { config } => self.model_id = Some(config.model_id.clone()),
            Event::TurnFinished { status, usage, .. } => {
                // The turn that ends was counted running, or interrupted when a reader found
                // no writer before this one's recovery finished it.
                if self.status.running > 0 {
                    self.status.running -= 1;
                } else {
                    self.status.interrupted = self.status.interrupted.saturating_sub(1);
                }
                match status {
                    TurnStatus::Completed => self.status.completed += 1,
                    TurnStatus::Error => self.status.error += 1,
                    TurnStatus::Aborted => self.status.aborted += 1,
                    TurnStatus::Running => self.status.running += 1,
                    TurnStatus::Interrupted => self.status.interrupted += 1,
                }
                self.usage.add(usage);
            }
            // A sub-agent's usage counts in its parent's total, as in the projection.
            Event::SubagentFinished { usage, .. } => self.usage.add(usage),
            Event::SubagentLinked {
                parent_session_id, ..
            } => self.parent = Some(parent_session_id.clone()),
            _ => {}
        }
    }
}

/// The first text part of a user message.
fn user_text(message: &UIMessage) -> Option<&str> {
    if message.role != Role::User {
        return None;
    }
    message.parts.iter().find_map(|part| match part {
        UIPart::Text { text, .. } => Some(text.as_str()),
        _ => None,
    })
}

/// `text` on one line, cut to [`PREVIEW_CHARS`] characters with an ellipsis.
fn preview(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= PREVIEW_CHARS {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(PREVIEW_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// Overviews of many sessions, kept by session id.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionOverviews {
    pub sessions: BTreeMap<String, SessionOverview>,
}

impl SessionOverviews {
    /// Folds one event into its session's overview (begun on its first event).
    pub fn apply(&mut self, env: &Envelope) {
        if !self.sessions.contains_key(&env.session_id) {
            self.sessions.insert(
                env.session_id.clone(),
                SessionOverview::new(env.session_id.clone()),
            );
        }
        if let Some(overview) = self.sessions.get_mut(&env.session_id) {
            overview.apply(env);
        }
    }

    /// The overview of one session.
    pub fn get(&self, session_id: &str) -> Option<&SessionOverview> {
        self.sessions.get(session_id)
    }

    /// The sessions forked from `session_id`, in id order.
    pub fn forks_of(&self, session_id: &str) -> Vec<&str> {
        self.sessions
            .values()
            .filter(|o| o.forked_from.as_ref().is_some_and(|(s, _)| s == session_id))
            .map(|o| o.session_id.as_str())
            .collect()
    }

    /// Turn attempts running in every session.
    pub fn running(&self) -> u64 {
        self.sessions.values().map(|s| s.status.running).sum()
    }

    /// Shows the turns still running as interrupted: what a reader does when no writer has
    /// the log open, since nothing will finish them before the next writer resolves them.
    pub fn mark_interrupted(&mut self) {
        for overview in self.sessions.values_mut() {
            overview.status.interrupted += std::mem::take(&mut overview.status.running);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use mull_core::EntryPath;
    use serde_json::json;

    fn env(seq: u64, session: &str, event: Event) -> Envelope {
        Envelope {
            seq,
            session_id: session.to_owned(),
            turn_id: None,
            at: Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap(),
            v: 1,
            event,
        }
    }

    fn started(request: &str) -> Event {
        Event::TurnStarted {
            request_id: request.to_owned(),
            message_id: format!("{request}_a"),
            entry: EntryPath::SaveMessages,
            continuation: false,
            attempt: 0,
            body: json!({}),
        }
    }

    fn finished(request: &str, status: TurnStatus, output: u64) -> Event {
        Event::TurnFinished {
            request_id: request.to_owned(),
            status,
            error: None,
            steps: 1,
            usage: Usage {
                input_tokens: Some(100),
                output_tokens: Some(output),
                ..Usage::default()
            },
            response_owed: false,
        }
    }

    #[test]
    fn a_session_reads_as_its_agent_first_prompt_status_mix_and_tokens() {
        let mut all = SessionOverviews::default();
        let events = [
            env(
                1,
                "s",
                Event::SessionOpened {
                    agent: "travel-desk".into(),
                    metadata: json!({}),
                },
            ),
            env(
                2,
                "s",
                Event::UserMessagesSaved {
                    request_id: Some("r1".into()),
                    messages: vec![UIMessage::user("u1", "What's\n  Lisbon like?")],
                },
            ),
            env(3, "s", started("r1")),
            env(4, "s", finished("r1", TurnStatus::Completed, 40)),
            env(
                5,
                "s",
                Event::UserMessagesSaved {
                    request_id: Some("r2".into()),
                    messages: vec![UIMessage::user("u2", "long ".repeat(100))],
                },
            ),
            env(6, "s", started("r2")),
            env(7, "s", finished("r2", TurnStatus::Error, 2)),
            env(8, "s", started("r3")),
            env(9, "other", started("x")),
        ];
        for e in &events {
            all.apply(e);
        }
        // Repeated events (a tail overlapping a read) count once.
        for e in &events {
            all.apply(e);
        }
        let s = all.get("s").expect("overview");
        assert_eq!(s.agent.as_deref(), Some("travel-desk"));
        assert_eq!(s.first_prompt.as_deref(), Some("What's Lisbon like?"));
        assert_eq!(s.prompt("r1"), Some("What's Lisbon like?"));
        let long = s.prompt("r2").expect("second prompt");
        assert_eq!(long.chars().count(), PREVIEW_CHARS);
        assert!(long.ends_with('…'));
        assert_eq!(
            s.status,
            StatusMix {
                running: 1,
                completed: 1,
                error: 1,
                aborted: 0,
                interrupted: 0,
            }
        );
        assert_eq!(s.status.total(), 3);
        assert_eq!(s.usage.output_tokens, Some(42));
        assert_eq!(s.usage.input_tokens, Some(200));
        assert_eq!(all.running(), 2);
    }
}
