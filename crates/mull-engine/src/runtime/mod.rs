//! What a session's turns run on, below the session's public API: the log handle with its
//! projection ([`Recorder`]), the hooks dispatcher (the agent and its extensions), what
//! `configure_session` set up, the session's options, its turn lock and the requests in
//! flight. [`Session`](crate::Session) builds one and wraps it; its fields are private, and
//! the parts below it take the narrow handle they use (the recorder, the dispatcher, the
//! session config) from its accessors, so none of them needs the session's API to run or to
//! be tested.

mod options;
mod outcome;
pub(crate) mod search_index;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::broadcast::Broadcast;
use crate::hooks::{ExtensionHooks, Hooks};
use crate::recorder::Recorder;
use crate::session_config::SessionConfig;
use search_index::SearchIndex;

pub use options::{SessionOptions, SubmitOptions, TurnOptions};
pub use outcome::{
    ChatStream, ClientToolOutcome, OutcomeStatus, SubmissionResult, SubmitReceipt, TurnFailure,
    TurnOutcome,
};

/// A caller's signal, watched while its request lives (see [`Runtime::register_request`]).
pub(crate) struct SignalWatch {
    pub(crate) signal: CancellationToken,
    /// Whether the signal's cancellation is in the log; held while it is appended, so a
    /// second recorder waits until the event is written instead of passing it.
    pub(crate) recorded: Arc<Mutex<bool>>,
    _stop: tokio_util::sync::DropGuard,
}

/// The reason a `cancellation_requested` event gives when a caller's signal was cancelled.
pub const SIGNAL_CANCELLED: &str = "signal";

/// One open session's state and machinery (everything but its public API).
pub(crate) struct Runtime {
    session_id: String,
    hooks: Hooks,
    config: Arc<SessionConfig>,
    options: Arc<SessionOptions>,
    recorder: Arc<Recorder>,
    /// The turn lock: one turn (or answer, or memory write) of the session at a time.
    queue: tokio::sync::Mutex<()>,
    /// Cancellation tokens of requests that have not ended yet (queued or running).
    active: Mutex<HashMap<String, CancellationToken>>,
    /// Who waits for each submission's result.
    waiters: Mutex<HashMap<String, watch::Sender<Option<SubmissionResult>>>>,
    /// The full-text index of the conversation, built on first search.
    search: Arc<SearchIndex>,
    /// Turn tasks running in the background (streamed chats, submissions) that may not have
    /// ended yet: what `Session::abort_background_turns` stops.
    background: Mutex<Vec<tokio::task::AbortHandle>>,
    failures: Broadcast<TurnFailure>,
}

impl Runtime {
    /// A session's runtime over `recorder`, with nothing in flight.
    pub(crate) fn new(
        agent: Arc<dyn Agent>,
        config: SessionConfig,
        options: SessionOptions,
        recorder: Recorder,
    ) -> Runtime {
        let recorder = Arc::new(recorder);
        let config = Arc::new(config);
        let extensions = ExtensionHooks::new(
            options.session_id.clone(),
            options.extensions.clone(),
            Arc::clone(&recorder),
            Arc::clone(&config),
        );
        let outside = Arc::clone(&options.outside);
        let hooks = Hooks::new(agent, extensions, outside, Arc::clone(&recorder));
        Runtime {
            session_id: options.session_id.clone(),
            hooks,
            config,
            options: Arc::new(options),
            recorder,
            queue: tokio::sync::Mutex::new(()),
            active: Mutex::new(HashMap::new()),
            waiters: Mutex::new(HashMap::new()),
            search: Arc::default(),
            background: Mutex::new(Vec::new()),
            failures: Broadcast::new(64),
        }
    }

    /// The session's id.
    pub(crate) fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The log handle with its projection.
    pub(crate) fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }

    /// The one dispatcher of the agent's and the extensions' hooks.
    pub(crate) fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    /// What `configure_session` set up.
    pub(crate) fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// What `configure_session` set up, for a part that keeps it (a session tool).
    pub(crate) fn shared_config(&self) -> &Arc<SessionConfig> {
        &self.config
    }

    /// How the session was opened.
    pub(crate) fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// How the session was opened, for a part that keeps it (a sub-agent's call).
    pub(crate) fn shared_options(&self) -> &Arc<SessionOptions> {
        &self.options
    }

    /// The session's turn lock.
    pub(crate) fn turn_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.queue
    }

    /// The full-text index of the conversation.
    pub(crate) fn search_index(&self) -> &Arc<SearchIndex> {
        &self.search
    }

    /// Whether request `request_id` has not ended yet (`None`: whether any has not).
    pub(crate) fn is_active(&self, request_id: Option<&str>) -> bool {
        let active = lock(&self.active);
        match request_id {
            Some(id) => active.contains_key(id),
            None => !active.is_empty(),
        }
    }

    /// Registers who waits for submission `submission_id`'s result.
    pub(crate) fn await_submission(
        &self,
        submission_id: String,
        waiter: watch::Sender<Option<SubmissionResult>>,
    ) {
        lock(&self.waiters).insert(submission_id, waiter);
    }

    /// A watch on submission `submission_id`'s result, while someone waits for it.
    pub(crate) fn watch_submission(
        &self,
        submission_id: &str,
    ) -> Option<watch::Receiver<Option<SubmissionResult>>> {
        lock(&self.waiters)
            .get(submission_id)
            .map(watch::Sender::subscribe)
    }

    /// Takes whoever waits for submission `submission_id`'s result.
    pub(crate) fn take_waiter(
        &self,
        submission_id: &str,
    ) -> Option<watch::Sender<Option<SubmissionResult>>> {
        lock(&self.waiters).remove(submission_id)
    }

    /// Aborts every turn task running in the background.
    pub(crate) fn abort_background(&self) {
        for handle in lock(&self.background).drain(..) {
            handle.abort();
        }
    }

    /// Subscribes to the session's failed turns.
    pub(crate) fn failures(&self) -> &Broadcast<TurnFailure> {
        &self.failures
    }

    /// Forgets a request's cancellation token once its turn ended (cancelling it is a no-op).
    pub(crate) fn forget_request(&self, request_id: &str) {
        lock(&self.active).remove(request_id);
    }

    /// Cancels one request (`Some`) or every request of the session, recording the
    /// `cancellation_requested` event first — the one way any cancellation acts (`cancel_chat`,
    /// `abort_all`, a caller's signal, a sub-agent's parent letting go), so re-execution can
    /// re-issue it. Returns how many requests it cancelled; nothing is recorded for none.
    pub(crate) fn cancel_requests(
        &self,
        request_id: Option<String>,
        reason: String,
    ) -> Result<usize, crate::error::EngineError> {
        let tokens: Vec<CancellationToken> = {
            let active = lock(&self.active);
            match &request_id {
                Some(id) => active.get(id).into_iter().cloned().collect(),
                None => active.values().cloned().collect(),
            }
        };
        let tokens: Vec<_> = tokens.into_iter().filter(|t| !t.is_cancelled()).collect();
        if tokens.is_empty() {
            return Ok(0);
        }
        self.recorder.append(
            None,
            mull_core::Event::CancellationRequested { request_id, reason },
        )?;
        for token in &tokens {
            token.cancel();
        }
        Ok(tokens.len())
    }

    /// Registers request `request_id` as active with a token of its own, tied to a caller's
    /// `signal`: the token is the signal's child, so the turn sees the signal at once, and the
    /// cancellation is recorded as `cancellation_requested` (reason [`SIGNAL_CANCELLED`]) once,
    /// by whichever sees it first — the watcher task, or the turn as it ends aborted — so that
    /// path is an input event like every other. An already-cancelled signal is recorded at once.
    pub(crate) fn register_request(
        self: &Arc<Runtime>,
        request_id: &str,
        signal: Option<CancellationToken>,
    ) -> (CancellationToken, Option<SignalWatch>) {
        let Some(signal) = signal else {
            let token = CancellationToken::new();
            lock(&self.active).insert(request_id.to_owned(), token.clone());
            return (token, None);
        };
        let token = signal.child_token();
        lock(&self.active).insert(request_id.to_owned(), token.clone());
        let recorded = Arc::new(Mutex::new(false));
        if signal.is_cancelled() {
            record_signal(&self.recorder, request_id, &recorded);
        }
        let ended = CancellationToken::new();
        let watch = SignalWatch {
            signal: signal.clone(),
            recorded: Arc::clone(&recorded),
            _stop: ended.clone().drop_guard(),
        };
        let inner = Arc::clone(self);
        let id = request_id.to_owned();
        tokio::spawn(async move {
            tokio::select! {
                _ = signal.cancelled() => {
                    // A request that already ended has nothing to cancel.
                    if lock(&inner.active).contains_key(&id) {
                        record_signal(&inner.recorder, &id, &recorded);
                    }
                }
                _ = ended.cancelled() => {}
            }
        });
        (token, Some(watch))
    }

    /// Spawns a background turn task, keeping a handle to abort it (tasks that ended are
    /// forgotten here, so the list stays as long as the work in flight).
    pub(crate) fn spawn_turn<T: Send + 'static>(
        &self,
        task: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        // Boxed: a turn's future is large (kilobytes), and tokio moves an unboxed future
        // through several copies while spawning and finishing the task.
        let handle = tokio::spawn(Box::pin(task));
        let mut background = lock(&self.background);
        background.retain(|h| !h.is_finished());
        background.push(handle.abort_handle());
        handle
    }
}

/// Appends the `cancellation_requested` of a caller's cancelled signal, once. The lock is
/// held across the append: a turn ending aborted returns from here only once the event is in
/// the log, whoever wrote it, so its `turn_finished` always comes after it.
pub(crate) fn record_signal(recorder: &Recorder, request_id: &str, recorded: &Mutex<bool>) {
    let mut recorded = lock(recorded);
    if *recorded {
        return;
    }
    *recorded = true;
    let event = mull_core::Event::CancellationRequested {
        request_id: Some(request_id.to_owned()),
        reason: SIGNAL_CANCELLED.to_owned(),
    };
    if let Err(e) = recorder.append(None, event) {
        tracing::warn!(error = %e, "a cancelled signal could not be recorded");
    }
}

/// Locks `m`, going on with the data of a holder that panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A runtime on a log of its own, for testing the layers above it without a session.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::PathBuf;
    use std::sync::Arc;

    use async_trait::async_trait;
    use mull_core::{LanguageModel, ModelError, ModelRequest, ModelStream};
    use mull_store::{EventLog, Log};

    use super::{Runtime, SessionOptions};
    use crate::agent::Agent;
    use crate::recorder::Recorder;
    use crate::session_config::SessionConfig;

    /// A model no test here calls: its stream ends at once.
    struct Silent;

    #[async_trait]
    impl LanguageModel for Silent {
        fn provider(&self) -> &str {
            "test"
        }
        fn model_id(&self) -> &str {
            "silent"
        }
        async fn stream(&self, _request: ModelRequest) -> Result<ModelStream, ModelError> {
            Ok(Box::pin(futures::stream::empty()))
        }
    }

    struct Plain;

    impl Agent for Plain {
        fn name(&self) -> &str {
            "plain"
        }
        fn model(&self) -> Arc<dyn LanguageModel> {
            Arc::new(Silent)
        }
    }

    /// A runtime and the log file under it, removed on drop.
    pub(crate) struct TestRuntime {
        pub runtime: Arc<Runtime>,
        path: PathBuf,
    }

    impl Drop for TestRuntime {
        fn drop(&mut self) {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
            }
        }
    }

    /// Session `s` of a fresh log, as `config` sets it up, with deterministic clock and ids.
    pub(crate) async fn runtime(name: &str, config: SessionConfig) -> TestRuntime {
        let path = std::env::temp_dir().join(format!(
            "mull-engine-runtime-{name}-{}.db",
            std::process::id()
        ));
        let log: Arc<dyn EventLog> = Arc::new(Log::open(&path).expect("opens a fresh log"));
        let state = log.open_session("s").await.expect("opens session s");
        let options = SessionOptions::deterministic("s");
        let recorder = Recorder::new(log, "s".into(), Arc::clone(&options.clock), state, 16);
        TestRuntime {
            runtime: Arc::new(Runtime::new(Arc::new(Plain), config, options, recorder)),
            path,
        }
    }
}
