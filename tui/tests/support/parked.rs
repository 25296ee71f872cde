//! A log with a tool call waiting for a person: what the approval tests of the binary start
//! from (`mull approve`, and `mull serve` taking an answer from the log's inbox).

use std::sync::Arc;

use async_trait::async_trait;
use mull::core::{LanguageModel, UIMessage};
use mull::engine::{
    Agent, HookResult, Session, SessionOptions, ToolCallContext, ToolCallDecision, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use mull_store::{EventLog, Log};
use serde_json::json;

/// Asks before every `find_hotels` call.
pub struct Careful(pub ScriptedModel);

#[async_trait]
impl Agent for Careful {
    fn name(&self) -> &str {
        "careful"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.0.clone())
    }
    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        Ok(
            (ctx.tool_name == "find_hotels").then_some(ToolCallDecision::RequireApproval {
                reason: Some("Hotel searches cost money.".into()),
            }),
        )
    }
    fn tools(&self) -> mull::engine::ToolSet {
        mull::engine::ToolSet::new().with(
            mull::engine::FnTool::new(
                "find_hotels",
                "Finds hotels.",
                |_: serde_json::Value, _| async { Ok(json!(["Casa do Largo"])) },
            )
            .with_schema(json!({"type": "object"}))
            .shared(),
        )
    }
}

/// A log whose session `s` waits for approval `approval_1`.
pub fn parked(db: &std::path::Path) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let log = Log::open(db).expect("log");
        let session = park(&log, None).await;
        drop(session);
        log.close().expect("close");
    });
}

/// Opens session `s` on `log` and runs a turn whose `find_hotels` call waits for approval
/// `approval_1`; once approved, the model answers `then` (if given).
pub async fn park(log: &Log, then: Option<&'static str>) -> Session {
    park_on(Arc::new(log.clone()), then).await
}

/// [`park`] on any backend of the log (the PostgreSQL log's tests park on a `PgLog`).
pub async fn park_on(log: Arc<dyn EventLog>, then: Option<&'static str>) -> Session {
    let mut model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("call_1", "find_hotels", json!({"near": "Alfama"})));
    if let Some(text) = then {
        model = model.step(|s| s.text(text));
    }
    let session = Session::open_on(
        log,
        Arc::new(Careful(model.build())),
        SessionOptions::deterministic("s"),
    )
    .await
    .expect("session");
    session
        .save_messages(
            vec![UIMessage::user("u1", "Hotels near Alfama?")],
            TurnOptions::default(),
        )
        .await
        .expect("turn");
    assert_eq!(session.pending_approvals()[0].approval_id, "approval_1");
    session
}

/// Runs `mull` with `args`, with no model named by the environment.
pub fn mull(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(args)
        .env_remove("MULL_MODEL")
        .output()
        .expect("runs mull")
}

/// Denies `approval_1` of session `s` in the log at `target` (a path or a URL) from the
/// terminal, "Not today.", the continuation run by the demo's scripted agent, and checks the
/// run reports the continuation. Hands back the arguments, for a second try.
pub fn deny_from_terminal(target: &str) -> [&str; 10] {
    let args = [
        "approve",
        target,
        "--session",
        "s",
        "approval_1",
        "--deny",
        "--reason",
        "Not today.",
        "--model",
        "scripted-demo",
    ];
    let out = mull(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("denied approval_1 · continuation"),
        "{stdout}"
    );
    args
}
