//! Out-of-process extensions in real turns: the two examples, isolation of a crashing, a
//! hanging and a garbage-printing extension, permissions, restart after a crash, and chunk
//! batching. The extensions are python3 scripts (examples/extensions and tests/fixtures).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use mull_core::{DecisionAction, Envelope, Event, LanguageModel, TurnConfigRecord, UIMessage};
use mull_engine::{
    ChunkSnapshot, ContextBlock, Extension, ExtensionHook, ExtensionHost, FnTool, HostCallError,
    OutcomeStatus, Session, SessionConfig, SessionOptions, ToolError, ToolSet, TurnOptions,
    TurnSnapshot,
};
use mull_extensions::{start_all, Manifest, ProcessExtension};
use mull_providers::scripted::ScriptedModel;
use mull_store::{Log, LogReader};
use serde_json::{json, Value};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A manifest for tests/fixtures/misbehave.py in `mode`.
fn misbehave(name: &str, mode: &str, extra: &str) -> Manifest {
    let text = format!(
        "name = {name:?}\ncommand = \"python3\"\nargs = [\"misbehave.py\", {mode:?}]\n{extra}\n"
    );
    Manifest::from_toml(&text, fixtures(), &format!("{name}.toml")).unwrap()
}

struct TestAgent {
    model: ScriptedModel,
}

#[async_trait]
impl mull_engine::Agent for TestAgent {
    fn name(&self) -> &str {
        "test-agent"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Q {
            q: String,
        }
        let search = FnTool::new("search", "Searches.", |i: Q, _| async move {
            Ok::<Value, ToolError>(json!({ "hits": i.q.len() }))
        });
        let shell = FnTool::new("shell", "Runs a command.", |_: Q, _| async move {
            Ok::<Value, ToolError>(json!("ran"))
        });
        ToolSet::new().with(search.shared()).with(shell.shared())
    }
    fn system_prompt(&self) -> String {
        "You are terse.".into()
    }
}

struct Env {
    _dir: tempfile::TempDir,
    path: PathBuf,
    log: Log,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mull.db");
        let log = Log::open(&path).unwrap();
        Env {
            _dir: dir,
            path,
            log,
        }
    }

    async fn session(&self, model: ScriptedModel, extensions: &[Arc<ProcessExtension>]) -> Session {
        let options = SessionOptions::deterministic("s1").with_extensions(
            extensions
                .iter()
                .map(|e| Arc::clone(e) as Arc<dyn Extension>),
        );
        Session::open(&self.log, Arc::new(TestAgent { model }), options)
            .await
            .unwrap()
    }

    async fn events(&self) -> Vec<Envelope> {
        self.log.flush().await.unwrap();
        LogReader::open(&self.path)
            .unwrap()
            .session_page("s1", 0, 10_000)
            .unwrap()
    }

    async fn configured(&self) -> Vec<TurnConfigRecord> {
        self.events()
            .await
            .into_iter()
            .filter_map(|e| match e.event {
                Event::TurnConfigured { config } => Some(*config),
                _ => None,
            })
            .collect()
    }

    /// (hook, source, error, timed_out) of every hook_failed event.
    async fn failures(&self) -> Vec<(String, String, String, bool)> {
        self.events()
            .await
            .into_iter()
            .filter_map(|e| match e.event {
                Event::HookFailed {
                    hook,
                    source,
                    error,
                    timed_out,
                    ..
                } => Some((
                    serde_json::to_value(hook)
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_owned(),
                    source,
                    error,
                    timed_out,
                )),
                _ => None,
            })
            .collect()
    }
}

async fn turn(session: &Session, id: &str) -> OutcomeStatus {
    session
        .save_messages(vec![UIMessage::user(id, "hello")], TurnOptions::default())
        .await
        .unwrap()
        .status
}

fn answer(text: &str) -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| s.text(text).usage(10, 4))
        .build()
}

#[tokio::test]
async fn the_tool_policy_example_keeps_blocked_tools_from_the_model() {
    let env = Env::new();
    let manifest =
        Manifest::from_path(repo_root().join("examples/extensions/tool_policy.toml")).unwrap();
    let extensions = start_all(vec![manifest]).await.unwrap();
    // The model calls `shell` anyway; the turn's active tools no longer hold it.
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("call_1", "shell", json!({"q": "rm -rf /"})))
        .step(|s| s.text("I cannot run that."))
        .build();
    let session = env.session(model.clone(), &extensions).await;
    assert_eq!(turn(&session, "u1").await, OutcomeStatus::Completed);

    let configured = env.configured().await;
    assert_eq!(configured[0].active_tools, Some(vec!["search".to_owned()]));
    assert!(configured[0]
        .overrides
        .contains(&"ext:tool-policy:active_tools".to_owned()));
    let offered: Vec<String> = model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(offered, ["search"]);
    let decided = env
        .events()
        .await
        .into_iter()
        .find_map(|e| match e.event {
            Event::ToolDecided { action, reason, .. } => Some((action, reason)),
            _ => None,
        })
        .unwrap();
    assert_eq!(decided.0, DecisionAction::Invalid);
    assert!(decided.1.unwrap().contains("unavailable tool \"shell\""));
    assert!(env.failures().await.is_empty());
}

#[tokio::test]
async fn the_token_counter_example_reports_usage_into_the_next_turn() {
    let env = Env::new();
    let manifest =
        Manifest::from_path(repo_root().join("examples/extensions/token_counter.toml")).unwrap();
    let extensions = start_all(vec![manifest]).await.unwrap();
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.tool_call("call_1", "search", json!({"q": "mull"}))
                .usage(20, 5)
        })
        .step(|s| s.text("Found.").usage(30, 7))
        .step(|s| s.text("Again.").usage(40, 1))
        .build();
    let session = env.session(model, &extensions).await;
    assert_eq!(turn(&session, "u1").await, OutcomeStatus::Completed);
    assert_eq!(turn(&session, "u2").await, OutcomeStatus::Completed);

    let configured = env.configured().await;
    assert_eq!(configured[0].system.as_deref(), Some("You are terse."));
    assert_eq!(
        configured[1].system.as_deref(),
        Some(
            "You are terse.\n\n[token-counter] Tokens used so far in this session: \
             50 input, 12 output, over 2 steps."
        )
    );
    assert!(configured[1]
        .overrides
        .contains(&"ext:token-counter:system".to_owned()));
    assert!(env.failures().await.is_empty());
}

#[tokio::test]
async fn crashing_hanging_and_garbage_printing_extensions_are_isolated() {
    let env = Env::new();
    let extensions = start_all(vec![
        misbehave("crasher", "crash", "hooks = [\"before_turn\"]"),
        misbehave(
            "hanger",
            "hang",
            "hooks = [\"on_step_finish\"]\ntimeout_ms = 300\nrestart_backoff_ms = 60000",
        ),
        misbehave("babbler", "garbage", "hooks = [\"after_tool_call\"]"),
        misbehave(
            "fine",
            "echo",
            "hooks = [\"before_turn\", \"on_step_finish\"]",
        ),
    ])
    .await
    .unwrap();
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("call_1", "search", json!({"q": "mull"})))
        .step(|s| s.text("Done."))
        .build();
    let session = env.session(model, &extensions).await;
    assert_eq!(turn(&session, "u1").await, OutcomeStatus::Completed);

    let failures = env.failures().await;
    let summary: Vec<(&str, &str, bool)> = failures
        .iter()
        .map(|(hook, source, _, timed_out)| (hook.as_str(), source.as_str(), *timed_out))
        .collect();
    assert_eq!(
        summary,
        [
            ("before_turn", "crasher", false),
            ("after_tool_call", "babbler", false),
            ("on_step_finish", "hanger", true),
            // The hung process was killed; the next call finds it down (backoff) and fails fast.
            ("on_step_finish", "hanger", false),
        ]
    );
    assert!(
        failures[0].2.contains("exited during before_turn"),
        "{}",
        failures[0].2
    );
    assert!(
        failures[1].2.contains("broke the protocol"),
        "{}",
        failures[1].2
    );
    assert!(
        failures[1].2.contains("this is not json-rpc"),
        "{}",
        failures[1].2
    );
    assert_eq!(failures[2].2, "timed out after 300 ms");
    assert!(failures[3].2.contains("is down"), "{}", failures[3].2);
    // The well-behaved extension after them was called every time.
    assert_eq!(extensions[3].starts(), 1);
}

#[tokio::test]
async fn a_reply_field_that_is_misspelt_or_mistyped_is_a_hook_failure_naming_it() {
    let env = Env::new();
    let extensions = start_all(vec![
        misbehave("snake", "misspelt", "hooks = [\"before_turn\"]"),
        misbehave("stringly", "mistyped", "hooks = [\"before_turn\"]"),
    ])
    .await
    .unwrap();
    let session = env.session(answer("Hi."), &extensions).await;
    assert_eq!(turn(&session, "u1").await, OutcomeStatus::Completed);

    let failures = env.failures().await;
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert_eq!(
        (failures[0].0.as_str(), failures[0].1.as_str()),
        ("before_turn", "snake")
    );
    assert_eq!(
        failures[0].2,
        "extension \"snake\" replied to before_turn with a reply that is not a TurnConfig \
         patch: field \"active_tools\" is not a TurnConfig field (they are camelCase, e.g. \
         \"activeTools\")"
    );
    assert_eq!(
        (failures[1].0.as_str(), failures[1].1.as_str()),
        ("before_turn", "stringly")
    );
    assert!(
        failures[1].2.starts_with(
            "extension \"stringly\" replied to before_turn with a reply that is not a \
             TurnConfig patch: field \"maxSteps\": invalid type: string \"three\""
        ),
        "{}",
        failures[1].2
    );
    // Neither reply was applied, not even its well-formed fields.
    let configured = env.configured().await;
    assert_eq!(configured[0].active_tools, None);
    assert_eq!(configured[0].max_steps, 10);
    assert!(configured[0].overrides.is_empty());
}

#[tokio::test]
async fn an_ungranted_host_call_is_denied_and_a_granted_one_answers() {
    let env = Env::new();
    let extensions = start_all(vec![
        misbehave("nosy", "messages", "hooks = [\"before_turn\"]"),
        misbehave(
            "trusted",
            "messages",
            "hooks = [\"before_turn\"]\n[permissions]\nread_messages = true",
        ),
    ])
    .await
    .unwrap();
    let session = env.session(answer("Hi."), &extensions).await;
    assert_eq!(turn(&session, "u1").await, OutcomeStatus::Completed);

    let failures = env.failures().await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].1, "nosy");
    assert!(
        failures[0]
            .2
            .contains("permission denied: extension \"nosy\" was not granted read_messages"),
        "{}",
        failures[0].2
    );
    let configured = env.configured().await;
    assert_eq!(configured[0].system.as_deref(), Some("messages=1"));
    assert_eq!(configured[0].overrides, ["ext:trusted:system"]);
}

/// An agent whose session declares a writable "memory" block of at most 8 tokens.
struct MemoryAgent {
    model: ScriptedModel,
}

#[async_trait]
impl mull_engine::Agent for MemoryAgent {
    fn name(&self) -> &str {
        "memory-agent"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        session.with_context(
            "memory",
            ContextBlock::writable("What the user told us.", 8),
        )
    }
}

#[tokio::test]
async fn a_granted_extension_reads_and_writes_a_context_block_through_the_log() {
    let env = Env::new();
    let extensions = start_all(vec![misbehave(
        "scribe",
        "memory",
        "hooks = [\"before_turn\"]\n[permissions]\nread_context_blocks = [\"memory\"]\nwrite_context_blocks = [\"memory\"]",
    )])
    .await
    .unwrap();
    let options = SessionOptions::deterministic("s1").with_extensions(
        extensions
            .iter()
            .map(|e| Arc::clone(e) as Arc<dyn Extension>),
    );
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("One."))
        .step(|s| s.text("Two."))
        .build();
    let session = Session::open(&env.log, Arc::new(MemoryAgent { model }), options)
        .await
        .unwrap();
    assert_eq!(turn(&session, "u1").await, OutcomeStatus::Completed);
    assert_eq!(turn(&session, "u2").await, OutcomeStatus::Completed);

    assert_eq!(env.failures().await, vec![]);
    // The first turn saw an empty block and wrote it; the second saw that write.
    let configured = env.configured().await;
    assert_eq!(configured[0].overrides, ["ext:scribe:system"]);
    assert_eq!(configured[0].system.as_deref(), Some("memory=None"));
    assert_eq!(configured[1].system.as_deref(), Some("memory=seen:none"));
    // Each write is a context_block_updated event on its turn, recorded as the application's.
    let writes: Vec<(Option<String>, String)> = env
        .events()
        .await
        .into_iter()
        .filter_map(|e| match e.event {
            Event::ContextBlockUpdated {
                content, source, ..
            } => {
                assert_eq!(source, mull_core::ContextBlockSource::Application);
                Some((e.turn_id, content))
            }
            _ => None,
        })
        .collect();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes.iter().all(|(turn, _)| turn.is_some()));
    assert_eq!(writes[1].1, "seen:seen:none");
    assert_eq!(session.context_blocks()["memory"], "seen:seen:none");
}

#[tokio::test]
async fn a_write_over_the_blocks_budget_is_refused_and_logged() {
    let env = Env::new();
    let extensions = start_all(vec![misbehave(
        "scribe",
        "memory",
        "hooks = [\"before_turn\"]\n[permissions]\nread_context_blocks = [\"memory\"]\nwrite_context_blocks = [\"memory\"]",
    )])
    .await
    .unwrap();
    let options = SessionOptions::deterministic("s1").with_extensions(
        extensions
            .iter()
            .map(|e| Arc::clone(e) as Arc<dyn Extension>),
    );
    let session = Session::open(
        &env.log,
        Arc::new(MemoryAgent {
            model: answer("Hi."),
        }),
        options,
    )
    .await
    .unwrap();
    // 8 tokens at four characters each: a 40-character value is over budget.
    session
        .set_context_block("memory", "0123456789012345678901234567890")
        .await
        .unwrap();
    assert_eq!(turn(&session, "u1").await, OutcomeStatus::Completed);
    let failures = env.failures().await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].1, "scribe");
    assert!(failures[0].2.contains("refused"), "{}", failures[0].2);
}

#[tokio::test]
async fn a_crashed_extension_is_restarted_at_its_next_call() {
    let env = Env::new();
    let state = tempfile::tempdir().unwrap();
    let marker = state.path().join("crashed");
    let manifest = {
        let text = format!(
            "name = \"phoenix\"\ncommand = \"python3\"\nargs = [\"misbehave.py\", \"crash_once\", {:?}]\n\
             hooks = [\"before_turn\"]\nrestart_backoff_ms = 0\n",
            marker.display().to_string()
        );
        Manifest::from_toml(&text, fixtures(), "phoenix.toml").unwrap()
    };
    let extensions = start_all(vec![manifest]).await.unwrap();
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("One."))
        .step(|s| s.text("Two."))
        .build();
    let session = env.session(model, &extensions).await;
    assert_eq!(turn(&session, "u1").await, OutcomeStatus::Completed);
    assert_eq!(turn(&session, "u2").await, OutcomeStatus::Completed);

    let failures = env.failures().await;
    assert_eq!(
        failures.len(),
        1,
        "only the first turn's call failed: {failures:?}"
    );
    assert!(failures[0].2.contains("exited during before_turn"));
    assert!(
        failures[0].2.contains("crash_once: crashing now"),
        "stderr is quoted: {}",
        failures[0].2
    );
    assert_eq!(extensions[0].starts(), 2);
}

/// A host for calling a process extension directly.
struct NoHost;

impl ExtensionHost for NoHost {
    fn session_id(&self) -> &str {
        "direct"
    }
    fn messages(&self) -> Vec<UIMessage> {
        Vec::new()
    }
    fn read_context_block(&self, _name: &str) -> Result<Option<String>, HostCallError> {
        Err(HostCallError::Unsupported("no blocks here".into()))
    }
    fn write_context_block(&self, _name: &str, _text: &str) -> Result<(), HostCallError> {
        Err(HostCallError::Unsupported("no blocks here".into()))
    }
}

fn text_chunk(i: usize) -> ChunkSnapshot {
    ChunkSnapshot {
        kind: "text-delta".into(),
        text: Some(format!("t{i}")),
        tool_name: None,
        tool_call_id: None,
    }
}

fn turn_snapshot() -> TurnSnapshot {
    TurnSnapshot {
        system: String::new(),
        tool_names: Vec::new(),
        active_tools: None,
        message_count: 1,
        continuation: false,
        body: Value::Null,
        model_id: "m".into(),
    }
}

#[tokio::test]
async fn batched_on_chunk_sends_one_message_per_batch_and_flushes_the_rest() {
    let ext = ProcessExtension::start(misbehave(
        "counter",
        "count",
        "hooks = [\"on_chunk\", \"before_turn\"]\n[on_chunk]\nbatch = 4",
    ))
    .await
    .unwrap();
    assert!(ext.subscribes(ExtensionHook::OnChunk));
    for i in 0..10 {
        ext.on_chunk(&text_chunk(i), &NoHost).await.unwrap();
    }
    // 10 chunks at 4 per batch: two batches sent, two chunks held back.
    let patch = ext
        .before_turn(&turn_snapshot(), &NoHost)
        .await
        .unwrap()
        .unwrap();
    // before_turn delivers the held-back chunks first, as a third batch.
    assert_eq!(patch.system.as_deref(), Some("chunks=10 batches=3 calls=0"));
    ext.on_chunk(&text_chunk(10), &NoHost).await.unwrap();
    ext.flush_chunks(&NoHost).await.unwrap();
    let patch = ext
        .before_turn(&turn_snapshot(), &NoHost)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(patch.system.as_deref(), Some("chunks=11 batches=4 calls=0"));
    ext.shutdown().await;
}

#[tokio::test]
async fn unbatched_on_chunk_is_one_request_per_chunk() {
    let ext = ProcessExtension::start(misbehave(
        "counter",
        "count",
        "hooks = [\"on_chunk\", \"before_turn\"]",
    ))
    .await
    .unwrap();
    for i in 0..5 {
        ext.on_chunk(&text_chunk(i), &NoHost).await.unwrap();
    }
    ext.flush_chunks(&NoHost).await.unwrap();
    let patch = ext
        .before_turn(&turn_snapshot(), &NoHost)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(patch.system.as_deref(), Some("chunks=5 batches=0 calls=5"));
}

#[tokio::test]
async fn a_missing_program_fails_to_start_with_its_name() {
    let manifest = Manifest::from_toml(
        "name = \"ghost\"\ncommand = \"definitely-not-a-program-mull\"\nhooks = []\n",
        fixtures(),
        "ghost.toml",
    )
    .unwrap();
    let err = start_all(vec![manifest]).await.unwrap_err().to_string();
    assert!(
        err.contains("ghost") && err.contains("definitely-not-a-program-mull"),
        "{err}"
    );
}
