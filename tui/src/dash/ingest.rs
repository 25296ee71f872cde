//! Reading the log for the dashboard: performs the [`Effect`]s the app asks for through the
//! read contract ([`ReadLog`]: a SQLite file or a PostgreSQL database, read where it is; one
//! page at a time, never the whole log) and follows what changes on a background thread.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use mull_store::diff::{diff_runs, DiffOptions, Run};
use mull_store::projection::SessionState;
use mull_store::{ChangeCursor, Inbox, InboxMessage, InboxStore, ReadLog, StoreError};

use crate::dash::app::{Effect, Msg, TIMELINE_PAGE};

/// Events of the session folded per read when rebuilding the state before a turn.
const BASE_PAGE: usize = 4096;

/// Performs the app's reads against one reader of the log.
#[derive(Debug)]
pub struct Source {
    reader: Box<dyn ReadLog>,
    /// The log: a SQLite file or a `postgres://` URL (whose inbox answers go to).
    db: PathBuf,
    /// Each session's last seq as the last session listing found it: where following it
    /// starts.
    listed: HashMap<String, u64>,
    /// The log's inbox, opened when the first answer is posted.
    inbox: std::sync::OnceLock<Poster>,
}

/// An inbox of either backend. Its calls are awaited on the dashboard's own thread (which may
/// itself run inside a runtime, as in tests); a PostgreSQL inbox's connection runs on a
/// one-worker runtime of its own.
#[derive(Debug)]
struct Poster {
    inbox: Box<dyn InboxStore>,
    _runtime: Option<tokio::runtime::Runtime>,
}

impl Poster {
    fn open(path: &Path, url: Option<&str>) -> Result<Poster, StoreError> {
        let Some(url) = url else {
            return Ok(Poster {
                inbox: Box::new(Inbox::open(path)?),
                _runtime: None,
            });
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|source| StoreError::Io {
                path: path.to_owned(),
                source,
            })?;
        let url = url.to_owned();
        let opened = runtime.spawn(async move { mull_store_pg::PgInbox::open(&url).await });
        let inbox = futures::executor::block_on(opened).map_err(|e| StoreError::Io {
            path: path.to_owned(),
            source: std::io::Error::other(e),
        })??;
        Ok(Poster {
            inbox: Box::new(inbox),
            _runtime: Some(runtime),
        })
    }
}

impl Source {
    /// Files beside the log holding rows it reads without, as the reader found them (the
    /// store's one finding, which `mull check` reports too).
    pub fn side_damage(&self) -> &[mull_store::SideDamage] {
        self.reader.side_damage()
    }

    /// Opens the log `db` (a SQLite file or a `postgres://` URL) for reading.
    pub fn open(db: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            reader: crate::log_source::open_log(db)?,
            db: db.to_owned(),
            listed: HashMap::new(),
            inbox: std::sync::OnceLock::new(),
        })
    }

    /// Where the log's changes stand now.
    pub fn cursor(&self) -> Result<ChangeCursor, StoreError> {
        self.reader.cursor()
    }

    /// Each session's last seq as the last listing found it.
    pub fn listed(&self) -> HashMap<String, u64> {
        self.listed.clone()
    }

    /// Posts an approval's answer to the log's inbox, for the session's writer to take (on
    /// PostgreSQL, the node that holds the session or opens it).
    fn post_answer(
        &self,
        session_id: &str,
        approval_id: &str,
        approved: bool,
    ) -> Result<(), StoreError> {
        let inbox = match self.inbox.get() {
            Some(inbox) => inbox,
            None => {
                let opened = Poster::open(&self.db, crate::log_source::url(&self.db))?;
                self.inbox.get_or_init(|| opened)
            }
        };
        let message = InboxMessage::ApprovalAnswer {
            approval_id: approval_id.to_owned(),
            approved,
            reason: (!approved).then(|| "denied from the dashboard".to_owned()),
            by: Some("mull dash".to_owned()),
        };
        futures::executor::block_on(inbox.inbox.post(session_id, &message, chrono::Utc::now()))?;
        Ok(())
    }

    /// How many events the log holds.
    pub fn event_count(&self) -> Result<u64, StoreError> {
        self.reader.event_count()
    }

    /// Performs one read and answers with the message carrying its result (or its failure).
    pub fn perform(&mut self, effect: &Effect) -> Msg {
        self.try_perform(effect)
            .unwrap_or_else(|err| Msg::Failed(format!("reading {}: {err}", self.reader.name())))
    }

    fn try_perform(&mut self, effect: &Effect) -> Result<Msg, StoreError> {
        Ok(match effect {
            Effect::Sessions => {
                let sessions = self.reader.sessions()?;
                self.listed = sessions
                    .iter()
                    .map(|s| (s.session_id.clone(), s.last_seq))
                    .collect();
                Msg::Sessions(sessions)
            }
            Effect::Overviews => Msg::Overviews(Box::new(self.reader.session_overviews()?)),
            Effect::Diff { a, b } => {
                let run = |t: &crate::dash::app::TurnRef| -> Result<Run, StoreError> {
                    let events = self.reader.turn_events(&t.session_id, &t.turn_id)?;
                    Ok(Run::from_events(t.label.clone(), &events))
                };
                let options = DiffOptions {
                    // Two turns the user chose are compared whatever conversations they are in.
                    allow_unrelated: true,
                    ..DiffOptions::default()
                };
                match diff_runs(&run(a)?, &run(b)?, &options) {
                    Ok(diff) => Msg::Diff(Box::new(diff)),
                    Err(err) => Msg::Failed(format!("comparing the turns: {err}")),
                }
            }
            Effect::PostAnswer {
                session_id,
                approval_id,
                approved,
            } => Msg::AnswerPosted {
                approval_id: approval_id.clone(),
                approved: *approved,
                posted: self
                    .post_answer(session_id, approval_id, *approved)
                    .map_err(|e| e.to_string()),
            },
            Effect::Turns { session_id } => Msg::Turns {
                session_id: session_id.clone(),
                turns: self.reader.turns(session_id)?,
            },
            Effect::ToolCalls { session_id } => {
                Msg::ToolCalls(Box::new(self.reader.session_tool_calls(session_id)?))
            }
            Effect::Cost { session_id } => Msg::Cost(Box::new(
                crate::dash::cost::SessionCost::read(&*self.reader, session_id)?,
            )),
            Effect::TimelinePage {
                session_id,
                turn_id,
                after_seq,
            } => {
                let page = self
                    .reader
                    .session_page(session_id, *after_seq, TIMELINE_PAGE)?;
                let exhausted = page.len() < TIMELINE_PAGE;
                let scanned_to = page.last().map(|e| e.seq).unwrap_or(*after_seq);
                Msg::TimelinePage {
                    turn_id: turn_id.clone(),
                    events: page
                        .into_iter()
                        .filter(|e| e.turn_id.as_deref() == Some(turn_id.as_str()))
                        .collect(),
                    scanned_to,
                    exhausted,
                }
            }
            Effect::BaseState {
                session_id,
                turn_id,
                before_seq,
            } => {
                let mut state = SessionState::new(session_id.clone());
                let mut after = 0u64;
                'pages: loop {
                    let page = self.reader.session_page(session_id, after, BASE_PAGE)?;
                    let full = page.len() == BASE_PAGE;
                    for env in &page {
                        if env.seq >= *before_seq {
                            break 'pages;
                        }
                        state.apply(env);
                        after = env.seq;
                    }
                    if !full {
                        break;
                    }
                }
                Msg::Base {
                    turn_id: turn_id.clone(),
                    state: Box::new(state),
                }
            }
        })
    }
}

/// New events from the log, delivered by a background thread.
#[derive(Debug)]
pub struct Follower {
    pub events: Receiver<Result<Vec<mull_core::Envelope>, String>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Follower {
    /// Waits for the tail thread to close its read connection: the log's writer may close
    /// right after the dashboard (`mull demo`), and only the last connection to close removes
    /// SQLite's -wal and -shm files.
    fn drop(&mut self) {
        let (_, closed) = mpsc::channel();
        drop(std::mem::replace(&mut self.events, closed));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How often the follower asks the log what changed (bounds how late a new event shows; a
/// look with nothing new reads only the log's change index).
pub const FOLLOW_POLL: Duration = Duration::from_millis(20);

/// How many events one read of a changed session takes at most.
const FOLLOW_PAGE: usize = 1024;

impl Follower {
    /// Follows `db` from `cursor` on its own reader: each session's events after its position
    /// in `positions` (a session not in it: from its start), as they are committed. The
    /// thread ends when the receiver is dropped.
    pub fn spawn(
        db: &Path,
        cursor: ChangeCursor,
        positions: HashMap<String, u64>,
    ) -> anyhow::Result<Self> {
        let reader = crate::log_source::open_log(db)?;
        let (sender, events) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("mull-dash-tail".into())
            .spawn(move || follow_loop(&*reader, cursor, positions, sender))?;
        Ok(Self {
            events,
            thread: Some(thread),
        })
    }
}

/// The new events of the sessions changed since `cursor`, in the log's order; moves
/// `positions` and `cursor` past them.
pub fn read_changes(
    reader: &dyn ReadLog,
    cursor: &mut ChangeCursor,
    positions: &mut HashMap<String, u64>,
) -> Result<Vec<mull_core::Envelope>, StoreError> {
    let changes = reader.changes(*cursor)?;
    let mut batch = Vec::new();
    for change in changes.sessions {
        let mut after = positions.get(&change.session_id).copied().unwrap_or(0);
        while after < change.last_seq {
            let page = reader.session_page(&change.session_id, after, FOLLOW_PAGE)?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            batch.extend(page);
        }
        positions.insert(change.session_id, after);
    }
    if reader.numbers_across_sessions() {
        batch.sort_by_key(|e| e.seq);
    } else {
        batch.sort_by_key(|e| e.at);
    }
    *cursor = changes.cursor;
    Ok(batch)
}

fn follow_loop(
    reader: &dyn ReadLog,
    mut cursor: ChangeCursor,
    mut positions: HashMap<String, u64>,
    sender: Sender<Result<Vec<mull_core::Envelope>, String>>,
) {
    let name = reader.name();
    loop {
        let batch = match read_changes(reader, &mut cursor, &mut positions) {
            Ok(batch) => Ok(batch),
            Err(err) => Err(format!("following {name}: {err}")),
        };
        let idle = batch.as_ref().is_ok_and(Vec::is_empty);
        let failed = batch.is_err();
        // Nothing new is sent too: a failed send says the dashboard is gone.
        if sender.send(batch).is_err() || failed {
            return;
        }
        if idle {
            std::thread::sleep(FOLLOW_POLL);
        }
    }
}
