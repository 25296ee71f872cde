//! The dashboard's state and how it changes: [`App::update`] takes one [`Msg`] (a key's action,
//! data the log returned, new events, a clock tick) and returns the [`Effect`]s (log reads) it
//! needs. It never touches the terminal or the database, so every behaviour is unit-testable.

use std::time::Duration;

use mull_core::{Envelope, Event, TurnStatus, Usage};
use mull_store::diff::RunDiff;
use mull_store::projection::{SessionState, TurnSummary};
use mull_store::{SessionOverviews, SessionSummary, SessionToolCalls, TurnPacing};

use crate::dash::keys::Action;
use crate::dash::rates::Rates;
use crate::dash::replay::Replay;
use crate::dash::timeline::TimelineBuilder;

mod answer;
mod matching;
mod nest;
mod turn_view;

pub use answer::Answering;
pub use matching::{item_matches, session_matches, turn_row_matches};
pub use nest::NestFrame;
pub use turn_view::TurnView;

/// Rows a page key moves.
pub const PAGE_ROWS: usize = 10;
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
    /// The newest seq seen in the log.
    pub max_seq: u64,
    /// Events committed by others since the dashboard opened.
    pub live_events: u64,
    /// The last failure, shown in the footer.
    pub status: Option<String>,
    /// Answering pending approvals: the selected call, the confirmation, answers sent.
    pub answering: Answering,
    pub quit: bool,
    /// The parents of the sub-agent being shown, outermost first (see [`NestFrame`]).
    pub nest: Vec<NestFrame>,
    /// A sub-agent session being opened: its turn opens when its turns arrive.
    opening_subagent: Option<String>,
}

fn is_lifecycle(event: &Event) -> bool {
    !matches!(event, Event::Chunk { .. })
}

fn move_index(index: usize, len: usize, delta: isize) -> usize {
    if len == 0 {
        return 0;
    }
    let moved = if delta < 0 {
        index.saturating_sub(delta.unsigned_abs())
    } else {
        index.saturating_add(delta.unsigned_abs())
    };
    moved.min(len - 1)
}

impl App {
    /// A dashboard over the database called `db_label`; the first effect loads the sessions.
    pub fn new(db_label: impl Into<String>) -> (Self, Vec<Effect>) {
        let app = Self {
            db_label: db_label.into(),
            view: View::Sessions,
            sessions: Vec::new(),
            overviews: SessionOverviews::default(),
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
            answering: Answering::default(),
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
                let replaying = self.turn.as_ref().is_some_and(|t| t.replay.is_some());
                // Following entered a sub-agent's session before its link was folded (it
                // looked like a new session): back to the newest listed one.
                let strayed = self.nest.is_empty()
                    && self
                        .session_id
                        .as_deref()
                        .is_some_and(|id| self.is_subagent_session(id));
                if self.follow && (arrived || strayed) && !replaying {
                    // Following moves on to a session that started after the dashboard opened.
                    self.session_selected = self.sessions.len().saturating_sub(1);
                    if let Some(id) = newest {
                        self.follow_pending = true;
                        self.turn = None;
                        return self.enter_session(id);
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

    fn click(&mut self, hit: Hit) -> Vec<Effect> {
        self.focus = hit.pane;
        let Some(row) = hit.row else {
            return Vec::new();
        };
        let current = match self.view {
            View::Sessions => self.session_selected,
            View::Turns => self.turn_selected,
            View::Timeline => self.turn.as_ref().map_or(0, |t| t.selected),
            View::Event | View::Diff => return Vec::new(),
        };
        // A click on the selected row opens it, as Enter does.
        if row == current {
            return self.drill_in();
        }
        self.follow = false;
        match self.view {
            View::Sessions => {
                self.session_selected = row.min(self.sessions.len().saturating_sub(1))
            }
            View::Turns => self.turn_selected = row.min(self.turns.len().saturating_sub(1)),
            View::Timeline => {
                if let Some(turn) = self.turn.as_mut() {
                    turn.selected = row.min(turn.items().len().saturating_sub(1));
                }
                return self.more_pages();
            }
            View::Event | View::Diff => {}
        }
        Vec::new()
    }

    fn receive_turns(&mut self, session_id: String, turns: Vec<TurnSummary>) -> Vec<Effect> {
        if self.session_id.as_deref() != Some(session_id.as_str()) {
            return Vec::new();
        }
        let keep = self.selected_turn().and_then(|t| t.turn_id.clone());
        let newest_before = self.turns.last().and_then(|t| t.turn_id.clone());
        self.turns = turns;
        self.turn_selected = if self.follow {
            self.turns.len().saturating_sub(1)
        } else {
            keep.and_then(|id| {
                self.turns
                    .iter()
                    .position(|t| t.turn_id.as_deref() == Some(id.as_str()))
            })
            .unwrap_or(self.turn_selected)
            .min(self.turns.len().saturating_sub(1))
        };
        if let Some(effects) = self.open_subagent_turn(&session_id) {
            return effects;
        }
        // Following a session's timeline moves on to the turn that just started.
        let newest = self.turns.last().and_then(|t| t.turn_id.clone());
        let replaying = self.turn.as_ref().is_some_and(|t| t.replay.is_some());
        // A new session's first turn may arrive after the session itself.
        let pending = self.follow_pending;
        if !self.turns.is_empty() {
            self.follow_pending = false;
        }
        let newest_running = self
            .turns
            .last()
            .is_some_and(|t| t.status == TurnStatus::Running);
        let moved_on = newest.is_some()
            && newest != newest_before
            && (newest_before.is_some() || pending)
            && newest != self.turn.as_ref().map(|t| t.turn_id.clone());
        let open = match self.view {
            View::Timeline => moved_on,
            View::Turns => moved_on && newest_running,
            _ => false,
        };
        if self.follow && !replaying && open {
            return self.open_timeline();
        }
        Vec::new()
    }

    fn appended(&mut self, events: Vec<Envelope>) -> Vec<Effect> {
        if events.is_empty() {
            return Vec::new();
        }
        self.live_events += events.len() as u64;
        self.rates.record(&events);
        for env in &events {
            self.overviews.apply(env);
        }
        if let Some(last) = events.last() {
            self.max_seq = self.max_seq.max(last.seq);
        }
        if let Some(paused) = self.paused.as_mut() {
            paused.arrived += events.len() as u64;
            let session = self.session_id.as_deref();
            // Keep what the frozen view will need; the rest is re-read when it thaws.
            paused.held.extend(
                events
                    .into_iter()
                    .filter(|e| Some(e.session_id.as_str()) == session),
            );
            return Vec::new();
        }
        self.apply_appended(events, false)
    }

    fn apply_appended(&mut self, events: Vec<Envelope>, force_refresh: bool) -> Vec<Effect> {
        let mut effects = Vec::new();
        if force_refresh || events.iter().any(|e| is_lifecycle(&e.event)) {
            effects.push(Effect::Sessions);
            if let Some(session_id) = &self.session_id {
                if force_refresh
                    || events
                        .iter()
                        .any(|e| &e.session_id == session_id && is_lifecycle(&e.event))
                {
                    effects.push(Effect::Turns {
                        session_id: session_id.clone(),
                    });
                }
            }
        }
        if let Some(tools) = self.session_tools.as_mut() {
            // Events the read already saw are skipped by seq.
            for env in &events {
                tools.apply(env);
            }
        }
        if let Some(cost) = self.session_cost.as_mut() {
            for env in &events {
                cost.apply(env);
            }
        }
        let follow = self.follow;
        if let Some(turn) = self.turn.as_mut() {
            // While pages are still being read, the pages bring these events in order.
            if turn.exhausted {
                turn.extend(events);
                if follow && turn.replay.is_none() {
                    turn.selected = turn.items().len().saturating_sub(1);
                }
            }
        }
        effects.extend(self.more_pages());
        effects
    }

    /// Asks for the next timeline page when the selection nears the end (always when following).
    fn more_pages(&mut self) -> Vec<Effect> {
        let follow = self.follow;
        let Some(turn) = self.turn.as_mut() else {
            return Vec::new();
        };
        let near_end = match &turn.replay {
            Some(replay) => replay.cursor + REPLAY_AHEAD >= turn.events.len(),
            None => turn.selected + PAGE_AHEAD >= turn.items().len(),
        };
        if turn.exhausted || turn.loading || !(near_end || follow) {
            return Vec::new();
        }
        turn.loading = true;
        vec![Effect::TimelinePage {
            session_id: turn.session_id.clone(),
            turn_id: turn.turn_id.clone(),
            after_seq: turn.scanned_to,
        }]
    }

    fn open_timeline(&mut self) -> Vec<Effect> {
        let (Some(session_id), Some(summary)) =
            (self.session_id.clone(), self.selected_turn().cloned())
        else {
            return Vec::new();
        };
        let Some(turn_id) = summary.turn_id.clone() else {
            self.status = Some(format!(
                "turn {} has no turn id; its events cannot be listed",
                summary.request_id
            ));
            return Vec::new();
        };
        if summary.status == TurnStatus::Running {
            self.follow = true;
        }
        let first_seq = summary.first_seq;
        self.turn = Some(TurnView::new(&session_id, &turn_id, first_seq));
        self.view = View::Timeline;
        self.focus = Pane::List;
        self.conversation_scroll = 0;
        vec![
            Effect::TimelinePage {
                session_id: session_id.clone(),
                turn_id: turn_id.clone(),
                after_seq: first_seq.saturating_sub(1),
            },
            Effect::BaseState {
                session_id,
                turn_id,
                before_seq: first_seq,
            },
        ]
    }

    /// The rows of the current list a filter leaves shown (all of them without one).
    pub fn visible_rows(&self) -> Vec<usize> {
        let len = self.row_count();
        if !self.filter.hide || self.filter.query.trim().is_empty() {
            return (0..len).collect();
        }
        (0..len).filter(|&i| self.row_matches(i)).collect()
    }

    /// Rows in the current list.
    pub fn row_count(&self) -> usize {
        match self.view {
            View::Sessions => self.sessions.len(),
            View::Turns => self.turns.len(),
            View::Timeline => self.turn.as_ref().map_or(0, |t| t.items().len()),
            View::Event | View::Diff => 0,
        }
    }

    /// Whether row `i` of the current list matches the search.
    pub fn row_matches(&self, i: usize) -> bool {
        let query = &self.filter.query;
        match self.view {
            View::Sessions => self
                .sessions
                .get(i)
                .is_some_and(|s| session_matches(query, s, &self.overviews)),
            View::Turns => self.turns.get(i).is_some_and(|t| {
                let prompt = self
                    .session_id
                    .as_deref()
                    .and_then(|s| self.overviews.get(s))
                    .and_then(|o| o.prompt(&t.request_id));
                turn_row_matches(query, t, prompt)
            }),
            View::Timeline => self
                .turn
                .as_ref()
                .and_then(|t| t.items().get(i))
                .is_some_and(|item| item_matches(query, item)),
            View::Event | View::Diff => false,
        }
    }

    /// The search's matches in the current list, and which of them is selected (1-based).
    pub fn match_count(&self) -> (Option<usize>, usize) {
        if self.filter.query.trim().is_empty() {
            return (None, 0);
        }
        let current = match self.view {
            View::Sessions => self.session_selected,
            View::Turns => self.turn_selected,
            View::Timeline => self.turn.as_ref().map_or(0, |t| t.selected),
            View::Event | View::Diff => return (None, 0),
        };
        let mut total = 0;
        let mut at = None;
        for i in 0..self.row_count() {
            if self.row_matches(i) {
                total += 1;
                if i == current {
                    at = Some(total);
                }
            }
        }
        (at, total)
    }

    /// Moves `index` by `delta` rows among the rows shown.
    fn move_visible(&self, index: usize, delta: isize) -> usize {
        let len = self.row_count();
        if !self.filter.hide || self.filter.query.trim().is_empty() {
            return move_index(index, len, delta);
        }
        let rows = self.visible_rows();
        if rows.is_empty() {
            return index;
        }
        let here = rows.partition_point(|&r| r < index);
        let here = if rows.get(here) == Some(&index) || delta <= 0 {
            here.min(rows.len() - 1)
        } else {
            // Between shown rows: the first step lands on the next one.
            here.saturating_sub(1)
        };
        rows[move_index(here, rows.len(), delta)]
    }

    fn move_selection(&mut self, delta: isize) -> Vec<Effect> {
        // Moving by hand stops following, like scrolling up in `tail -f`.
        if self.view != View::Event {
            self.follow = false;
        }
        if self.view == View::Timeline && self.focus == Pane::Conversation {
            self.conversation_scroll = if delta < 0 {
                self.conversation_scroll
                    .saturating_add(delta.unsigned_abs().min(u16::MAX as usize) as u16)
            } else {
                self.conversation_scroll
                    .saturating_sub(delta.unsigned_abs().min(u16::MAX as usize) as u16)
            };
            return Vec::new();
        }
        if let (View::Diff, Some(diff)) = (self.view, self.diff.as_mut()) {
            let len = diff.diff.differences.len();
            diff.scroll = move_index(diff.scroll, len, delta);
            return Vec::new();
        }
        match self.view {
            View::Sessions => {
                self.session_selected = self.move_visible(self.session_selected, delta);
            }
            View::Turns => {
                self.turn_selected = self.move_visible(self.turn_selected, delta);
            }
            View::Timeline => {
                let current = self.turn.as_ref().map_or(0, |t| t.selected);
                let moved = self.move_visible(current, delta);
                if let Some(turn) = self.turn.as_mut() {
                    turn.selected = moved;
                }
                return self.more_pages();
            }
            View::Event => {
                self.event_scroll = if delta < 0 {
                    self.event_scroll
                        .saturating_sub(delta.unsigned_abs() as u16)
                } else {
                    self.event_scroll
                        .saturating_add(delta.unsigned_abs() as u16)
                };
            }
            View::Diff => {}
        }
        Vec::new()
    }

    fn replay_move(&mut self, to: impl FnOnce(&mut Replay, usize)) -> bool {
        let Some(turn) = self.turn.as_mut() else {
            return false;
        };
        let len = turn.events.len();
        let Some(replay) = turn.replay.as_mut() else {
            return false;
        };
        to(replay, len);
        let cursor = replay.cursor;
        turn.seek_to(cursor);
        true
    }

    fn step_event(&mut self, delta: isize) {
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        let Some(seq) = self.event_seq else {
            return;
        };
        let index = turn.events.partition_point(|e| e.seq < seq);
        let next = move_index(index, turn.events.len(), delta);
        self.event_seq = turn.events.get(next).map(|e| e.seq);
        self.event_scroll = 0;
    }

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

    fn toggle_replay(&mut self) -> Vec<Effect> {
        if self.view != View::Timeline {
            return Vec::new();
        }
        let Some(turn) = self.turn.as_mut() else {
            return Vec::new();
        };
        if turn.replay.take().is_some() {
            turn.show_all();
            turn.selected = turn.selected.min(turn.items().len().saturating_sub(1));
            return Vec::new();
        }
        // Replay pages through the turn like the plain view: it starts on the events loaded
        // and reads more as the cursor nears their end.
        self.follow = false;
        turn.replay = Some(Replay::new());
        turn.timeline = TimelineBuilder::new();
        turn.pacing = TurnPacing::new();
        turn.conversation = turn.base.clone();
        turn.seek_to(0);
        self.more_pages()
    }

    fn drill_in(&mut self) -> Vec<Effect> {
        match self.view {
            View::Sessions => {
                let Some(session) = self.sessions.get(self.session_selected) else {
                    return Vec::new();
                };
                let session_id = session.session_id.clone();
                self.enter_session(session_id)
            }
            View::Turns => self.open_timeline(),
            View::Timeline => {
                if let Some(item) = self.turn.as_ref().and_then(TurnView::selected_item) {
                    self.event_seq = Some(item.first_seq);
                    self.event_scroll = 0;
                    self.view = View::Event;
                }
                Vec::new()
            }
            View::Event | View::Diff => Vec::new(),
        }
    }

    /// Lists the turns of `session_id`.
    fn enter_session(&mut self, session_id: String) -> Vec<Effect> {
        if self.session_id.as_deref() != Some(session_id.as_str()) {
            self.turns.clear();
            self.turn_selected = 0;
            self.session_tools = None;
            self.session_cost = None;
        }
        self.session_id = Some(session_id.clone());
        self.view = View::Turns;
        self.focus = Pane::List;
        vec![
            Effect::Turns {
                session_id: session_id.clone(),
            },
            Effect::Cost {
                session_id: session_id.clone(),
            },
            Effect::ToolCalls { session_id },
        ]
    }

    fn back_out(&mut self) -> Vec<Effect> {
        if !self.filter.query.is_empty() {
            self.filter.query.clear();
            return Vec::new();
        }
        match self.view {
            View::Sessions => {}
            View::Turns => {
                self.view = View::Sessions;
            }
            // A sub-agent's timeline backs out to the parent's, where it was opened.
            View::Timeline if !self.nest.is_empty() => return self.subagent_out(),
            View::Timeline => {
                self.view = View::Turns;
                self.turn = None;
                self.focus = Pane::List;
                if let Some(session_id) = self.session_id.clone() {
                    return vec![Effect::Turns { session_id }];
                }
            }
            View::Event => {
                self.view = View::Timeline;
                self.event_seq = None;
            }
            View::Diff => {
                self.view = self.diff.take().map_or(View::Turns, |d| d.from);
            }
        }
        Vec::new()
    }

    fn edit_filter(&mut self, edit: FilterEdit) -> Vec<Effect> {
        match edit {
            FilterEdit::Char(c) => self.filter.query.push(c),
            FilterEdit::Backspace => {
                self.filter.query.pop();
            }
            FilterEdit::Apply => {
                self.filter.editing = false;
                return self.jump_to_match(true, true);
            }
            FilterEdit::Cancel => {
                self.filter.editing = false;
                self.filter.query.clear();
            }
        }
        Vec::new()
    }

    /// Moves the selection to the next (or previous) row the filter matches, wrapping around.
    /// With no match the selection stays; the footer's count says so.
    fn jump_to_match(&mut self, forward: bool, include_current: bool) -> Vec<Effect> {
        if self.filter.query.trim().is_empty() {
            return Vec::new();
        }
        let (len, current) = match self.view {
            View::Sessions => (self.sessions.len(), self.session_selected),
            View::Turns => (self.turns.len(), self.turn_selected),
            View::Timeline => match &self.turn {
                Some(t) => (t.items().len(), t.selected),
                None => return Vec::new(),
            },
            View::Event | View::Diff => return Vec::new(),
        };
        if len == 0 {
            return Vec::new();
        }
        let start = usize::from(!include_current);
        let found = (start..len + start).find_map(|offset| {
            let offset = offset % len;
            let index = if forward {
                (current + offset) % len
            } else {
                (current + len - offset) % len
            };
            self.row_matches(index).then_some(index)
        });
        if let Some(index) = found {
            self.follow = false;
            match self.view {
                View::Sessions => self.session_selected = index,
                View::Turns => self.turn_selected = index,
                View::Timeline => {
                    if let Some(turn) = self.turn.as_mut() {
                        turn.selected = index;
                    }
                }
                View::Event | View::Diff => {}
            }
        }
        self.more_pages()
    }
}

#[cfg(test)]
mod tests;
