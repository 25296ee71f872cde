//! `mull dash`: a live dashboard over a log. It only reads the log; the one thing it writes is
//! an approval's answer, posted to the log's inbox for the session's writer (see
//! [`app::Answering`]).
//!
//! State ([`app`]), keys ([`keys`]), log reads ([`ingest`]) and drawing ([`view`]) are kept
//! apart: the loop here reads a key or new events, turns them into a [`app::Msg`], lets the
//! app update, performs the reads it asks for and draws.

pub mod app;
pub mod cost;
pub mod ingest;
pub mod keys;
pub mod rates;
pub mod replay;
pub mod timeline;
pub mod view;

#[cfg(test)]
pub mod testlog;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossterm::event::{
    self, DisableMouseCapture, EnableMouseCapture, Event as TermEvent, KeyCode, KeyEventKind,
    MouseEventKind,
};
use ratatui::backend::{Backend, TestBackend};
use ratatui::layout::Rect;
use ratatui::Terminal;

use app::{App, Effect, FilterEdit, Msg};
use ingest::{Follower, Source};

/// How long the loop waits for a key before checking for new events (bounds follow latency).
const POLL: Duration = Duration::from_millis(20);

/// The app and the reader that serves it: performs effects until none are left.
pub struct Dash {
    pub app: App,
    source: Source,
    /// Where the log's changes stood just before the first reads: following starts there.
    opened_at: mull_store::ChangeCursor,
}

impl Dash {
    /// Opens `db` read-only and loads the session list.
    #[cfg(test)]
    pub fn open(db: &Path) -> Result<Self> {
        Self::open_named(db, &db.display().to_string())
    }

    /// Opens `db` (a SQLite file or a `postgres://` URL) for reading, shown as `name`;
    /// answers go to its inbox. Every session's overview is read before this returns.
    #[cfg(test)]
    pub fn open_named(db: &Path, name: &str) -> Result<Self> {
        let (mut dash, effects) = Self::opened(db, name)?;
        dash.run_effects(effects);
        Ok(dash)
    }

    /// [`Dash::open_named`], but every session's overview is read on a reader of its own while
    /// the first frames draw (on a log of thousands of sessions that read takes seconds); the
    /// loop hands them over with [`Dash::take_overviews`].
    pub fn open_drawing_first(db: &Path, name: &str) -> Result<(Self, OverviewLoader)> {
        let (mut dash, effects) = Self::opened(db, name)?;
        let (later, now): (Vec<_>, Vec<_>) = effects
            .into_iter()
            .partition(|e| matches!(e, Effect::Overviews));
        dash.run_effects(now);
        let loader = OverviewLoader::spawn(db, name, !later.is_empty())?;
        Ok((dash, loader))
    }

    /// Hands over the overviews when the loader has read them; whether they came.
    pub fn take_overviews(&mut self, loader: &OverviewLoader) -> bool {
        match loader.read.try_recv() {
            Ok(msg) => {
                self.send(msg);
                true
            }
            Err(_) => false,
        }
    }

    fn opened(db: &Path, name: &str) -> Result<(Self, Vec<Effect>)> {
        let source = Source::open(db).with_context(|| format!("opening {name}"))?;
        // Taken before anything is read: what commits meanwhile is followed, not missed.
        let opened_at = source.cursor()?;
        let (mut app, effects) = App::new(name.to_owned());
        app.max_seq = source.event_count()?;
        app.damage = source.side_damage().to_vec();
        let dash = Self {
            app,
            source,
            opened_at,
        };
        Ok((dash, effects))
    }

    /// Follows the log from where it stood when the dashboard opened, on a reader of its own.
    pub fn follow(&self, db: &Path) -> Result<Follower> {
        Follower::spawn(db, self.opened_at, self.source.listed())
    }

    /// Sends one message and performs every read it leads to.
    pub fn send(&mut self, msg: Msg) {
        let effects = self.app.update(msg);
        self.run_effects(effects);
    }

    fn run_effects(&mut self, mut effects: Vec<Effect>) {
        // Reads answer with messages that may ask for more reads (following pages).
        while !effects.is_empty() {
            let mut next = Vec::new();
            for effect in dedup(effects) {
                let msg = self.source.perform(&effect);
                next.extend(self.app.update(msg));
            }
            effects = next;
        }
    }

    /// Turns follow on and opens the newest session, and its newest turn when that is still
    /// running.
    pub fn follow_newest(&mut self) {
        self.send(Msg::Action(keys::Action::Follow));
        self.send(Msg::Action(keys::Action::Enter));
        let running = self
            .app
            .selected_turn()
            .is_some_and(|t| t.status == mull_core::TurnStatus::Running);
        if running {
            self.send(Msg::Action(keys::Action::Enter));
        }
    }

    /// A mouse click at a cell of a `screen`-sized terminal: focuses the pane, selects the
    /// row (a click on the selected row opens it).
    pub fn click(&mut self, screen: Rect, column: u16, row: u16) {
        if let Some(hit) = view::hit::hit(&self.app, screen, column, row) {
            self.send(Msg::Click(hit));
        }
    }

    /// The mouse wheel over a cell: scrolls the pane under it by `rows`.
    pub fn wheel(&mut self, screen: Rect, column: u16, row: u16, rows: isize) {
        let pane = view::hit::hit(&self.app, screen, column, row)
            .map(|h| h.pane)
            .unwrap_or(self.app.focus);
        self.send(Msg::Scroll(pane, rows));
    }

    /// Draws one frame.
    pub fn draw<B: Backend>(&self, terminal: &mut Terminal<B>) -> Result<()> {
        terminal
            .draw(|frame| view::render(frame, &self.app))
            .map_err(|e| anyhow::anyhow!("drawing the dashboard: {e}"))?;
        Ok(())
    }
}

fn dedup(effects: Vec<Effect>) -> Vec<Effect> {
    let mut out: Vec<Effect> = Vec::with_capacity(effects.len());
    for effect in effects {
        if !out.contains(&effect) {
            out.push(effect);
        }
    }
    out
}

/// What `mull dash` starts with.
#[derive(Debug, Clone)]
pub struct DashOptions {
    /// Start in follow mode, opening the newest session.
    pub follow: bool,
    /// The prices costs are shown with.
    pub prices: mull_core::PriceTable,
    /// Calls the writer beside the dashboard (the demo) announces it will approve by itself.
    pub self_answers: app::SelfAnswers,
}

impl Default for DashOptions {
    fn default() -> DashOptions {
        DashOptions {
            follow: false,
            prices: mull_core::PriceTable::defaults(),
            self_answers: app::SelfAnswers::default(),
        }
    }
}

/// Every session's overview, read on a thread and a reader of its own.
pub struct OverviewLoader {
    read: std::sync::mpsc::Receiver<Msg>,
}

impl OverviewLoader {
    fn spawn(db: &Path, name: &str, wanted: bool) -> Result<Self> {
        let (send, read) = std::sync::mpsc::channel();
        if wanted {
            let mut source = Source::open(db).with_context(|| format!("opening {name}"))?;
            std::thread::Builder::new()
                .name("dash-overviews".into())
                .spawn(move || {
                    // The dashboard may have quit meanwhile: nobody left to tell.
                    let _ = send.send(source.perform(&Effect::Overviews));
                })
                .context("starting the thread that reads the sessions' overviews")?;
        }
        Ok(Self { read })
    }

    /// Waits until the overviews are read (or the reader thread is gone).
    fn wait(&self) -> Option<Msg> {
        self.read.recv().ok()
    }
}

/// Runs the dashboard in the terminal until the user quits. The terminal is restored on exit
/// and on panic.
pub fn run(db: &Path, options: DashOptions) -> Result<()> {
    run_named(db, &db.display().to_string(), options)
}

/// [`run`], the log shown as `name`.
pub fn run_named(db: &Path, name: &str, options: DashOptions) -> Result<()> {
    let (mut dash, overviews) = Dash::open_drawing_first(db, name)?;
    dash.app.prices = options.prices;
    dash.app.self_answers = options.self_answers;
    let follower = dash
        .follow(db)
        .with_context(|| format!("following {name}"))?;
    if options.follow {
        dash.follow_newest();
    }
    let mut terminal = ratatui::init();
    // Without mouse reports the dashboard still works; clicks just do nothing.
    let _ = crossterm::execute!(std::io::stdout(), EnableMouseCapture);
    let result = event_loop(&mut terminal, &mut dash, &follower, &overviews);
    let _ = crossterm::execute!(std::io::stdout(), DisableMouseCapture);
    ratatui::restore();
    result
}

fn event_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    dash: &mut Dash,
    follower: &Follower,
    overviews: &OverviewLoader,
) -> Result<()> {
    let mut last_tick = Instant::now();
    loop {
        dash.take_overviews(overviews);
        dash.draw(terminal)?;
        if event::poll(POLL).context("reading the terminal")? {
            match event::read().context("reading the terminal")? {
                TermEvent::Key(key) if key.kind != KeyEventKind::Release => {
                    if dash.app.answering.confirm.is_some() {
                        let yes = matches!(
                            key.code,
                            KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Enter
                        );
                        dash.send(Msg::Confirm(yes));
                    } else if dash.app.filter.editing {
                        let edit = match key.code {
                            KeyCode::Enter => Some(FilterEdit::Apply),
                            KeyCode::Esc => Some(FilterEdit::Cancel),
                            KeyCode::Backspace => Some(FilterEdit::Backspace),
                            KeyCode::Char(c) => Some(FilterEdit::Char(c)),
                            _ => None,
                        };
                        if let Some(edit) = edit {
                            dash.send(Msg::FilterEdit(edit));
                        }
                    } else if let Some(action) = keys::action_for(key) {
                        dash.send(Msg::Action(action));
                    }
                }
                TermEvent::Mouse(mouse) => {
                    let size = terminal
                        .size()
                        .map_err(|e| anyhow::anyhow!("reading the terminal size: {e}"))?;
                    let screen = Rect::new(0, 0, size.width, size.height);
                    let (x, y) = (mouse.column, mouse.row);
                    match mouse.kind {
                        MouseEventKind::Down(_) => dash.click(screen, x, y),
                        MouseEventKind::ScrollDown => dash.wheel(screen, x, y, 3),
                        MouseEventKind::ScrollUp => dash.wheel(screen, x, y, -3),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        loop {
            match follower.events.try_recv() {
                Ok(Ok(events)) => dash.send(Msg::Appended(events)),
                Ok(Err(message)) => dash.send(Msg::Failed(message)),
                Err(_) => break,
            }
        }
        let now = Instant::now();
        dash.send(Msg::Tick(now - last_tick));
        last_tick = now;
        if dash.app.quit {
            return Ok(());
        }
    }
}

/// What the first-frame benchmark measured.
#[derive(Debug, Clone, Copy)]
pub struct BenchTimes {
    /// Opening the log and drawing the session list.
    pub first_frame: Duration,
    /// From the start to every session's overview read and drawn (read on a thread of its own
    /// while the first frame draws).
    pub overviews_drawn: Duration,
    /// From the start to the newest turn's timeline drawn.
    pub newest_timeline: Duration,
    /// Mean time of one key press (row down) plus one frame, over the sessions, turns and
    /// timeline lists.
    pub scroll_frame: Duration,
}

/// Opens `db`, draws the first frame to an off-screen terminal, then takes the path a user
/// takes first (newest session, newest turn) and scrolls each list, timing it all.
pub fn bench_first_frame(db: &Path, width: u16, height: u16) -> Result<BenchTimes> {
    let start = Instant::now();
    let name = db.display().to_string();
    let (mut dash, overviews) = Dash::open_drawing_first(db, &name)?;
    let mut terminal = Terminal::new(TestBackend::new(width, height))
        .map_err(|e| anyhow::anyhow!("creating the off-screen terminal: {e}"))?;
    dash.draw(&mut terminal)?;
    let first_frame = start.elapsed();
    if let Some(msg) = overviews.wait() {
        dash.send(msg);
    }
    dash.draw(&mut terminal)?;
    let overviews_drawn = start.elapsed();
    dash.send(Msg::Action(keys::Action::Last));
    dash.send(Msg::Action(keys::Action::Enter));
    dash.send(Msg::Action(keys::Action::Last));
    dash.send(Msg::Action(keys::Action::Enter));
    dash.draw(&mut terminal)?;
    let newest_timeline = start.elapsed();

    let mut frames = 0u32;
    let scrolling = Instant::now();
    for back_out in [false, true, true] {
        if back_out {
            dash.send(Msg::Action(keys::Action::Back));
        }
        dash.send(Msg::Action(keys::Action::First));
        for _ in 0..200 {
            dash.send(Msg::Action(keys::Action::Down));
            dash.draw(&mut terminal)?;
            frames += 1;
        }
    }
    Ok(BenchTimes {
        first_frame,
        overviews_drawn,
        newest_timeline,
        scroll_frame: scrolling.elapsed() / frames.max(1),
    })
}
