//! Compaction and context-overflow recovery end to end (CONFORMANCE F.28–F.30): the ready
//! compaction function with a model-backed summarizer, `compact_after`, the proactive guard,
//! manual compaction, and the projection showing a summary in place of the range it replaced
//! while the log keeps every original message. Traces are one line per event, as in
//! `conformance/harness.rs`, from the turn under test on.

use std::sync::Arc;

use async_trait::async_trait;
use mull::core::{
    ChatErrorClassification, CompactionReason, Envelope, Event, LanguageModel, ModelError,
    ModelErrorKind, Role, StreamPart, UIMessage, UIPart,
};
use mull::engine::{
    compact_function, model_summarizer, summarizer, Agent, ChatError, ChatErrorContext,
    ChatResponseResult, CompactOptions, FnTool, HookResult, OutcomeStatus, ProactiveGuard, Session,
    SessionConfig, ToolError, ToolSet, TurnContext, TurnOptions, SUMMARY_PREFIX,
};
use mull::providers::scripted::{ScriptedModel, ScriptedModelBuilder};
use serde_json::{json, Value};

type ConfigureFn = dyn Fn(SessionConfig) -> SessionConfig + Send + Sync;

/// An agent that records its hook calls and classifies errors with the default classifier.
struct Mem {
    model: Arc<dyn LanguageModel>,
    tools: ToolSet,
    configure: Box<ConfigureFn>,
    calls: HookCalls,
}

impl Mem {
    fn new(
        model: &ScriptedModel,
        configure: impl Fn(SessionConfig) -> SessionConfig + Send + Sync + 'static,
    ) -> Mem {
        Mem {
            model: Arc::new(model.clone()),
            tools: ToolSet::new(),
            configure: Box::new(configure),
            calls: HookCalls::default(),
        }
    }
    fn record(&self, line: String) {
        self.calls.record(line);
    }
    fn calls(&self) -> String {
        self.calls.joined()
    }
}

#[async_trait]
impl Agent for Mem {
    fn name(&self) -> &str {
        "mem"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn tools(&self) -> ToolSet {
        self.tools.clone()
    }
    fn system_prompt(&self) -> String {
        "You are terse.".into()
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        (self.configure)(session)
    }
    async fn before_turn(&self, ctx: &TurnContext) -> HookResult<Option<mull::engine::TurnConfig>> {
        self.record(format!(
            "before_turn(continuation={}, messages={})",
            ctx.continuation,
            ctx.messages.len()
        ));
        Ok(None)
    }
    async fn on_chat_response(&self, result: &ChatResponseResult) -> HookResult<()> {
        self.record(format!("on_chat_response({})", result.status.as_str()));
        Ok(())
    }
    fn on_chat_error(&self, error: ChatError, ctx: &ChatErrorContext) -> ChatError {
        self.record(format!(
            "on_chat_error({:?}, classification={:?})",
            ctx.stage, ctx.classification
        ));
        error
    }
    fn classify_chat_error(
        &self,
        error: &ChatError,
        _ctx: &ChatErrorContext,
    ) -> Option<ChatErrorClassification> {
        mull::core::default_context_overflow_classifier(error.as_error_input())
    }
}

mod support;
use support::hook_calls::HookCalls;
use support::test_log::TestLog as Env;
use support::trace;

fn new_env() -> Env {
    Env::new()
}

fn render(env: &Envelope) -> String {
    let body = match &env.event {
        Event::TurnStarted {
            request_id,
            attempt,
            continuation,
            ..
        } => format!("{request_id} attempt={attempt} continuation={continuation}"),
        Event::TurnConfigured { config } => format!(
            "messages={} tools={:?}",
            config.message_count, config.tool_names
        ),
        Event::StepStarted { step } => format!("{step}"),
        Event::StepConfigured {
            step,
            message_count,
            ..
        } => format!("{step} messages={message_count}"),
        Event::Chunk { step, part, .. } => match part {
            StreamPart::TextDelta { text, .. } => format!("{step} text-delta {text:?}"),
            StreamPart::ToolCall {
                call_id, tool_name, ..
            } => format!("{step} tool-call {call_id} {tool_name}"),
            StreamPart::ToolResult { call_id, .. } => format!("{step} tool-result {call_id}"),
            StreamPart::Error { message } => format!("{step} error {message:?}"),
            other => format!("{step} {}", other.kind()),
        },
        Event::ToolCallStarted { call_id, tool, .. } => format!("{call_id} {tool}"),
        Event::ToolDecided {
            call_id, action, ..
        } => format!("{call_id} {}", action.as_str()),
        Event::ToolCallFinished {
            call_id, success, ..
        } => format!("{call_id} success={success}"),
        Event::StepFinished { record } => format!(
            "{} {} in={:?} out={:?}",
            record.step,
            record.finish_reason.as_str(),
            record.usage.input_tokens,
            record.usage.output_tokens
        ),
        Event::AssistantMessageSaved {
            request_id,
            message,
        } => format!("{request_id} {} {:?}", message.id, message.plain_text()),
        Event::UserMessagesSaved {
            request_id,
            messages,
        } => format!(
            "{} {:?}",
            request_id.clone().unwrap_or_default(),
            messages.iter().map(|m| m.id.as_str()).collect::<Vec<_>>()
        ),
        Event::TurnFinished {
            request_id,
            status,
            error,
            steps,
            ..
        } => format!("{request_id} {} steps={steps} error={error:?}", status.as_str()),
        Event::TurnFailed {
            stage,
            classification,
            error,
            ..
        } => format!("stage={stage:?} classification={classification:?} {error:?}"),
        Event::CompactionCall {
            model_id,
            finished,
            usage,
            ..
        } => format!(
            "{model_id} finished={finished} in={:?} out={:?}",
            usage.input_tokens, usage.output_tokens
        ),
        Event::CompactionApplied {
            reason,
            attempt,
            shortened,
            replaced_ids,
            summary,
            tokens_before,
            tokens_after,
        } => format!(
            "{reason:?} attempt={attempt} shortened={shortened} replaced={replaced_ids:?} summary={:?} tokens {tokens_before}->{tokens_after}",
            summary.as_ref().map(|s| s.id.as_str())
        ),
        Event::HookFailed { hook, error, .. } => format!("{hook:?} {error:?}"),
        other => other.kind().to_owned(),
    };
    trace::line(env, &body)
}

/// A model that first answers `n` seed turns, then follows `then`.
fn model_after_history(
    n: usize,
    then: impl FnOnce(ScriptedModelBuilder) -> ScriptedModelBuilder,
) -> ScriptedModel {
    let mut builder = ScriptedModel::builder("scripted-1");
    for i in 0..n {
        builder = builder.step(move |s| {
            s.text(format!(
                "Answer {i}: the harbour master keeps the tide tables in the blue ledger."
            ))
            .usage(100, 20)
        });
    }
    then(builder).build()
}

/// Runs `n` exchanges; returns the last seq after them.
async fn seed_history(env: &Env, session: &Session, n: usize) -> u64 {
    for i in 0..n {
        let out = session
            .save_messages(
                vec![UIMessage::user(
                    format!("u{i}"),
                    format!("Question {i}: where are the tide tables kept this season?"),
                )],
                TurnOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(out.status, OutcomeStatus::Completed);
    }
    env.events().await.last().map(|e| e.seq).unwrap_or(0)
}

fn ids(messages: &[UIMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.id.as_str()).collect()
}

fn keep_one_each_side(summarize: mull::engine::Summarizer) -> CompactOptions {
    CompactOptions {
        keep_head: 1,
        keep_tail: 1,
        summarize,
    }
}

fn fixed_summary() -> mull::engine::Summarizer {
    summarizer(|_prompt| async { Ok("The tide tables are in the blue ledger.".to_owned()) })
}

// ---------------------------------------------------------------------------------------------
// F.28 reactive recovery with the ready compaction function and a model summarizer
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn f28_reactive_overflow_is_compacted_by_a_model_summary_and_the_turn_reruns() {
    let model = model_after_history(3, |b| {
        b.refuse_context_overflow()
            .step(|s| s.text("Answered after compaction.").usage(300, 5))
    });
    let summary_model = ScriptedModel::builder("summarizer-1")
        .step(|s| s.text("The user asked where the tide tables are; they are in the blue ledger."))
        .build();
    let summarize = model_summarizer(Arc::new(summary_model.clone()));
    let agent = Arc::new(Mem::new(&model, move |c| {
        c.context_overflow(true, 1)
            .on_compaction(compact_function(keep_one_each_side(summarize.clone())))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let mark = seed_history(&env, &session, 3).await;
    let out = session
        .save_messages(
            vec![UIMessage::user("u3", "And now?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);

    // The conversation: the head, the summary where the middle stood, the tail, the answer.
    let state = session.state();
    assert_eq!(ids(&state.messages), ["u0", "summary_1", "u3", "msg_5"]);
    assert_eq!(
        state.messages[1].plain_text(),
        format!(
            "{SUMMARY_PREFIX}\nThe user asked where the tide tables are; they are in the blue ledger."
        )
    );
    // The summarizer was asked about exactly the middle.
    let asked = summary_model.requests();
    assert_eq!(asked.len(), 1);
    let prompt = serde_json::to_string(&asked[0].messages).unwrap();
    assert!(prompt.contains("Answer 0") && prompt.contains("Question 2"));
    assert!(!prompt.contains("Question 0") && !prompt.contains("And now?"));
    // The retry was sent the compacted history.
    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    assert_eq!(requests[3].messages.len(), 7);
    assert_eq!(requests[4].messages.len(), 3);
    // The projection rebuilt from the log alone agrees, and the log keeps every original.
    assert_eq!(env.replayed().await.messages, state.messages);
    let originals = env
        .events()
        .await
        .iter()
        .filter(|e| matches!(&e.event, Event::UserMessagesSaved { messages, .. } if messages[0].id == "u1"))
        .count();
    assert_eq!(originals, 1);
    insta::assert_snapshot!("f28_model_summary", env.trace_after(mark, render).await);
    insta::assert_snapshot!("f28_model_summary_hooks", agent.calls());
}

#[tokio::test]
async fn f28_a_failing_summarizer_shortens_nothing_and_the_overflow_is_terminal() {
    let model = model_after_history(2, |b| b.refuse_context_overflow());
    let summary_model = ScriptedModel::builder("summarizer-1")
        .refuse(ModelError::new(
            ModelErrorKind::Transient,
            "503 summarizer unavailable",
        ))
        .build();
    let summarize = model_summarizer(Arc::new(summary_model));
    let agent = Arc::new(Mem::new(&model, move |c| {
        c.context_overflow(true, 1)
            .on_compaction(compact_function(keep_one_each_side(summarize.clone())))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let mark = seed_history(&env, &session, 2).await;
    let out = session
        .save_messages(
            vec![UIMessage::user("u2", "And now?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Error);
    assert_eq!(
        out.error.unwrap().classification,
        Some(ChatErrorClassification::ContextOverflow)
    );
    assert_eq!(session.state().messages.len(), 5, "nothing was compacted");
    assert!(!agent.calls().contains("on_chat_response(error)"));
    insta::assert_snapshot!("f28_summarizer_fails", env.trace_after(mark, render).await);
}

// ---------------------------------------------------------------------------------------------
// F.29 the proactive guard
// ---------------------------------------------------------------------------------------------

fn lookup_tool() -> Arc<dyn mull::engine::Tool> {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        q: String,
    }
    FnTool::new("lookup", "Looks a word up.", |input: Input, _call| async move {
        Ok::<Value, ToolError>(json!({"word": input.q, "hits": 3}))
    })
    .shared()
}

#[tokio::test]
async fn f29_a_step_near_the_window_compacts_once_before_the_next_step() {
    let model = model_after_history(3, |b| {
        b.step(|s| {
            s.tool_call("call_1", "lookup", json!({"q": "tide"}))
                .usage(950, 10)
        })
        .step(|s| {
            s.tool_call("call_2", "lookup", json!({"q": "ledger"}))
                .usage(960, 10)
        })
        .step(|s| s.text("Blue ledger, harbour office.").usage(400, 8))
    });
    let mut agent = Mem::new(&model, |c| {
        c.proactive(ProactiveGuard::new(1000))
            .on_compaction(compact_function(keep_one_each_side(fixed_summary())))
    });
    agent.tools = ToolSet::new().with(lookup_tool());
    let agent = Arc::new(agent);
    let env = new_env();
    let session = env.open(&agent).await;
    let mark = seed_history(&env, &session, 3).await;
    assert_eq!(ProactiveGuard::new(1000).threshold(), 900);
    let out = session
        .save_messages(
            vec![UIMessage::user("u3", "Where again?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);

    let requests = model.requests();
    let turn = &requests[3..];
    assert_eq!(turn.len(), 3);
    // Step 0: the whole history (6) and the question.
    assert_eq!(turn[0].messages.len(), 7);
    // Step 1: head, summary, question, then this turn's call and its result, together.
    let roles: Vec<_> = turn[1].messages.iter().map(|m| m.role).collect();
    use mull::core::ModelRole::{Assistant, Tool, User};
    assert_eq!(roles, [User, User, User, Assistant, Tool]);
    // Step 2: at most one proactive compaction a turn, though step 1 was near the window too.
    assert_eq!(turn[2].messages.len(), 7);
    let compactions: Vec<_> = env
        .events()
        .await
        .into_iter()
        .filter_map(|e| match e.event {
            Event::CompactionApplied { reason, .. } => Some((reason, e.turn_id)),
            _ => None,
        })
        .collect();
    assert_eq!(
        compactions,
        [(CompactionReason::Proactive, Some("turn_4".to_owned()))]
    );
    // The message the turn wrote keeps both calls with their results.
    let state = session.state();
    assert_eq!(ids(&state.messages), ["u0", "summary_1", "u3", "msg_4"]);
    let tool_parts = state.messages[3]
        .parts
        .iter()
        .filter(|p| matches!(p, UIPart::Tool(t) if t.output.is_some()))
        .count();
    assert_eq!(tool_parts, 2);
    assert_eq!(env.replayed().await.messages, state.messages);
    insta::assert_snapshot!("f29_proactive", env.trace_after(mark, render).await);
}

#[tokio::test]
async fn f29_steps_below_the_headroom_and_turns_without_a_guard_never_compact() {
    let model = model_after_history(3, |b| {
        b.step(|s| {
            s.tool_call("call_1", "lookup", json!({"q": "tide"}))
                .usage(899, 10)
        })
        .step(|s| s.text("Blue ledger.").usage(400, 8))
    });
    let mut agent = Mem::new(&model, |c| {
        c.proactive(ProactiveGuard::new(1000))
            .on_compaction(compact_function(keep_one_each_side(fixed_summary())))
    });
    agent.tools = ToolSet::new().with(lookup_tool());
    let agent = Arc::new(agent);
    let env = new_env();
    let session = env.open(&agent).await;
    seed_history(&env, &session, 3).await;
    session
        .save_messages(
            vec![UIMessage::user("u3", "Where?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    let kinds: Vec<String> = env
        .events()
        .await
        .iter()
        .map(|e| e.kind().to_owned())
        .collect();
    assert!(!kinds.iter().any(|k| k == "compaction_applied"));
    assert_eq!(session.state().messages.len(), 8);
}

// ---------------------------------------------------------------------------------------------
// F.30 a provider's overflow body, classified through the engine
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn f30_an_openai_style_overflow_body_triggers_recovery() {
    let mut refusal = ModelError::new(ModelErrorKind::InvalidRequest, "HTTP 400 Bad Request");
    refusal.status = Some(400);
    refusal.body = Some(
        r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#
            .to_owned(),
    );
    let model = model_after_history(3, |b| {
        b.refuse(refusal)
            .step(|s| s.text("Recovered.").usage(200, 3))
    });
    let agent = Arc::new(Mem::new(&model, |c| {
        c.context_overflow(true, 1)
            .on_compaction(compact_function(keep_one_each_side(fixed_summary())))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    seed_history(&env, &session, 3).await;
    let out = session
        .save_messages(
            vec![UIMessage::user("u3", "Again?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(out.message.unwrap().plain_text(), "Recovered.");
    // A rate limit is not an overflow: no compaction, the turn just fails.
    let model = model_after_history(0, |b| {
        b.refuse(ModelError::new(
            ModelErrorKind::InvalidRequest,
            "429 rate limit exceeded",
        ))
    });
    let agent = Arc::new(Mem::new(&model, |c| {
        c.context_overflow(true, 1)
            .on_compaction(compact_function(keep_one_each_side(fixed_summary())))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(vec![UIMessage::user("u0", "Hi")], TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.error.unwrap().classification, None);
    assert!(!env
        .events()
        .await
        .iter()
        .any(|e| e.kind() == "compaction_applied"));
}

// ---------------------------------------------------------------------------------------------
// compact_after, manual compaction and the projection
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn compact_after_compacts_before_a_turn_once_the_history_is_over_the_limit() {
    let model = model_after_history(3, |b| b.step(|s| s.text("Short now.").usage(50, 3)));
    // Each exchange is about 32 tokens by the default estimate.
    let agent = Arc::new(Mem::new(&model, |c| {
        c.compact_after(90)
            .on_compaction(compact_function(keep_one_each_side(fixed_summary())))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let mark = seed_history(&env, &session, 3).await;
    // The seed turns stayed under the limit: nothing was compacted on the way.
    assert_eq!(session.state().messages.len(), 6);
    session
        .save_messages(
            vec![UIMessage::user("u3", "Still there?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        ids(&session.state().messages),
        ["u0", "summary_1", "u3", "msg_4"]
    );
    insta::assert_snapshot!("compact_after", env.trace_after(mark, render).await);
}

#[tokio::test]
async fn the_projection_shows_the_summary_in_place_of_the_range_and_the_log_keeps_it_all() {
    let model = model_after_history(4, |b| b);
    let agent = Arc::new(Mem::new(&model, |c| {
        c.on_compaction(compact_function(CompactOptions {
            keep_head: 2,
            keep_tail: 2,
            summarize: fixed_summary(),
        }))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let mark = seed_history(&env, &session, 4).await;
    let before = session.state().messages;
    assert_eq!(
        ids(&before),
        ["u0", "msg_1", "u1", "msg_2", "u2", "msg_3", "u3", "msg_4"]
    );
    assert!(session.compact().await.unwrap());
    let after = session.state().messages;
    assert_eq!(ids(&after), ["u0", "msg_1", "summary_1", "u3", "msg_4"]);
    assert_eq!(after[2].role, Role::User);
    assert_eq!(
        after[2].metadata,
        Some(json!({"compaction": {"replaced": 4}}))
    );
    // The same fold from the log alone.
    assert_eq!(env.replayed().await.messages, after);
    // Every replaced message is still in the log, word for word.
    let events = env.events().await;
    for replaced in &before[2..6] {
        assert!(
            events.iter().any(|e| match &e.event {
                Event::UserMessagesSaved { messages, .. } => messages.contains(replaced),
                Event::AssistantMessageSaved { message, .. } => message == replaced,
                _ => false,
            }),
            "{} is in the log",
            replaced.id
        );
    }
    // Too short to compact again with this head and tail: recorded, nothing replaced.
    assert!(!session.compact().await.unwrap());
    insta::assert_snapshot!("manual_compaction", env.trace_after(mark, render).await);
}

// ---------------------------------------------------------------------------------------------
// Compaction is priced: the summarizer's calls are events the cost ledger reads
// ---------------------------------------------------------------------------------------------

/// The cost ledger of the env's session, priced with `summarizer-1` at $1 / $2 per million.
async fn priced(env: &Env) -> (mull::store::CostTotals, Vec<Event>) {
    let events = env.events().await;
    let mut ledger = mull::store::CostLedger::new();
    for e in &events {
        ledger.apply(e);
    }
    let mut prices = mull::core::PriceTable::new();
    prices.set(
        "summarizer-1",
        mull::core::ModelPrice {
            input: 1.0,
            output: 2.0,
            cache_read: None,
            cache_write: None,
        },
    );
    (
        ledger.totals(&prices),
        events.into_iter().map(|e| e.event).collect(),
    )
}

#[tokio::test]
async fn a_model_summary_is_a_priced_call_in_the_ledger() {
    let model = model_after_history(3, |b| {
        b.refuse_context_overflow()
            .step(|s| s.text("Answered after compaction.").usage(300, 5))
    });
    let summary_model = ScriptedModel::builder("summarizer-1")
        .step(|s| {
            s.text("They asked about the tide tables.")
                .usage(400_000, 50_000)
        })
        .build();
    let summarize = model_summarizer(Arc::new(summary_model));
    let agent = Arc::new(Mem::new(&model, move |c| {
        c.context_overflow(true, 1)
            .on_compaction(compact_function(keep_one_each_side(summarize.clone())))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    seed_history(&env, &session, 3).await;
    let out = session
        .save_messages(
            vec![UIMessage::user("u3", "And now?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let (totals, events) = priced(&env).await;
    let call = events
        .iter()
        .position(|e| {
            matches!(e, Event::CompactionCall { model_id, finished: true, usage, .. }
            if model_id == "summarizer-1" && usage.input_tokens == Some(400_000))
        })
        .expect("the summarizer's call and its usage are an event");
    let applied = events
        .iter()
        .position(|e| {
            matches!(
                e,
                Event::CompactionApplied {
                    shortened: true,
                    ..
                }
            )
        })
        .expect("the compaction");
    assert!(
        call < applied,
        "the call is recorded before the compaction it wrote"
    );
    // 0.4 M input at $1 + 0.05 M output at $2 = $0.50, known: not an "unknown summary".
    assert_eq!(totals.compaction.priced_calls, 1);
    assert_eq!(totals.compaction.unknown_calls, 0);
    assert!((totals.compaction.dollars - 0.5).abs() < 1e-9, "{totals:?}");
    assert_eq!(totals.compaction_summaries, 0);
    assert!(totals.total.dollars >= 0.5);
    assert!(totals.tokens.output >= 50_000);
}

#[tokio::test]
async fn a_summarizer_call_that_failed_before_usage_is_of_unknown_cost() {
    let model = model_after_history(2, |b| b.refuse_context_overflow());
    let summary_model = ScriptedModel::builder("summarizer-1")
        .refuse(ModelError::new(
            ModelErrorKind::Transient,
            "503 summarizer unavailable",
        ))
        .build();
    let summarize = model_summarizer(Arc::new(summary_model));
    let agent = Arc::new(Mem::new(&model, move |c| {
        c.context_overflow(true, 1)
            .on_compaction(compact_function(keep_one_each_side(summarize.clone())))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    seed_history(&env, &session, 2).await;
    session
        .save_messages(
            vec![UIMessage::user("u2", "And now?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    let (totals, events) = priced(&env).await;
    assert!(events.iter().any(|e| matches!(
        e,
        Event::CompactionCall {
            finished: false,
            ..
        }
    )));
    assert_eq!(totals.compaction.priced_calls, 0);
    assert_eq!(totals.compaction.unknown_calls, 1, "unknown, never free");
    assert_eq!(totals.compaction.show(), "unknown (1 call)");
}
