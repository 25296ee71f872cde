//! [`ProcessExtension`]: an extension that is a child process, implementing the engine's
//! [`Extension`] trait so one dispatcher serves in-process and out-of-process extensions.
//!
//! One hook call at a time: the host writes a request, then reads the child's stdout until
//! the reply with that id arrives, answering the child's host calls (permission-checked)
//! meanwhile. What counts as the extension failing, and what happens then:
//! - a JSON-RPC error reply: the hook failed; the process is fine and stays;
//! - EOF on stdout or a broken stdin (it crashed), or a line that is not the JSON-RPC reply
//!   expected (garbage on the protocol channel): the hook failed and the process is dropped;
//! - the call outlives its timeout (the engine drops the call): the process is killed at once.
//!
//! A dropped process is started again at the next call, after a backoff that doubles with
//! each failure in a row (`restart_backoff_ms`, 2×, 4× … capped at 30 s); calls within the
//! backoff fail fast instead of waiting.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mull_engine::{
    ChunkSnapshot, Extension, ExtensionHook, ExtensionHost, HookResult, HostCallError,
    StepSnapshot, ToolCallSnapshot, ToolResultSnapshot, TurnConfigPatch, TurnSnapshot,
};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;

use crate::manifest::{ChunkBatching, Manifest};
use crate::protocol::{self, code, method, Incoming, InitializeParams, RpcError};

/// Longest wait between restarts of an extension that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The least time a process gets to start and answer `initialize` in [`ProcessExtension::start`]
/// (interpreters start slowly on a busy machine; a hook's timeout may be much shorter).
const MIN_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many of the child's last stderr lines a crash report quotes.
const STDERR_TAIL: usize = 5;

/// Why a call to an extension process failed.
#[derive(Debug, thiserror::Error)]
pub enum ExtensionError {
    /// The program could not be started.
    #[error("extension {name:?}: cannot start {command:?}: {source}")]
    Spawn {
        name: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The process ended (or closed its pipes) during a call.
    #[error("extension {name:?} exited during {method} ({status}){stderr}")]
    Exited {
        name: String,
        method: String,
        status: String,
        stderr: String,
    },
    /// The process wrote something that is not the JSON-RPC message expected.
    #[error("extension {name:?} broke the protocol during {method}: {detail}")]
    Protocol {
        name: String,
        method: String,
        detail: String,
    },
    /// The extension answered with a JSON-RPC error.
    #[error("extension {name:?} failed {method}: {message} (code {code})")]
    Remote {
        name: String,
        method: String,
        code: i64,
        message: String,
    },
    /// The extension's reply does not have the shape the method returns.
    #[error("extension {name:?} replied to {method} with {detail}")]
    BadReply {
        name: String,
        method: String,
        detail: String,
    },
    /// The process is down after failures and its restart backoff has not elapsed.
    #[error("extension {name:?} is down after {failures} failure(s) in a row; next start in {retry_in_ms} ms")]
    Down {
        name: String,
        failures: u32,
        retry_in_ms: u128,
    },
}

/// A running child and its pipes.
struct Running {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

/// What survives between calls.
#[derive(Default)]
struct State {
    running: Option<Running>,
    /// Failures that dropped the process, in a row.
    failures: u32,
    restart_at: Option<Instant>,
    next_id: u64,
    /// Chunks held back by a batched `on_chunk` subscription.
    pending_chunks: Vec<ChunkSnapshot>,
}

impl State {
    /// Drops the process (kill_on_drop ends it) and schedules the next start.
    fn drop_process(&mut self, base: Duration) {
        if let Some(mut running) = self.running.take() {
            let _ = running.child.start_kill();
        }
        self.failures = self.failures.saturating_add(1);
        let factor = 2u32.saturating_pow(self.failures.saturating_sub(1).min(16));
        let delay = base.saturating_mul(factor).min(MAX_BACKOFF);
        self.restart_at = Some(Instant::now() + delay);
    }
}

/// Kills the process when a call is abandoned half-way (the engine's timeout dropped it), so
/// a hung extension never lingers and the next call starts from a clean pipe.
struct CallGuard<'a> {
    state: &'a mut State,
    backoff: Duration,
    finished: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.state.drop_process(self.backoff);
        }
    }
}

/// An extension running as a child process, described by its manifest.
pub struct ProcessExtension {
    manifest: Manifest,
    batching: ChunkBatching,
    state: tokio::sync::Mutex<State>,
    starts: AtomicU64,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

impl std::fmt::Debug for ProcessExtension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessExtension")
            .field("name", &self.manifest.name)
            .field("starts", &self.starts())
            .finish()
    }
}

/// Starts every manifest's process in load order; fails on the first that cannot start.
pub async fn start_all(
    manifests: Vec<Manifest>,
) -> Result<Vec<Arc<ProcessExtension>>, ExtensionError> {
    let mut out = Vec::with_capacity(manifests.len());
    for manifest in manifests {
        out.push(Arc::new(ProcessExtension::start(manifest).await?));
    }
    Ok(out)
}

impl ProcessExtension {
    /// An extension whose process starts at its first call.
    pub fn new(manifest: Manifest) -> ProcessExtension {
        let batching = manifest
            .chunk_batching()
            .unwrap_or(ChunkBatching::Unbatched);
        ProcessExtension {
            manifest,
            batching,
            state: tokio::sync::Mutex::new(State::default()),
            starts: AtomicU64::new(0),
            stderr_tail: Arc::new(Mutex::new(VecDeque::new())),
        }
    }

    /// Starts the process and completes the `initialize` handshake within the manifest's
    /// timeout, or 10 s if that is longer.
    pub async fn start(manifest: Manifest) -> Result<ProcessExtension, ExtensionError> {
        let extension = ProcessExtension::new(manifest);
        let mut state = extension.state.lock().await;
        let limit = extension.manifest.timeout().max(MIN_STARTUP_TIMEOUT);
        let started = tokio::time::timeout(limit, extension.ensure_running(&mut state)).await;
        match started {
            Ok(result) => result?,
            Err(_) => {
                // The abandoned handshake already dropped the process.
                return Err(ExtensionError::Protocol {
                    name: extension.manifest.name.clone(),
                    method: method::INITIALIZE.into(),
                    detail: format!("no reply within {} ms", limit.as_millis()),
                });
            }
        }
        drop(state);
        Ok(extension)
    }

    /// The manifest it was loaded from.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// How many times its process was started (1 + restarts).
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    fn backoff(&self) -> Duration {
        Duration::from_millis(self.manifest.restart_backoff_ms)
    }

    fn name(&self) -> &str {
        &self.manifest.name
    }

    /// Starts the process if it is not running (and the backoff allows), then initializes it.
    async fn ensure_running(&self, state: &mut State) -> Result<(), ExtensionError> {
        let alive = state
            .running
            .as_mut()
            .map(|running| matches!(running.child.try_wait(), Ok(None)));
        match alive {
            Some(true) => return Ok(()),
            // It died between calls: that is a failure like any other.
            Some(false) => state.drop_process(self.backoff()),
            None => {}
        }
        if let Some(at) = state.restart_at {
            let now = Instant::now();
            if at > now {
                return Err(ExtensionError::Down {
                    name: self.name().to_owned(),
                    failures: state.failures,
                    retry_in_ms: (at - now).as_millis(),
                });
            }
        }
        let mut command = Command::new(&self.manifest.command);
        command
            .args(&self.manifest.args)
            .envs(&self.manifest.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = &self.manifest.dir {
            command.current_dir(dir);
        }
        let spawn_error = |source| ExtensionError::Spawn {
            name: self.name().to_owned(),
            command: self.manifest.command.clone(),
            source,
        };
        let mut child = command.spawn().map_err(spawn_error)?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(spawn_error(std::io::Error::other("a pipe was not opened")));
        };
        self.starts.fetch_add(1, Ordering::Relaxed);
        self.forward_stderr(stderr);
        state.running = Some(Running {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        });
        let params = serde_json::to_value(InitializeParams::for_manifest(&self.manifest))
            .unwrap_or(Value::Null);
        let mut guard = CallGuard {
            state,
            backoff: self.backoff(),
            finished: false,
        };
        let result = self
            .exchange(&mut guard, method::INITIALIZE, &params, None)
            .await;
        guard.finished = true;
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                guard.state.drop_process(guard.backoff);
                Err(e)
            }
        }
    }

    /// Logs the child's stderr, keeping its last lines for crash reports.
    fn forward_stderr(&self, stderr: tokio::process::ChildStderr) {
        let name = self.name().to_owned();
        let tail = Arc::clone(&self.stderr_tail);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(extension = %name, "{line}");
                let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
    }

    fn stderr_summary(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        if tail.is_empty() {
            String::new()
        } else {
            let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
            format!("; its stderr ended with: {}", lines.join(" | "))
        }
    }

    /// One request and its reply, answering host calls meanwhile. Process-level failures
    /// are returned as errors; the caller decides whether the process survives.
    async fn exchange(
        &self,
        guard: &mut CallGuard<'_>,
        method_name: &str,
        params: &Value,
        host: Option<&dyn ExtensionHost>,
    ) -> Result<Value, ExtensionError> {
        guard.state.next_id += 1;
        let id = guard.state.next_id;
        let Some(running) = guard.state.running.as_mut() else {
            return Err(self.exited(method_name, "not running".into()));
        };
        let line = protocol::request_line(id, method_name, params);
        if let Err(e) = write_line(&mut running.stdin, &line).await {
            return Err(self.exited(method_name, format!("stdin closed: {e}")));
        }
        loop {
            let line = match running.stdout.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => {
                    let status = match running.child.wait().await {
                        Ok(status) => status.to_string(),
                        Err(e) => format!("status unknown: {e}"),
                    };
                    // Let the stderr task catch the last lines before quoting them.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    return Err(self.exited(method_name, status));
                }
                Err(e) => return Err(self.protocol(method_name, format!("unreadable stdout: {e}"))),
            };
            let incoming = Incoming::parse(&line)
                .map_err(|why| self.protocol(method_name, format!("{why}: {}", clip(&line))))?;
            match incoming {
                Incoming::Reply { id: got, result } => {
                    if got != json!(id) {
                        return Err(self.protocol(
                            method_name,
                            format!("a reply to request {got} while request {id} was open"),
                        ));
                    }
                    return result.map_err(|e| ExtensionError::Remote {
                        name: self.name().to_owned(),
                        method: method_name.to_owned(),
                        code: e.code,
                        message: e.message,
                    });
                }
                Incoming::Call {
                    id: call_id,
                    method: call,
                    params,
                } => {
                    let answer = match host {
                        Some(host) => self.answer_host_call(host, &call, params),
                        None => Err(RpcError {
                            code: code::UNSUPPORTED,
                            message: format!("host calls are not available during {method_name}"),
                        }),
                    };
                    if let Err(e) = &answer {
                        tracing::warn!(extension = %self.name(), call = %call, error = %e.message, "host call refused");
                    }
                    if let Some(call_id) = call_id {
                        let reply = protocol::reply_line(&call_id, answer);
                        if let Err(e) = write_line(&mut running.stdin, &reply).await {
                            return Err(self.exited(method_name, format!("stdin closed: {e}")));
                        }
                    }
                }
            }
        }
    }

    fn exited(&self, method_name: &str, status: String) -> ExtensionError {
        ExtensionError::Exited {
            name: self.name().to_owned(),
            method: method_name.to_owned(),
            status,
            stderr: self.stderr_summary(),
        }
    }

    fn protocol(&self, method_name: &str, detail: String) -> ExtensionError {
        ExtensionError::Protocol {
            name: self.name().to_owned(),
            method: method_name.to_owned(),
            detail,
        }
    }

    /// Answers one host call, after checking the manifest grants it.
    fn answer_host_call(
        &self,
        host: &dyn ExtensionHost,
        call: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let permissions = &self.manifest.permissions;
        let denied = |permission: String| {
            host_error(HostCallError::PermissionDenied {
                extension: self.name().to_owned(),
                permission,
            })
        };
        let block_name = |params: Value| -> Result<String, RpcError> {
            params
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| RpcError {
                    code: code::INVALID_PARAMS,
                    message: format!("{call} needs params {{\"name\": string}}"),
                })
        };
        match call {
            method::HOST_READ_MESSAGES => {
                if !permissions.read_messages {
                    return Err(denied("read_messages".into()));
                }
                Ok(json!({ "messages": host.messages() }))
            }
            method::HOST_READ_CONTEXT_BLOCK => {
                let name = block_name(params)?;
                if !permissions.may_read_block(&name) {
                    return Err(denied(format!("read_context_blocks = [{name:?}]")));
                }
                let text = host.read_context_block(&name).map_err(host_error)?;
                Ok(json!({ "text": text }))
            }
            method::HOST_WRITE_CONTEXT_BLOCK => {
                let text = params
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let name = block_name(params)?;
                let Some(text) = text else {
                    return Err(RpcError {
                        code: code::INVALID_PARAMS,
                        message: format!(
                            "{call} needs params {{\"name\": string, \"text\": string}}"
                        ),
                    });
                };
                if !permissions.may_write_block(&name) {
                    return Err(denied(format!("write_context_blocks = [{name:?}]")));
                }
                host.write_context_block(&name, &text).map_err(host_error)?;
                Ok(Value::Null)
            }
            other => Err(RpcError {
                code: code::METHOD_NOT_FOUND,
                message: format!("no host method {other:?}"),
            }),
        }
    }

    /// One hook call: starts the process if needed, delivers held-back chunks first (so the
    /// extension sees events in order), then the request.
    async fn call(
        &self,
        method_name: &str,
        params: Value,
        host: &dyn ExtensionHost,
    ) -> Result<Value, ExtensionError> {
        let mut state = self.state.lock().await;
        self.ensure_running(&mut state).await?;
        let pending = std::mem::take(&mut state.pending_chunks);
        let mut guard = CallGuard {
            state: &mut state,
            backoff: self.backoff(),
            finished: false,
        };
        let mut result = Ok(Value::Null);
        if !pending.is_empty() {
            let batch = json!({ "chunks": pending });
            result = self
                .exchange(&mut guard, method::ON_CHUNK_BATCH, &batch, Some(host))
                .await;
        }
        if result.is_ok() {
            result = self
                .exchange(&mut guard, method_name, &params, Some(host))
                .await;
        }
        guard.finished = true;
        match &result {
            Ok(_) => guard.state.failures = 0,
            // The extension itself answered: the process is healthy.
            Err(ExtensionError::Remote { .. }) => guard.state.failures = 0,
            Err(_) => guard.state.drop_process(guard.backoff),
        }
        result
    }

    /// Sends a snapshot as a hook call and ignores the result (observation hooks).
    async fn observe(
        &self,
        hook: ExtensionHook,
        snapshot: &impl Serialize,
        host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        let params = serde_json::to_value(snapshot)?;
        self.call(hook.as_str(), params, host).await?;
        Ok(())
    }

    /// Asks the process to exit, then waits up to the timeout before killing it.
    pub async fn shutdown(&self) {
        let mut state = self.state.lock().await;
        if let Some(mut running) = state.running.take() {
            let line = protocol::notification_line(method::SHUTDOWN, &Value::Null);
            let _ = write_line(&mut running.stdin, &line).await;
            drop(running.stdin);
            if tokio::time::timeout(self.manifest.timeout(), running.child.wait())
                .await
                .is_err()
            {
                let _ = running.child.start_kill();
            }
        }
    }
}

fn host_error(e: HostCallError) -> RpcError {
    let code = match e {
        HostCallError::PermissionDenied { .. } => code::PERMISSION_DENIED,
        HostCallError::Unsupported(_) => code::UNSUPPORTED,
        HostCallError::Rejected(_) => code::REJECTED,
    };
    RpcError {
        code,
        message: e.to_string(),
    }
}

async fn write_line(stdin: &mut ChildStdin, line: &str) -> std::io::Result<()> {
    stdin.write_all(line.as_bytes()).await?;
    stdin.write_all(b"\n").await?;
    stdin.flush().await
}

/// The start of a long line, for error messages.
fn clip(line: &str) -> String {
    const MAX: usize = 120;
    match line.char_indices().nth(MAX) {
        Some((at, _)) => format!("{:?}…", &line[..at]),
        None => format!("{line:?}"),
    }
}

#[async_trait]
impl Extension for ProcessExtension {
    fn name(&self) -> &str {
        &self.manifest.name
    }

    fn subscribes(&self, hook: ExtensionHook) -> bool {
        self.manifest.subscribes(hook)
    }

    fn timeout(&self, _hook: ExtensionHook) -> Duration {
        self.manifest.timeout()
    }

    async fn before_turn(
        &self,
        snapshot: &TurnSnapshot,
        host: &dyn ExtensionHost,
    ) -> HookResult<Option<TurnConfigPatch>> {
        let params = serde_json::to_value(snapshot)?;
        let reply = self.call(method::BEFORE_TURN, params, host).await?;
        let patch = TurnConfigPatch::from_json(&reply).map_err(|e| ExtensionError::BadReply {
            name: self.name().to_owned(),
            method: method::BEFORE_TURN.into(),
            detail: format!("a reply that is not a TurnConfig patch: {e}"),
        })?;
        Ok(patch)
    }

    async fn before_tool_call(
        &self,
        snapshot: &ToolCallSnapshot,
        host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        self.observe(ExtensionHook::BeforeToolCall, snapshot, host)
            .await
    }

    async fn after_tool_call(
        &self,
        snapshot: &ToolResultSnapshot,
        host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        self.observe(ExtensionHook::AfterToolCall, snapshot, host)
            .await
    }

    async fn on_step_finish(
        &self,
        snapshot: &StepSnapshot,
        host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        self.observe(ExtensionHook::OnStepFinish, snapshot, host)
            .await
    }

    async fn on_chunk(&self, snapshot: &ChunkSnapshot, host: &dyn ExtensionHost) -> HookResult<()> {
        let full = match self.batching {
            ChunkBatching::Unbatched => {
                return self.observe(ExtensionHook::OnChunk, snapshot, host).await
            }
            ChunkBatching::PerStep => false,
            ChunkBatching::Every(n) => {
                let mut state = self.state.lock().await;
                state.pending_chunks.push(snapshot.clone());
                if state.pending_chunks.len() < n.get() as usize {
                    return Ok(());
                }
                true
            }
        };
        if full {
            return self.flush_chunks(host).await;
        }
        self.state
            .lock()
            .await
            .pending_chunks
            .push(snapshot.clone());
        Ok(())
    }

    async fn flush_chunks(&self, host: &dyn ExtensionHost) -> HookResult<()> {
        let mut state = self.state.lock().await;
        if state.pending_chunks.is_empty() {
            return Ok(());
        }
        let chunks = std::mem::take(&mut state.pending_chunks);
        drop(state);
        let params = json!({ "chunks": chunks });
        self.call(method::ON_CHUNK_BATCH, params, host).await?;
        Ok(())
    }
}
