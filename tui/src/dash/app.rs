//! The dashboard's state and how it changes: [`App::update`] takes one [`Msg`] (a key's action,
//! data the log returned, new events, a clock tick) and returns the [`Effect`]s (log reads) it
//! needs. It never touches the terminal or the database, so every behaviour is unit-testable.

use std::time::Duration;

use mull_core::{Envelope, Usage};
use mull_store::diff::RunDiff;
use mull_store::projection::{SessionState, TurnSummary};
use mull_store::{SessionOverviews, SessionSummary, SessionToolCalls};

use crate::dash::keys::Action;
use crate::dash::rates::Rates;

mod answer;
mod filter;
mod ingest;
mod matching;
mod navigate;
mod nest;
mod self_answer;
mod turn_view;

pub use answer::Answering;
pub use matching::{item_matches, session_matches, turn_row_matches};
pub use nest::NestFrame;
pub use self_answer::{SelfAnswer, SelfAnswers, WallClock};
pub use turn_view::TurnView;

/// Rows a page key moves.
pub const PAGE_ROWS: usize = 10;
/// How long a message stays in the status bar: long enough to read, gone before it
/// outlives what it said.
pub const MESSAGE_TTL: Duration = Duration::from_secs(6);
/// Events read per timeline page.
pub const TIMELINE_PAGE: usize = 2000;
/// Load the next page when the selection is this close to the last row.
const PAGE_AHEAD: usize = 50;
/// In replay, load the next page when the cursor is this many events from the last loaded.
const REPLAY_AHEAD: usize = 500;

/// The screen being shown, from the outside in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Sessions,
    Turns,
    Timeline,
    Event,
    /// Two turns compared side by side.
    Diff,
}

/// Everything that can happen to the dashboard.
#[derive(Debug)]
pub enum Msg {
    /// A key's action.
    Action(Action),
    /// Editing the filter prompt.
    FilterEdit(FilterEdit),
    /// The session list, read from the log.
    Sessions(Vec<SessionSummary>),
    /// Every session's overview, read from the log.
    Overviews(Box<SessionOverviews>),
    /// Two turns compared.
    Diff(Box<RunDiff>),
    /// A session's turns, read from the log.
    Turns {
        session_id: String,
        turns: Vec<TurnSummary>,
    },
    /// A page of a turn's events (`exhausted`: the log had no more after it).
    TimelinePage {
        turn_id: String,
        events: Vec<Envelope>,
        scanned_to: u64,
        exhausted: bool,
    },
    /// The tool calls of a session, read from its lifecycle events.
    ToolCalls(Box<SessionToolCalls>),
    /// What a session's model calls cost, folded from its events.
    Cost(Box<crate::dash::cost::SessionCost>),
    /// The session's state just before the turn began.
    Base {
        turn_id: String,
        state: Box<SessionState>,
    },
    /// Events another process committed.
    Appended(Vec<Envelope>),
    /// Wall time passed (drives replay).
    Tick(Duration),
    /// A read failed; shown in the footer.
    Failed(String),
    /// The mouse clicked a pane (and a row of it).
    Click(Hit),
    /// The mouse wheel turned over a pane: rows down (positive) or up.
    Scroll(Pane, isize),
    /// The answer to the confirmation line: yes (`y`, Enter) or anything else.
    Confirm(bool),
    /// An approval's answer was posted to the inbox, or why it was not.
    AnswerPosted {
        approval_id: String,
        approved: bool,
        posted: Result<(), String>,
    },
}

/// What a mouse click landed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub pane: Pane,
    /// The row of the pane's list (an index into the whole list), when it was on one.
    pub row: Option<usize>,
}

/// The panes of a turn's screen that take the keys in turn (Tab). On a narrow screen only the
/// focused one is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pane {
    /// The view's list: sessions, turns or the timeline's rows.
    #[default]
    List,
    /// The turn's totals, sparklines and chunk-gap chart.
    Pacing,
    Conversation,
    Tools,
}

impl Pane {
    /// Every pane of the timeline screen, in Tab order.
    pub const ALL: [Pane; 4] = [Pane::List, Pane::Pacing, Pane::Conversation, Pane::Tools];

    /// How the tab bar names it.
    pub fn label(self) -> &'static str {
        match self {
            Pane::List => "timeline",
            Pane::Pacing => "pacing",
            Pane::Conversation => "conversation",
            Pane::Tools => "tools",
        }
    }

    fn cycle(self, forward: bool) -> Pane {
        let index = Pane::ALL.iter().position(|p| *p == self).unwrap_or(0);
        let len = Pane::ALL.len();
        let next = if forward {
            (index + 1) % len
        } else {
            (index + len - 1) % len
        };
        Pane::ALL[next]
    }
}

/// A key typed into the filter prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterEdit {
    Char(char),
    Backspace,
    Apply,
    Cancel,
}

/// A read the dashboard needs from the log; the runtime performs it and answers with a [`Msg`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Sessions,
    /// Every session's overview (read once; the tail keeps it current).
    Overviews,
    /// Two turns' events, compared.
    Diff {
        a: TurnRef,
        b: TurnRef,
    },
    Turns {
        session_id: String,
    },
    /// The next page of a turn: its session's events after `after_seq`.
    TimelinePage {
        session_id: String,
        turn_id: String,
        after_seq: u64,
    },
    /// A session's tool calls, for the session-wide tool table.
    ToolCalls {
        session_id: String,
    },
    /// A session's cost ledger, for the turns pane.
    Cost {
        session_id: String,
    },
    /// The session folded up to (not including) `before_seq`.
    BaseState {
        session_id: String,
        turn_id: String,
        before_seq: u64,
    },
    /// Post an approval's answer to the log's inbox (the one effect that writes: not the log,
    /// its inbox).
    PostAnswer {
        session_id: String,
        approval_id: String,
        approved: bool,
    },
}

/// One turn of one session, named as the diff shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRef {
    pub session_id: String,
    pub turn_id: String,
    /// "travel-desk turn 2".
    pub label: String,
}

/// The diff screen: what was compared and how far it is scrolled.
#[derive(Debug, Clone)]
pub struct DiffView {
    pub diff: RunDiff,
    pub scroll: usize,
    /// The view to go back to.
    pub from: View,
}

/// Events that arrived while the view was frozen.
#[derive(Debug, Clone, Default)]
pub struct Paused {
    pub arrived: u64,
    held: Vec<Envelope>,
}

/// The filter prompt and the query in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub editing: bool,
    pub query: String,
    /// Rows that do not match are hidden (a filter), not just left unhighlighted (a search).
    pub hide: bool,
}

/// The dashboard's whole state.
#[derive(Debug)]
pub struct App {
    /// What the header calls the database.
    pub db_label: String,
    pub view: View,
    pub sessions: Vec<SessionSummary>,
    /// What each session's list row says about it, kept current from the tail.
    pub overviews: SessionOverviews,
    /// Until every session's overview has been read (a large log reads it after the first
    /// frame), the events the tail brought meanwhile: laid over the overviews when they come,
    /// so nothing that happened while they were read is missed (an overview ignores an event
    /// it already holds).
    overview_backlog: Option<Vec<Envelope>>,
    pub session_selected: usize,
    /// The session whose turns are listed.
    pub session_id: Option<String>,
    pub turns: Vec<TurnSummary>,
    pub turn_selected: usize,
    /// The tool calls of the session whose turns are listed: read when the session is
    /// entered, then kept current from the events that arrive.
    pub session_tools: Option<SessionToolCalls>,
    /// What that session's model calls cost, kept current the same way.
    pub session_cost: Option<crate::dash::cost::SessionCost>,
    /// The prices costs are shown with (`--prices` over the built-in table).
    pub prices: mull_core::PriceTable,
    pub turn: Option<TurnView>,
    /// The event the JSON view shows.
    pub event_seq: Option<u64>,
    pub event_scroll: u16,
    pub follow: bool,
    /// Following entered a new session: open its newest turn once the turns arrive.
    follow_pending: bool,
    pub paused: Option<Paused>,
    /// The pane that takes the keys on the turn's screen.
    pub focus: Pane,
    /// Lines the conversation pane is scrolled up from its newest line.
    pub conversation_scroll: u16,
    /// Events and tokens per second, from what the tail delivered.
    pub rates: Rates,
    /// The turn marked to compare with another.
    pub marked: Option<TurnRef>,
    pub diff: Option<DiffView>,
    pub filter: Filter,
    pub help: bool,
    /// How many events the log held when opened, or the newest seq seen since if higher (on
    /// a log that numbers each session, the count as opened).
    pub max_seq: u64,
    /// Events committed by others since the dashboard opened.
    pub live_events: u64,
    /// The last failure, shown in the footer.
    pub status: Option<String>,
    /// Files beside the log holding rows it reads without, as the reader found them when it
    /// opened: shown as a banner under the header for as long as the dashboard runs.
    pub damage: Vec<mull_store::SideDamage>,
    /// Answering pending approvals: the selected call, the confirmation, answers sent.
    pub answering: Answering,
    /// The status-bar message being shown and how long it has been (see [`MESSAGE_TTL`]).
    message_age: Option<(String, Duration)>,
    /// Calls the writer in this process will approve by itself (the demo's), to announce.
    pub self_answers: SelfAnswers,
    /// The wall clock deadlines are counted down with.
    pub clock: WallClock,
    pub quit: bool,
    /// The parents of the sub-agent being shown, outermost first (see [`NestFrame`]).
    pub nest: Vec<NestFrame>,
    /// A sub-agent session being opened: its turn opens when its turns arrive.
    opening_subagent: Option<String>,
}

impl App {
    /// A dashboard over the database called `db_label`; the first effect loads the sessions.
    pub fn new(db_label: impl Into<String>) -> (Self, Vec<Effect>) {
        let app = Self {
            db_label: db_label.into(),
            view: View::Sessions,
            sessions: Vec::new(),
            overviews: SessionOverviews::default(),
            overview_backlog: Some(Vec::new()),
            session_selected: 0,
            session_id: None,
            turns: Vec::new(),
            turn_selected: 0,
            session_tools: None,
            session_cost: None,
            prices: mull_core::PriceTable::defaults(),
            turn: None,
            event_seq: None,
            event_scroll: 0,
            follow: false,
            follow_pending: false,
            paused: None,
            focus: Pane::List,
            conversation_scroll: 0,
            rates: Rates::default(),
            marked: None,
            diff: None,
            filter: Filter::default(),
            help: false,
            max_seq: 0,
            live_events: 0,
            status: None,
            damage: Vec::new(),
            answering: Answering::default(),
            message_age: None,
            self_answers: SelfAnswers::default(),
            clock: WallClock::default(),
            quit: false,
            nest: Vec::new(),
            opening_subagent: None,
        };
        (app, vec![Effect::Sessions, Effect::Overviews])
    }

    /// The turn the turns list has selected.
    pub fn selected_turn(&self) -> Option<&TurnSummary> {
        self.turns.get(self.turn_selected)
    }

    /// The summary of the turn whose timeline is open.
    pub fn open_turn(&self) -> Option<&TurnSummary> {
        let turn = self.turn.as_ref()?;
        self.turns
            .iter()
            .find(|t| t.turn_id.as_deref() == Some(turn.turn_id.as_str()))
    }

    /// The open turn's place in its session (1-based), as lists number turns.
    pub fn open_turn_number(&self) -> Option<usize> {
        let turn = self.turn.as_ref()?;
        self.turns
            .iter()
            .position(|t| t.turn_id.as_deref() == Some(turn.turn_id.as_str()))
            .map(|i| i + 1)
    }

    /// The turn the user points at: the open one on its screen, else the selected one.
    pub fn turn_here(&self) -> Option<TurnRef> {
        let session_id = self.session_id.clone()?;
        let (number, summary) = match self.view {
            View::Timeline | View::Event => {
                let open = self.turn.as_ref()?;
                self.turns
                    .iter()
                    .enumerate()
                    .find(|(_, t)| t.turn_id.as_deref() == Some(open.turn_id.as_str()))?
            }
            View::Turns => (self.turn_selected, self.selected_turn()?),
            _ => return None,
        };
        let agent = self
            .overviews
            .get(&session_id)
            .and_then(|o| o.agent.clone())
            .unwrap_or_else(|| session_id.clone());
        Some(TurnRef {
            turn_id: summary.turn_id.clone()?,
            label: format!("{agent} turn {}", number + 1),
            session_id,
        })
    }

    /// The overview of the session whose turns are listed.
    pub fn session_overview(&self) -> Option<&mull_store::SessionOverview> {
        self.overviews.get(self.session_id.as_deref()?)
    }

    /// The envelope the JSON view shows.
    pub fn selected_event(&self) -> Option<&Envelope> {
        let turn = self.turn.as_ref()?;
        let seq = self.event_seq?;
        let index = turn.events.binary_search_by_key(&seq, |e| e.seq).ok()?;
        turn.events.get(index)
    }

    /// Usage summed over the listed turns.
    pub fn session_usage(&self) -> Usage {
        let mut total = Usage::default();
        for turn in &self.turns {
            total.add(&turn.usage);
        }
        total
    }

    /// Applies one message; returns the reads it needs.
    /// One arm per message the dashboard takes: the one place its state moves.
    pub fn update(&mut self, msg: Msg) -> Vec<Effect> {
        match msg {
            Msg::Action(action) => self.act(action),
            Msg::FilterEdit(edit) => self.edit_filter(edit),
            Msg::Sessions(mut sessions) => {
                // A sub-agent's session is reached from its parent's tool call (>), not listed.
                sessions.retain(|s| !self.is_subagent_session(&s.session_id));
                let keep = self
                    .sessions
                    .get(self.session_selected)
                    .map(|s| s.session_id.clone());
                let newest = sessions.last().map(|s| s.session_id.clone());
                let arrived = !self.sessions.is_empty()
                    && newest
                        .as_ref()
                        .is_some_and(|id| !self.sessions.iter().any(|s| &s.session_id == id));
                self.sessions = sessions;
                // Following moves on to a session that started after the dashboard opened, or
                // back from a sub-agent's session it entered before the link was folded (it
                // looked like a new session).
                if arrived || self.strayed_into_subagent() {
                    if let Some(effects) = self.follow_to_newest() {
                        return effects;
                    }
                }
                self.session_selected = if self.follow {
                    self.sessions.len().saturating_sub(1)
                } else {
                    keep.and_then(|id| self.sessions.iter().position(|s| s.session_id == id))
                        .unwrap_or(self.session_selected)
                        .min(self.sessions.len().saturating_sub(1))
                };
                Vec::new()
            }
            Msg::Turns { session_id, turns } => self.receive_turns(session_id, turns),
            Msg::TimelinePage {
                turn_id,
                events,
                scanned_to,
                exhausted,
            } => {
                let follow = self.follow;
                let Some(turn) = self.turn.as_mut().filter(|t| t.turn_id == turn_id) else {
                    return Vec::new();
                };
                turn.extend(events);
                turn.scanned_to = turn.scanned_to.max(scanned_to);
                turn.exhausted = exhausted;
                turn.loading = false;
                if follow && turn.replay.is_none() {
                    turn.selected = turn.items().len().saturating_sub(1);
                }
                // One page per look: the next is read when the user (or follow, or the replay
                // cursor) moves near the end, so a long turn is never read in one go.
                if follow || turn.replay.is_some() {
                    self.more_pages()
                } else {
                    Vec::new()
                }
            }
            Msg::Overviews(overviews) => {
                self.overviews = *overviews;
                for env in self.overview_backlog.take().unwrap_or_default() {
                    self.overviews.apply(&env);
                }
                let keep = self
                    .sessions
                    .get(self.session_selected)
                    .map(|s| s.session_id.clone());
                let listed: Vec<SessionSummary> = std::mem::take(&mut self.sessions)
                    .into_iter()
                    .filter(|s| !self.is_subagent_session(&s.session_id))
                    .collect();
                self.sessions = listed;
                self.session_selected = keep
                    .and_then(|id| self.sessions.iter().position(|s| s.session_id == id))
                    .unwrap_or(0);
                // Following may have entered a sub-agent's session before the overviews said
                // it was one (they are read after the first frame): back to the newest listed.
                if self.strayed_into_subagent() {
                    if let Some(effects) = self.follow_to_newest() {
                        return effects;
                    }
                }
                Vec::new()
            }
            Msg::Diff(diff) => {
                if self.view != View::Diff {
                    self.diff = Some(DiffView {
                        diff: *diff,
                        scroll: 0,
                        from: self.view,
                    });
                    self.view = View::Diff;
                }
                Vec::new()
            }
            Msg::ToolCalls(calls) => {
                if self.session_id.as_deref() == Some(calls.session_id.as_str()) {
                    self.session_tools = Some(*calls);
                }
                Vec::new()
            }
            Msg::Cost(cost) => {
                if self.session_id.as_deref() == Some(cost.session_id.as_str()) {
                    self.session_cost = Some(*cost);
                }
                Vec::new()
            }
            Msg::Base { turn_id, state } => {
                if let Some(turn) = self.turn.as_mut().filter(|t| t.turn_id == turn_id) {
                    let mut conversation = (*state).clone();
                    let upto = turn.cursor().map(|c| c + 1).unwrap_or(0);
                    for env in turn.events.get(..upto).unwrap_or_default() {
                        conversation.apply(env);
                    }
                    turn.base = Some(*state);
                    turn.conversation = Some(conversation);
                }
                Vec::new()
            }
            Msg::Appended(events) => self.appended(events),
            Msg::Tick(elapsed) => {
                self.rates.tick(elapsed);
                self.age_message(elapsed);
                let mut moved = false;
                if let Some(turn) = self.turn.as_mut() {
                    if let Some(replay) = turn.replay.as_mut() {
                        if replay.tick(&turn.events, elapsed) {
                            let cursor = replay.cursor;
                            turn.seek_to(cursor);
                            moved = true;
                        }
                    }
                }
                if moved {
                    self.more_pages()
                } else {
                    Vec::new()
                }
            }
            Msg::Failed(message) => {
                self.status = Some(message);
                if let Some(turn) = self.turn.as_mut() {
                    turn.loading = false;
                }
                Vec::new()
            }
            Msg::Click(hit) => self.click(hit),
            Msg::Confirm(yes) => self.confirm_answer(yes),
            Msg::AnswerPosted {
                approval_id,
                approved,
                posted,
            } => self.answer_posted(approval_id, approved, posted),
            Msg::Scroll(pane, rows) => {
                self.focus = pane;
                self.move_selection(rows)
            }
        }
    }

    /// Ages the status bar's message: gone after [`MESSAGE_TTL`], or as soon as it stops
    /// being true (an answer "waiting for the writer" the log now shows recorded).
    fn age_message(&mut self, elapsed: Duration) {
        if self.answer_notice_settled() {
            self.answering.notice = None;
        }
        let Some(text) = self.answering.notice.as_ref().or(self.status.as_ref()) else {
            self.message_age = None;
            return;
        };
        match &mut self.message_age {
            Some((shown, age)) if shown == text => *age += elapsed,
            // New since the last tick: it appeared during that tick.
            _ => self.message_age = Some((text.clone(), elapsed)),
        }
        if self
            .message_age
            .as_ref()
            .is_some_and(|(_, age)| *age >= MESSAGE_TTL)
        {
            if self.answering.notice.is_some() {
                self.answering.notice = None;
            } else {
                self.status = None;
            }
            self.message_age = None;
        }
    }

    /// What a key's action does: one arm per action, the one place they take effect.
    fn act(&mut self, action: Action) -> Vec<Effect> {
        self.answering.notice = None;
        if self.help && !matches!(action, Action::Quit) {
            // Any key closes the help.
            self.help = false;
            return Vec::new();
        }
        let in_replay =
            self.view == View::Timeline && self.turn.as_ref().is_some_and(|t| t.replay.is_some());
        match action {
            Action::Quit => {
                self.quit = true;
                Vec::new()
            }
            Action::Help => {
                self.help = true;
                Vec::new()
            }
            Action::Up => self.move_selection(-1),
            Action::Down => self.move_selection(1),
            Action::PageUp => self.move_selection(-(PAGE_ROWS as isize)),
            Action::PageDown => self.move_selection(PAGE_ROWS as isize),
            Action::First if in_replay => {
                self.replay_move(|r, len| r.seek(0, len));
                Vec::new()
            }
            Action::Last if in_replay => {
                self.replay_move(|r, len| r.seek(len, len));
                self.more_pages()
            }
            Action::First => self.move_selection(isize::MIN / 2),
            Action::Last => self.move_selection(isize::MAX / 2),
            Action::Enter => self.drill_in(),
            Action::Back => self.back_out(),
            Action::SubagentIn => self.subagent_in(),
            Action::SubagentOut => self.subagent_out(),
            Action::Follow => {
                self.follow = !self.follow;
                if self.follow {
                    self.session_selected = self.sessions.len().saturating_sub(1);
                    self.turn_selected = self.turns.len().saturating_sub(1);
                    if let Some(turn) = self.turn.as_mut() {
                        turn.selected = turn.items().len().saturating_sub(1);
                    }
                }
                self.more_pages()
            }
            Action::Pause if in_replay => {
                if let Some(turn) = self.turn.as_mut() {
                    let len = turn.events.len();
                    if let Some(replay) = turn.replay.as_mut() {
                        replay.toggle(len);
                        let cursor = replay.cursor;
                        turn.seek_to(cursor);
                    }
                }
                Vec::new()
            }
            Action::Pause => match self.paused.take() {
                Some(paused) => self.apply_appended(paused.held, true),
                None => {
                    self.paused = Some(Paused::default());
                    Vec::new()
                }
            },
            Action::Replay => self.toggle_replay(),
            Action::Speed => {
                if let Some(replay) = self.turn.as_mut().and_then(|t| t.replay.as_mut()) {
                    replay.speed = replay.speed.next();
                }
                Vec::new()
            }
            Action::StepBack | Action::StepForward => {
                let delta = if action == Action::StepBack { -1 } else { 1 };
                if self.view == View::Event {
                    self.step_event(delta);
                } else if in_replay {
                    self.replay_move(|r, len| {
                        r.playing = false;
                        r.step(delta, len);
                    });
                    return self.more_pages();
                }
                Vec::new()
            }
            Action::ScrubBack | Action::ScrubForward => {
                let back = action == Action::ScrubBack;
                self.replay_move(|r, len| {
                    let tenth = (len / 10).max(1) as isize;
                    r.step(if back { -tenth } else { tenth }, len);
                });
                self.more_pages()
            }
            Action::Filter | Action::HideFilter => {
                self.filter.editing = true;
                self.filter.hide = action == Action::HideFilter;
                self.filter.query.clear();
                self.status = None;
                Vec::new()
            }
            Action::Mark => {
                let here = self.turn_here();
                self.marked = match (&self.marked, here) {
                    (Some(marked), Some(here)) if *marked == here => None,
                    (_, here) => here,
                };
                Vec::new()
            }
            Action::Diff => match (self.marked.clone(), self.turn_here()) {
                (Some(a), Some(b)) => vec![Effect::Diff { a, b }],
                (None, _) => {
                    self.status = Some("mark a turn with m first, then d on another".into());
                    Vec::new()
                }
                (Some(_), None) => Vec::new(),
            },
            Action::FocusNext | Action::FocusPrev => {
                if self.view == View::Timeline {
                    self.focus = self.focus.cycle(action == Action::FocusNext);
                }
                Vec::new()
            }
            Action::Approve => self.ask_answer(true),
            Action::Deny => self.ask_answer(false),
            Action::NextApproval => self.next_approval(),
            Action::NextMatch => self.jump_to_match(true, false),
            Action::PrevMatch => self.jump_to_match(false, false),
        }
    }
}

#[cfg(test)]
mod tests;
