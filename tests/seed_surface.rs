//! The seed's surface beyond the hooks: `configure_session`'s skills (listed in the system
//! prompt, loaded through the `load_skill` tool) and the workspace layer of the tool merge
//! (workspace → agent → session → MCP → client → caller, later layers winning on a name).

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use mull::core::{Event, LanguageModel, UIMessage};
use mull::engine::{
    Agent, FnTool, OutcomeStatus, SessionConfig, Skill, ToolError, ToolSet, TurnOptions, Workspace,
    LOAD_SKILL_TOOL,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::{json, Value};
use support::test_log::TestLog;

struct Clerk {
    model: Arc<dyn LanguageModel>,
    workspace: Option<Workspace>,
    skills: Vec<Skill>,
    /// An agent tool named like a workspace tool, to show which layer wins.
    own_list_files: bool,
}

#[async_trait]
impl Agent for Clerk {
    fn name(&self) -> &str {
        "clerk"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn system_prompt(&self) -> String {
        "You keep records.".into()
    }
    fn workspace(&self) -> Option<Workspace> {
        self.workspace.clone()
    }
    fn tools(&self) -> ToolSet {
        if !self.own_list_files {
            return ToolSet::new();
        }
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Input {}
        ToolSet::new().with(
            FnTool::new(
                "list_files",
                "The agent's own listing.",
                |_: Input, _| async { Ok::<Value, ToolError>(json!({"entries": ["agent's"]})) },
            )
            .shared(),
        )
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        self.skills
            .iter()
            .cloned()
            .fold(session, |s, skill| s.with_skill(skill))
    }
}

/// The tool results of the log, in order, as (call id, output or error).
fn results(events: &[Event]) -> Vec<(String, Result<Value, String>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallFinished {
                call_id,
                success,
                output,
                error,
                ..
            } => Some((
                call_id.clone(),
                if *success {
                    Ok(output.clone().unwrap_or(Value::Null))
                } else {
                    Err(error.clone().unwrap_or_default())
                },
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_are_listed_in_the_prompt_and_loaded_by_a_tool_call() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("call_1", LOAD_SKILL_TOOL, json!({"name": "refunds"})))
        .step(|s| s.text("Refund started."))
        .build();
    let agent = Arc::new(Clerk {
        model: Arc::new(model.clone()),
        workspace: None,
        skills: vec![
            Skill::new(
                "refunds",
                "Handling a refund request.",
                "1. Find the order. 2. Refund to the original card.",
            ),
            Skill::new("tone", "Writing to an upset guest.", "Be brief and kind."),
        ],
        own_list_files: false,
    });
    let log = TestLog::for_session("sess_skills");
    let session = log.open(&agent).await;
    let out = session
        .save_messages(
            vec![UIMessage::user("u1", "refund me")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let request = &model.requests()[0];
    let system = request.system.clone().unwrap_or_default();
    assert!(system.starts_with("You keep records."), "{system}");
    assert!(
        system.contains("- refunds: Handling a refund request."),
        "{system}"
    );
    assert!(
        system.contains("- tone: Writing to an upset guest."),
        "{system}"
    );
    assert!(request.tools.iter().any(|t| t.name == LOAD_SKILL_TOOL));
    let events = log.bare_events().await;
    assert_eq!(
        results(&events),
        [(
            "call_1".to_owned(),
            Ok(json!({
                "name": "refunds",
                "instructions": "1. Find the order. 2. Refund to the original card."
            }))
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspace_is_the_first_layer_of_the_merge_and_stays_inside_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.tool_call(
                "call_1",
                "write_file",
                json!({"path": "notes/guest.txt", "content": "Room 12, late checkout."}),
            )
        })
        .step(|s| s.tool_call("call_2", "read_file", json!({"path": "notes/guest.txt"})))
        .step(|s| s.tool_call("call_3", "read_file", json!({"path": "../outside.txt"})))
        .step(|s| s.tool_call("call_4", "list_files", json!({})))
        .step(|s| s.text("Noted."))
        .build();
    let agent = Arc::new(Clerk {
        model: Arc::new(model.clone()),
        workspace: Some(Workspace::new(dir.path().join("ws"))),
        skills: Vec::new(),
        own_list_files: true,
    });
    let log = TestLog::for_session("sess_ws");
    let session = log.open(&agent).await;
    let out = session
        .save_messages(
            vec![UIMessage::user("u1", "note it")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ws/notes/guest.txt")).unwrap(),
        "Room 12, late checkout."
    );
    let events = log.bare_events().await;
    let results = results(&events);
    assert_eq!(results[0].1, Ok(json!({"written": 23})));
    assert_eq!(
        results[1].1,
        Ok(json!({"content": "Room 12, late checkout."}))
    );
    let escape = results[2]
        .1
        .clone()
        .expect_err("leaving the root is refused");
    assert!(escape.contains("not inside the workspace"), "{escape}");
    // The agent's own `list_files` (a later layer) won over the workspace's.
    assert_eq!(results[3].1, Ok(json!({"entries": ["agent's"]})));
    let tools = events.iter().find_map(|e| match e {
        Event::TurnConfigured { config } => Some(config.tool_names.clone()),
        _ => None,
    });
    let tools = tools.expect("turn_configured");
    for name in ["read_file", "write_file", "list_files"] {
        assert!(tools.iter().any(|t| t == name), "{tools:?}");
    }
}
