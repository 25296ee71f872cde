//! Reading the log for the dashboard: performs the [`Effect`]s the app asks for with a
//! read-only [`LogReader`] (one page at a time, never the whole log) and tails new events on a
//! background thread.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use mull_store::diff::{diff_runs, DiffOptions, Run};
use mull_store::projection::SessionState;
use mull_store::{Inbox, InboxMessage, InboxStore, LogReader, StoreError};

use crate::dash::app::{Effect, Msg, TIMELINE_PAGE};

/// Events of the session folded per read when rebuilding the state before a turn.
const BASE_PAGE: usize = 4096;

/// Performs the app's reads against one read-only connection.
#[derive(Debug)]
pub struct Source {
    reader: LogReader,
    /// The PostgreSQL log whose inbox answers go to (the reader then reads its mirror).
    inbox_url: Option<String>,
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
    /// Opens `path` read-only.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            reader: LogReader::open(path)?,
            inbox_url: None,
            inbox: std::sync::OnceLock::new(),
        })
    }

    /// Answers go to the inbox of the PostgreSQL log at `url` (this source reads its mirror).
    pub fn posting_to(mut self, url: Option<&str>) -> Self {
        self.inbox_url = url.map(str::to_owned);
        self
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
                let opened = Poster::open(self.reader.path(), self.inbox_url.as_deref())?;
                self.inbox.get_or_init(|| opened)
            }
        };
        let message = InboxMessage::ApprovalAnswer {
            approval_id: approval_id.to_owned(),
            approved,
            reason: (!approved).then(|| "denied from the dashboard".to_owned()),
        };
        futures::executor::block_on(inbox.inbox.post(session_id, &message, chrono::Utc::now()))?;
        Ok(())
    }

    /// The newest seq in the log.
    pub fn max_seq(&self) -> Result<u64, StoreError> {
        self.reader.max_seq()
    }

    /// Performs one read and answers with the message carrying its result (or its failure).
    pub fn perform(&self, effect: &Effect) -> Msg {
        self.try_perform(effect).unwrap_or_else(|err| {
            Msg::Failed(format!("reading {}: {err}", self.reader.path().display()))
        })
    }

    fn try_perform(&self, effect: &Effect) -> Result<Msg, StoreError> {
        Ok(match effect {
            Effect::Sessions => Msg::Sessions(self.reader.sessions()?),
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
                crate::dash::cost::SessionCost::read(&self.reader, session_id)?,
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
    _thread: JoinHandle<()>,
}

/// How long one tail wait lasts before the thread checks whether anyone still listens.
const TAIL_WAIT: Duration = Duration::from_millis(100);

impl Follower {
    /// Tails `path` after `after_seq` on its own read-only connection. The thread ends when the
    /// receiver is dropped.
    pub fn spawn(path: PathBuf, after_seq: u64) -> Result<Self, StoreError> {
        let reader = LogReader::open(&path)?;
        let (sender, events) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("mull-dash-tail".into())
            .spawn(move || tail_loop(reader, after_seq, sender))
            .map_err(|source| StoreError::Io { path, source })?;
        Ok(Self {
            events,
            _thread: thread,
        })
    }
}

fn tail_loop(
    reader: LogReader,
    after_seq: u64,
    sender: Sender<Result<Vec<mull_core::Envelope>, String>>,
) {
    let path = reader.path().display().to_string();
    let mut tail = reader.tail(after_seq);
    loop {
        let batch = match tail.next_batch(TAIL_WAIT) {
            Ok(batch) if batch.is_empty() => {
                // Nothing new; stop once the dashboard is gone.
                if sender.send(Ok(Vec::new())).is_err() {
                    return;
                }
                continue;
            }
            Ok(batch) => Ok(batch),
            Err(err) => Err(format!("tailing {path}: {err}")),
        };
        let failed = batch.is_err();
        if sender.send(batch).is_err() || failed {
            return;
        }
    }
}
