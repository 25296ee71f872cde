//! Re-execution replay of the recorded demo session: the current demo agent writes exactly the
//! recorded events, and a changed policy hook is reported at the first event it changes.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

mod support;

use async_trait::async_trait;
use mull::core::{Envelope, Event, LanguageModel};
use mull::engine::replay::{Recording, ReplayReport};
use mull::engine::{Agent, HookResult, ToolCallContext, ToolCallDecision, ToolSet};
use mull::store::{import_jsonl, Log};

fn demo_recording(dir: &Path) -> Recording {
    session_recording(dir, "sess_1")
}

/// Session `session` of the demo fixture.
fn session_recording(dir: &Path, session: &str) -> Recording {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo.jsonl");
    let db = dir.join("recorded.db");
    let log = Log::open(&db).unwrap();
    let file = BufReader::new(File::open(&fixture).unwrap());
    import_jsonl(file, "fixtures/demo.jsonl", &log).unwrap();
    log.close().unwrap();
    support::replay::recording_of(&db, session)
}

async fn replay(agent: Arc<dyn Agent>) -> (Recording, ReplayReport) {
    let dir = tempfile::tempdir().unwrap();
    let recording = demo_recording(dir.path());
    let report = support::replay::reexecute_ok(&recording, agent).await;
    (recording, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_the_demo_fixture_with_the_demo_agent_is_identical() {
    let (recording, report) = replay(mull::demo::agent()).await;
    if let Some(d) = &report.divergence {
        panic!("{d}");
    }
    assert!(report.is_identical());
    assert_eq!(report.actual.len(), recording.envelopes().len());
    assert_eq!(report.expected_events, recording.envelopes().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_research_sub_agents_session_replays_identically() {
    let dir = tempfile::tempdir().unwrap();
    let recording = session_recording(dir.path(), "sess_1.agent_1");
    assert_eq!(recording.agent(), mull::demo::RESEARCH_AGENT_NAME);
    let report = support::replay::reexecute_ok(&recording, mull::demo::research_agent()).await;
    if let Some(d) = &report.divergence {
        panic!("{d}");
    }
    assert_eq!(report.actual.len(), recording.envelopes().len());
}

/// The demo agent with one policy changed: it blocks the forecast instead of cancellations.
struct BlocksWeather {
    demo: Arc<dyn Agent>,
}

#[async_trait]
impl Agent for BlocksWeather {
    fn name(&self) -> &str {
        self.demo.name()
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        self.demo.model()
    }
    fn tools(&self) -> ToolSet {
        self.demo.tools()
    }
    fn system_prompt(&self) -> String {
        self.demo.system_prompt()
    }
    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        Ok(
            (ctx.tool_name == "weather").then(|| ToolCallDecision::Block {
                reason: Some("No forecasts today.".to_owned()),
            }),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_policy_diverges_at_its_first_decision() {
    let agent = Arc::new(BlocksWeather {
        demo: mull::demo::agent(),
    });
    let (recording, report) = replay(agent).await;
    let divergence = report.divergence.expect("the changed policy must diverge");
    let weather_decision = recording
        .envelopes()
        .iter()
        .find(|e| matches!(&e.event, Event::ToolDecided { tool, .. } if tool == "weather"))
        .unwrap();
    assert_eq!(divergence.seq, weather_decision.seq);
    assert_eq!(divergence.expected.as_ref().unwrap().kind(), "tool_decided");
    assert_eq!(divergence.actual.as_ref().unwrap().kind(), "tool_decided");
    let differences = divergence.differences();
    assert!(
        differences.contains(&r#"event.action: "allow" ≠ "block""#.to_owned()),
        "{differences:?}"
    );
    // Everything before the decision was written exactly as recorded; nothing after it counts.
    let unnumbered = |e: &Envelope| Envelope {
        seq: 0,
        ..e.clone()
    };
    let before = divergence.index;
    assert!(report.actual[..before]
        .iter()
        .map(unnumbered)
        .eq(recording.envelopes()[..before].iter().map(unnumbered)));
    let text = divergence.to_string();
    assert!(
        text.contains(&format!("seq {}", weather_decision.seq)),
        "{text}"
    );
}
