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
use crate::dash::timeline::{Item, TimelineBuilder};

mod nest;

pub use nest::NestFrame;

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

/// The timeline of one turn: the loaded events, their rows, the conversation as of the cursor.
#[derive(Debug, Clone)]
pub struct TurnView {
    pub session_id: String,
    pub turn_id: String,
    /// The turn's events loaded so far, in seq order.
    pub events: Vec<Envelope>,
    /// Rows built from `events[..=cursor]` (all of them outside replay).
    pub timeline: TimelineBuilder,
    /// The pacing of the same events: first chunk, gaps, tool and model time.
    pub pacing: TurnPacing,
    pub selected: usize,
    /// The last seq of the session scanned by paging.
    pub scanned_to: u64,
    /// No page is left to read (later events come from the tail).
    pub exhausted: bool,
    pub loading: bool,
    /// The session before the turn, once read.
    pub base: Option<SessionState>,
    /// `base` with the turn's events up to the cursor applied.
    pub conversation: Option<SessionState>,
    pub replay: Option<Replay>,
}

impl TurnView {
    fn new(session_id: &str, turn_id: &str, first_seq: u64) -> Self {
        Self {
            session_id: session_id.to_owned(),
            turn_id: turn_id.to_owned(),
            events: Vec::new(),
            timeline: TimelineBuilder::new(),
            pacing: TurnPacing::new(),
            selected: 0,
            scanned_to: first_seq.saturating_sub(1),
            exhausted: false,
            loading: true,
            base: None,
            conversation: None,
            replay: None,
        }
    }

    /// The rows shown.
    pub fn items(&self) -> &[Item] {
        self.timeline.items()
    }

    /// The selected row.
    pub fn selected_item(&self) -> Option<&Item> {
        self.items().get(self.selected)
    }

    /// The index of the last event the view shows (the replay cursor, else the last loaded).
    pub fn cursor(&self) -> Option<usize> {
        match &self.replay {
            Some(replay) => Some(replay.cursor),
            None => self.events.len().checked_sub(1),
        }
    }

    /// Adds events of this turn that are newer than the ones loaded.
    fn extend(&mut self, events: impl IntoIterator<Item = Envelope>) {
        let last = self.events.last().map(|e| e.seq).unwrap_or(0);
        let fresh: Vec<Envelope> = events
            .into_iter()
            .filter(|e| e.seq > last && e.turn_id.as_deref() == Some(self.turn_id.as_str()))
            .collect();
        for env in fresh {
            if self.replay.is_none() {
                self.timeline.push(&env);
                self.pacing.apply(&env);
                if let Some(conversation) = &mut self.conversation {
                    conversation.apply(&env);
                }
            }
            self.events.push(env);
        }
    }

    /// Rebuilds rows and conversation for the replay cursor after it moved.
    fn seek_to(&mut self, index: usize) {
        let forward = self
            .timeline
            .last_seq()
            .zip(self.events.get(index))
            .is_some_and(|(shown, target)| target.seq >= shown);
        if forward {
            let start = self
                .events
                .partition_point(|e| Some(e.seq) <= self.timeline.last_seq());
            for env in self.events.get(start..=index).unwrap_or_default() {
                self.timeline.push(env);
                self.pacing.apply(env);
                if let Some(conversation) = &mut self.conversation {
                    conversation.apply(env);
                }
            }
        } else {
            let shown = self.events.get(..=index).unwrap_or_default();
            self.timeline = TimelineBuilder::from_events(shown);
            self.pacing = pacing_of(shown);
            self.conversation = self.base.clone().map(|mut state| {
                for env in shown {
                    state.apply(env);
                }
                state
            });
        }
        self.selected = self.items().len().saturating_sub(1);
    }

    /// Shows every loaded event again (leaving replay).
    fn show_all(&mut self) {
        self.timeline = TimelineBuilder::from_events(&self.events);
        self.pacing = pacing_of(&self.events);
        self.conversation = self.base.clone().map(|mut state| {
            for env in &self.events {
                state.apply(env);
            }
            state
        });
    }
}

fn pacing_of(events: &[Envelope]) -> TurnPacing {
    let mut pacing = TurnPacing::new();
    for env in events {
        pacing.apply(env);
    }
    pacing
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

/// Whether a filter query matches a row described by (kind, tool, status, text).
pub fn query_matches(query: &str, kind: &str, tool: &str, status: &str, text: &str) -> bool {
    let query = query.trim().to_lowercase();
    if query.is_empty() {
        return false;
    }
    let contains = |hay: &str, needle: &str| hay.to_lowercase().contains(needle);
    if let Some(want) = query.strip_prefix("kind:") {
        return contains(kind, want.trim());
    }
    if let Some(want) = query.strip_prefix("tool:") {
        return !tool.is_empty() && contains(tool, want.trim());
    }
    if let Some(want) = query.strip_prefix("status:") {
        return !status.is_empty() && contains(status, want.trim());
    }
    [kind, tool, status, text]
        .iter()
        .any(|h| contains(h, &query))
}

/// Whether the filter matches a timeline row.
pub fn item_matches(query: &str, item: &Item) -> bool {
    let (tool, status) = match &item.kind {
        crate::dash::timeline::ItemKind::Tool(t) => (
            t.tool.as_str(),
            t.decision.map(|d| d.as_str()).unwrap_or(""),
        ),
        crate::dash::timeline::ItemKind::TurnFinished { status, .. } => ("", status.as_str()),
        _ => ("", ""),
    };
    let status = if item.is_error() && status.is_empty() {
        "error"
    } else {
        status
    };
    query_matches(query, item.kind_name(), tool, status, &item.search_text())
}

/// Whether the filter matches a turn row.
pub fn turn_matches(query: &str, turn: &TurnSummary) -> bool {
    let text = format!(
        "{} {} {} {}",
        turn.turn_id.as_deref().unwrap_or(""),
        turn.request_id,
        turn.model_id.as_deref().unwrap_or(""),
        turn.error.as_deref().unwrap_or("")
    );
    query_matches(query, "turn", "", turn.status.as_str(), &text)
}

/// Whether the filter matches a turn row, the user's message it answers included.
pub fn turn_row_matches(query: &str, turn: &TurnSummary, prompt: Option<&str>) -> bool {
    turn_matches(query, turn) || prompt.is_some_and(|p| query_matches(query, "turn", "", "", p))
}

/// Whether the filter matches a session row: its id, agent, model or first message.
pub fn session_matches(
    query: &str,
    session: &SessionSummary,
    overviews: &SessionOverviews,
) -> bool {
    let overview = overviews.get(&session.session_id);
    let text = match overview {
        Some(o) => format!(
            "{} {} {} {}",
            session.session_id,
            o.agent.as_deref().unwrap_or(""),
            o.model_id.as_deref().unwrap_or(""),
            o.first_prompt.as_deref().unwrap_or("")
        ),
        None => session.session_id.clone(),
    };
    query_matches(query, "session", "", "", &text)
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
                if self.follow && arrived && !replaying {
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
mod tests {
    use super::*;
    use crate::dash::testlog::{append_all, sample_log, write_live_db};
    use crate::dash::timeline::ItemKind;
    use crate::dash::Dash;

    /// A log being written by a live process (its writer open until the test ends), and a
    /// dashboard on it.
    struct Live {
        _dir: tempfile::TempDir,
        log: mull_store::Log,
    }

    fn open_with(events: &[Envelope]) -> (Live, Dash) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, log) = write_live_db(dir.path(), events);
        let dash = Dash::open(&path).expect("open");
        (Live { _dir: dir, log }, dash)
    }

    fn press(dash: &mut Dash, actions: &[Action]) {
        for action in actions {
            dash.send(Msg::Action(*action));
        }
    }

    /// Appends `events` to the log behind `dash` (as the process writing it would) and
    /// delivers them as the tail does.
    fn commit_and_deliver(live: &Live, dash: &mut Dash, events: &[Envelope]) {
        append_all(&live.log, events);
        live.log.flush_blocking().expect("commit");
        dash.send(Msg::Appended(events.to_vec()));
    }

    #[test]
    fn enter_drills_in_and_esc_backs_out() {
        let (_dir, mut dash) = open_with(&sample_log());
        assert_eq!(dash.app.sessions.len(), 2);
        press(&mut dash, &[Action::Enter]);
        assert_eq!(dash.app.view, View::Turns);
        assert_eq!(dash.app.turns.len(), 3);
        press(&mut dash, &[Action::Enter]);
        assert_eq!(dash.app.view, View::Timeline);
        let turn = dash.app.turn.as_ref().expect("turn open");
        assert_eq!(turn.turn_id, "turn_1");
        assert!(turn.exhausted);
        assert!(turn.conversation.is_some());
        press(&mut dash, &[Action::Enter]);
        assert_eq!(dash.app.view, View::Event);
        assert_eq!(dash.app.selected_event().map(|e| e.seq), Some(3));
        press(&mut dash, &[Action::StepForward]);
        assert_eq!(dash.app.event_seq, Some(4));
        press(&mut dash, &[Action::Back, Action::Back, Action::Back]);
        assert_eq!(dash.app.view, View::Sessions);
        press(&mut dash, &[Action::Back]);
        assert_eq!(dash.app.view, View::Sessions);
        press(&mut dash, &[Action::Quit]);
        assert!(dash.app.quit);
    }

    #[test]
    fn following_opens_the_newest_running_turn() {
        let (_dir, mut dash) = open_with(&sample_log()[..44]);
        dash.follow_newest();
        assert!(dash.app.follow);
        assert_eq!(dash.app.view, View::Timeline);
        assert_eq!(
            dash.app.turn.as_ref().map(|t| t.turn_id.as_str()),
            Some("turn_3")
        );
        let (_dir, mut dash) = open_with(&sample_log());
        dash.follow_newest();
        assert_eq!(
            dash.app.view,
            View::Turns,
            "sess_2's newest turn has finished"
        );
        assert_eq!(dash.app.session_id.as_deref(), Some("sess_2"));
    }

    #[test]
    fn selection_clamps_at_both_ends() {
        let (_dir, mut dash) = open_with(&sample_log());
        press(&mut dash, &[Action::Up]);
        assert_eq!(dash.app.session_selected, 0);
        press(&mut dash, &[Action::PageDown]);
        assert_eq!(dash.app.session_selected, 1);
        press(&mut dash, &[Action::First]);
        assert_eq!(dash.app.session_selected, 0);
        press(&mut dash, &[Action::Last]);
        assert_eq!(dash.app.session_selected, 1);
    }

    #[test]
    fn live_events_extend_a_followed_timeline() {
        let all = sample_log();
        // Stop in the middle of turn_1's second step.
        let cut = all
            .iter()
            .position(|e| matches!(&e.event, Event::StepStarted { step: 1 }))
            .expect("step 1");
        let (dir, mut dash) = open_with(&all[..=cut]);
        press(&mut dash, &[Action::Enter, Action::Enter]);
        assert!(dash.app.follow, "the turn is running, so follow is on");
        let rows_before = dash.app.turn.as_ref().map(|t| t.items().len()).unwrap_or(0);
        commit_and_deliver(&dir, &mut dash, &all[cut + 1..cut + 4]);
        let turn = dash.app.turn.as_ref().expect("turn");
        assert!(turn.items().len() > rows_before);
        assert_eq!(
            turn.selected,
            turn.items().len() - 1,
            "follow keeps the newest row selected"
        );
        assert!(matches!(
            &turn.items().last().map(|i| &i.kind),
            Some(ItemKind::Text { text, open: true }) if text.starts_with("Rust 1.95")
        ));
        assert_eq!(dash.app.live_events, 3);
    }

    #[test]
    fn the_session_tool_calls_follow_new_events_without_a_reread() {
        let all = crate::dash::testlog::tools_log();
        // Stop in turn_2 before its failing call finished.
        let cut = all
            .iter()
            .position(|e| {
                matches!(&e.event, Event::ToolCallFinished { tool, .. } if tool == "status_page")
            })
            .expect("the failing call");
        let (dir, mut dash) = open_with(&all[..cut]);
        press(&mut dash, &[Action::Enter]);
        let calls = |dash: &Dash| {
            dash.app
                .session_tools
                .as_ref()
                .map(|c| (c.turns, mull_store::tool_usage::session_tool_usage(c)))
                .expect("read on entering the session")
        };
        let (turns, before) = calls(&dash);
        assert_eq!(turns, 2);
        let status = |usage: &[mull_store::tool_usage::ToolUsage]| {
            usage
                .iter()
                .find(|u| u.tool == "status_page")
                .map(|u| (u.calls, u.failures))
        };
        assert_eq!(status(&before), Some((1, 0)));
        // The tail may hand back events the read already saw: they are not counted twice.
        commit_and_deliver(&dir, &mut dash, &all[cut..]);
        dash.send(Msg::Appended(all[..cut].to_vec()));
        let (_, after) = calls(&dash);
        assert_eq!(status(&after), Some((1, 1)));
        let search = after.iter().find(|u| u.tool == "search").map(|u| u.calls);
        assert_eq!(search, Some(3));
    }

    #[test]
    fn pause_freezes_the_view_and_counts_what_arrived() {
        let all = sample_log();
        let cut = all
            .iter()
            .position(|e| matches!(&e.event, Event::StepStarted { step: 1 }))
            .expect("step 1");
        let (dir, mut dash) = open_with(&all[..=cut]);
        press(&mut dash, &[Action::Enter, Action::Enter, Action::Pause]);
        let frozen = dash.app.turn.as_ref().map(|t| t.items().to_vec());
        commit_and_deliver(&dir, &mut dash, &all[cut + 1..cut + 6]);
        assert_eq!(dash.app.paused.as_ref().map(|p| p.arrived), Some(5));
        assert_eq!(dash.app.turn.as_ref().map(|t| t.items().to_vec()), frozen);
        press(&mut dash, &[Action::Pause]);
        assert!(dash.app.paused.is_none());
        let thawed = dash.app.turn.as_ref().map(|t| t.items().len()).unwrap_or(0);
        assert!(thawed > frozen.map(|f| f.len()).unwrap_or(0));
    }

    #[test]
    fn following_moves_on_to_the_next_turn_of_the_session() {
        let all = sample_log();
        let cut = all
            .iter()
            .position(|e| matches!(&e.event, Event::TurnFinished { .. }))
            .expect("turn_1 finishes");
        let (dir, mut dash) = open_with(&all[..=cut]);
        press(&mut dash, &[Action::Enter, Action::Enter, Action::Follow]);
        assert_eq!(
            dash.app.turn.as_ref().map(|t| t.turn_id.as_str()),
            Some("turn_1")
        );
        let next = all
            .iter()
            .position(|e| e.turn_id.as_deref() == Some("turn_2"))
            .expect("turn_2");
        commit_and_deliver(&dir, &mut dash, &all[cut + 1..=next + 1]);
        assert_eq!(
            dash.app.turn.as_ref().map(|t| t.turn_id.as_str()),
            Some("turn_2")
        );
    }

    #[test]
    fn replay_steps_scrubs_and_leaves() {
        let (_dir, mut dash) = open_with(&sample_log());
        press(&mut dash, &[Action::Enter, Action::Enter]);
        let all_rows = dash.app.turn.as_ref().map(|t| t.items().len()).unwrap_or(0);
        press(&mut dash, &[Action::Replay]);
        let turn = dash.app.turn.as_ref().expect("turn");
        assert_eq!(turn.replay.as_ref().map(|r| r.cursor), Some(0));
        assert_eq!(turn.items().len(), 1);
        press(&mut dash, &[Action::StepForward, Action::StepForward]);
        let turn = dash.app.turn.as_ref().expect("turn");
        assert_eq!(
            turn.replay.as_ref().map(|r| (r.cursor, r.playing)),
            Some((2, false))
        );
        assert_eq!(turn.items().len(), 3);
        press(&mut dash, &[Action::Last]);
        let turn = dash.app.turn.as_ref().expect("turn");
        assert_eq!(turn.items().len(), all_rows);
        let final_messages = turn.conversation.as_ref().map(|c| c.messages.len());
        press(&mut dash, &[Action::ScrubBack, Action::First]);
        let turn = dash.app.turn.as_ref().expect("turn");
        assert_eq!(turn.replay.as_ref().map(|r| r.cursor), Some(0));
        // Before the turn's first event is applied only the user's message is there.
        assert!(turn.conversation.as_ref().map(|c| c.messages.len()) < final_messages);
        press(&mut dash, &[Action::Speed]);
        assert_eq!(
            dash.app
                .turn
                .as_ref()
                .and_then(|t| t.replay.as_ref())
                .map(|r| r.speed),
            Some(crate::dash::replay::Speed::X10)
        );
        press(&mut dash, &[Action::Replay]);
        let turn = dash.app.turn.as_ref().expect("turn");
        assert!(turn.replay.is_none());
        assert_eq!(turn.items().len(), all_rows);
    }

    #[test]
    fn replay_pages_through_a_turn_longer_than_a_page() {
        use crate::dash::testlog::LogBuilder;
        use mull_core::StreamPart;
        let mut b = LogBuilder::new();
        let (s, t) = ("sess_big", Some("turn_big"));
        b.push(s, t, 0, sample_log().remove(2).event);
        for i in 0..(TIMELINE_PAGE as i64 * 2 + 500) {
            b.push(
                s,
                t,
                1 + i,
                Event::Chunk {
                    step: 0,
                    part: StreamPart::TextDelta {
                        id: "t".into(),
                        text: "x".into(),
                    },
                    original: None,
                },
            );
        }
        b.push(
            s,
            t,
            TIMELINE_PAGE as i64 * 3,
            Event::TurnFinished {
                request_id: "req_1".into(),
                status: TurnStatus::Completed,
                error: None,
                steps: 1,
                usage: Usage::default(),
            },
        );
        let total = b.events.len();
        let (_dir, mut dash) = open_with(&b.events);
        press(&mut dash, &[Action::Enter, Action::Enter]);
        let turn = dash.app.turn.as_ref().expect("turn");
        assert!(
            turn.events.len() < total,
            "the first look reads one page, not the turn"
        );
        assert!(!turn.exhausted);
        let first_look = turn.events.len();
        press(&mut dash, &[Action::Down]);
        let after_scroll = dash.app.turn.as_ref().map_or(0, |t| t.events.len());
        assert!(
            after_scroll > first_look,
            "moving near the end reads the next page"
        );
        assert!(after_scroll < total);
        press(&mut dash, &[Action::Replay, Action::Speed, Action::Speed]);
        for _ in 0..total {
            dash.send(Msg::Tick(Duration::from_millis(20)));
        }
        let turn = dash.app.turn.as_ref().expect("turn");
        assert_eq!(
            turn.events.len(),
            total,
            "replay read the rest page by page"
        );
        assert_eq!(turn.replay.as_ref().map(|r| r.cursor), Some(total - 1));
        let text_len = turn
            .items()
            .iter()
            .map(|i| match &i.kind {
                ItemKind::Text { text, .. } => text.len(),
                _ => 0,
            })
            .sum::<usize>();
        assert_eq!(text_len, total - 2);
    }

    #[test]
    fn filter_jumps_between_matches_and_wraps() {
        let (_dir, mut dash) = open_with(&sample_log());
        press(&mut dash, &[Action::Enter, Action::Enter, Action::Filter]);
        for c in "kind:tool".chars() {
            dash.send(Msg::FilterEdit(FilterEdit::Char(c)));
        }
        dash.send(Msg::FilterEdit(FilterEdit::Apply));
        let selected = |dash: &Dash| {
            dash.app
                .turn
                .as_ref()
                .and_then(|t| t.selected_item())
                .and_then(|i| match &i.kind {
                    ItemKind::Tool(t) => Some(t.tool.clone()),
                    _ => None,
                })
        };
        assert_eq!(selected(&dash).as_deref(), Some("search"));
        press(&mut dash, &[Action::NextMatch]);
        assert_eq!(selected(&dash).as_deref(), Some("delete_all"));
        press(&mut dash, &[Action::NextMatch]);
        assert_eq!(selected(&dash).as_deref(), Some("search"), "wraps around");
        press(&mut dash, &[Action::PrevMatch]);
        assert_eq!(selected(&dash).as_deref(), Some("delete_all"));
        press(&mut dash, &[Action::Filter]);
        for c in "zebra".chars() {
            dash.send(Msg::FilterEdit(FilterEdit::Char(c)));
        }
        dash.send(Msg::FilterEdit(FilterEdit::Apply));
        assert_eq!(
            dash.app.match_count(),
            (None, 0),
            "no match, and the count says so"
        );
        assert_eq!(dash.app.status, None, "no message outlives the search");
        press(&mut dash, &[Action::Back]);
        assert!(
            dash.app.filter.query.is_empty(),
            "Esc clears the filter first"
        );
        assert_eq!(dash.app.view, View::Timeline);
    }

    #[test]
    fn queries_match_by_field_or_text() {
        assert!(query_matches("tool:sea", "tool", "search", "allow", ""));
        assert!(!query_matches("tool:sea", "text", "", "", "search me"));
        assert!(query_matches("status:err", "turn", "", "error", ""));
        assert!(query_matches("kind:step", "step_started", "", "", ""));
        assert!(query_matches("RUST", "text", "", "", "rust 1.95"));
        assert!(!query_matches("  ", "text", "", "", "anything"));
    }
}
