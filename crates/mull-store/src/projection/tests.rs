use super::draft::new_tool_part;
use super::*;
use chrono::DateTime;
use mull_core::{
    CompactionReason, DecisionAction, EntryPath, Envelope, ErrorStage, Event, FinishReason, Role,
    Source, StepReport, StreamPart, SubmissionStatus, ToolPart, ToolPartState, TurnConfigRecord,
    TurnStatus, UIMessage, UIPart, Usage,
};
use serde_json::json;

struct Feed {
    state: SessionState,
    seq: u64,
}

impl Feed {
    fn new() -> Feed {
        Feed {
            state: SessionState::new("sess_1"),
            seq: 0,
        }
    }

    fn turn(&mut self, event: Event) -> &mut Feed {
        self.at(Some("turn_1"), event)
    }

    fn at(&mut self, turn: Option<&str>, event: Event) -> &mut Feed {
        self.seq += 1;
        self.state.apply(&Envelope {
            seq: self.seq,
            session_id: "sess_1".into(),
            turn_id: turn.map(str::to_owned),
            at: DateTime::from_timestamp_micros(1_735_689_600_000_000 + self.seq as i64 * 1000)
                .expect("valid"),
            v: 1,
            event,
        });
        self
    }

    fn chunk(&mut self, part: StreamPart) -> &mut Feed {
        self.turn(Event::Chunk {
            step: 0,
            part,
            original: None,
        })
    }

    fn started(&mut self) -> &mut Feed {
        self.turn(Event::TurnStarted {
            request_id: "req_1".into(),
            message_id: "msg_2".into(),
            entry: EntryPath::SaveMessages,
            continuation: false,
            attempt: 0,
            body: json!({}),
        })
    }

    fn draft_parts(&self) -> &[UIPart] {
        &self.state.draft.as_ref().expect("a draft").parts
    }
}

fn tool_part(parts: &[UIPart], call_id: &str) -> ToolPart {
    parts
        .iter()
        .find_map(|p| match p {
            UIPart::Tool(t) if t.call_id == call_id => Some(t.clone()),
            _ => None,
        })
        .expect("tool part")
}

fn saved_with_tool(call_id: &str, state: ToolPartState) -> Event {
    Event::AssistantMessageSaved {
        request_id: "req_1".into(),
        message: UIMessage {
            id: "msg_2".into(),
            role: Role::Assistant,
            metadata: None,
            parts: vec![UIPart::Tool(new_tool_part(
                call_id,
                "confirm",
                state,
                json!({"q": 1}),
            ))],
        },
    }
}

#[test]
fn user_messages_are_upserted_by_id() {
    let mut feed = Feed::new();
    feed.at(
        None,
        Event::UserMessagesSaved {
            request_id: None,
            messages: vec![
                UIMessage::user("msg_1", "hi"),
                UIMessage::user("msg_9", "b"),
            ],
        },
    );
    feed.at(
        None,
        Event::UserMessagesSaved {
            request_id: None,
            messages: vec![
                UIMessage::user("msg_1", "edited"),
                UIMessage::user("msg_3", "c"),
            ],
        },
    );
    let ids: Vec<_> = feed.state.messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["msg_1", "msg_9", "msg_3"]);
    assert_eq!(feed.state.messages[0].plain_text(), "edited");
}

#[test]
fn turn_started_opens_a_running_turn_and_an_empty_draft() {
    let mut feed = Feed::new();
    feed.started();
    let turn = &feed.state.turns[0];
    assert_eq!(turn.status, TurnStatus::Running);
    assert_eq!(turn.request_id, "req_1");
    assert_eq!(turn.entry, EntryPath::SaveMessages);
    assert_eq!(turn.turn_id.as_deref(), Some("turn_1"));
    let draft = feed.state.draft.as_ref().expect("draft");
    assert_eq!((draft.id.as_str(), draft.role), ("msg_2", Role::Assistant));
    assert!(draft.parts.is_empty());
}

#[test]
fn step_started_marks_a_step_in_the_draft() {
    let mut feed = Feed::new();
    feed.started().turn(Event::StepStarted { step: 0 });
    assert_eq!(feed.draft_parts(), [UIPart::StepStart]);
}

#[test]
fn text_and_reasoning_blocks_stream_into_their_own_parts() {
    let mut feed = Feed::new();
    feed.started()
        .chunk(StreamPart::ReasoningStart { id: "r0".into() })
        .chunk(StreamPart::TextStart { id: "t0".into() })
        .chunk(StreamPart::ReasoningDelta {
            id: "r0".into(),
            text: "think".into(),
        })
        .chunk(StreamPart::TextDelta {
            id: "t0".into(),
            text: "Hel".into(),
        })
        .chunk(StreamPart::TextDelta {
            id: "t0".into(),
            text: "lo".into(),
        })
        .chunk(StreamPart::ReasoningEnd { id: "r0".into() });
    assert_eq!(
        feed.draft_parts(),
        [
            UIPart::Reasoning {
                text: "think".into(),
                streaming: false
            },
            UIPart::Text {
                text: "Hello".into(),
                streaming: true
            },
        ]
    );
    feed.chunk(StreamPart::TextEnd { id: "t0".into() });
    assert_eq!(
        feed.draft_parts()[1],
        UIPart::Text {
            text: "Hello".into(),
            streaming: false
        }
    );
}

#[test]
fn sources_and_files_become_their_parts() {
    let mut feed = Feed::new();
    feed.started()
        .chunk(StreamPart::Source {
            source: Source::Url {
                id: "s1".into(),
                url: "https://example.com".into(),
                title: Some("Example".into()),
            },
        })
        .chunk(StreamPart::Source {
            source: Source::Document {
                id: "s2".into(),
                media_type: "application/pdf".into(),
                title: "Spec".into(),
                filename: None,
            },
        })
        .chunk(StreamPart::File {
            media_type: "image/png".into(),
            data: "data:image/png;base64,AAAA".into(),
        });
    let parts = feed.draft_parts();
    assert!(matches!(&parts[0], UIPart::SourceUrl { source_id, .. } if source_id == "s1"));
    assert!(matches!(&parts[1], UIPart::SourceDocument { title, .. } if title == "Spec"));
    assert!(matches!(&parts[2], UIPart::File { media_type, .. } if media_type == "image/png"));
}

#[test]
fn tool_input_streams_as_text_and_the_call_parses_it() {
    let mut feed = Feed::new();
    feed.started()
        .chunk(StreamPart::ToolInputStart {
            call_id: "call_1".into(),
            tool_name: "search".into(),
        })
        .chunk(StreamPart::ToolInputDelta {
            call_id: "call_1".into(),
            delta: "{\"q\":".into(),
        })
        .chunk(StreamPart::ToolInputDelta {
            call_id: "call_1".into(),
            delta: "\"rust\"}".into(),
        });
    let part = tool_part(feed.draft_parts(), "call_1");
    assert_eq!(part.state, ToolPartState::InputStreaming);
    assert_eq!(part.input, json!("{\"q\":\"rust\"}"));
    feed.chunk(StreamPart::ToolInputEnd {
        call_id: "call_1".into(),
    })
    .chunk(StreamPart::ToolCall {
        call_id: "call_1".into(),
        tool_name: "search".into(),
        input: "{\"q\":\"rust\"}".into(),
    });
    let part = tool_part(feed.draft_parts(), "call_1");
    assert_eq!(part.state, ToolPartState::InputAvailable);
    assert_eq!(part.input, json!({"q": "rust"}));
}

#[test]
fn a_tool_call_without_a_start_creates_its_part_and_keeps_invalid_json_as_text() {
    let mut feed = Feed::new();
    feed.started().chunk(StreamPart::ToolCall {
        call_id: "call_2".into(),
        tool_name: "search".into(),
        input: "{not json".into(),
    });
    let part = tool_part(feed.draft_parts(), "call_2");
    assert_eq!(part.state, ToolPartState::InputAvailable);
    assert_eq!(part.input, json!("{not json"));
}

#[test]
fn tool_results_and_errors_set_the_output_state() {
    let mut feed = Feed::new();
    feed.started()
        .chunk(StreamPart::ToolCall {
            call_id: "call_1".into(),
            tool_name: "count".into(),
            input: "{}".into(),
        })
        .chunk(StreamPart::ToolResult {
            call_id: "call_1".into(),
            tool_name: "count".into(),
            output: json!(1),
            preliminary: true,
        });
    let part = tool_part(feed.draft_parts(), "call_1");
    assert_eq!(
        (part.state, part.output.clone(), part.preliminary),
        (ToolPartState::OutputAvailable, Some(json!(1)), true)
    );
    feed.chunk(StreamPart::ToolResult {
        call_id: "call_1".into(),
        tool_name: "count".into(),
        output: json!(2),
        preliminary: false,
    });
    let part = tool_part(feed.draft_parts(), "call_1");
    assert_eq!((part.output, part.preliminary), (Some(json!(2)), false));
    feed.chunk(StreamPart::ToolCall {
        call_id: "call_2".into(),
        tool_name: "fail".into(),
        input: "{}".into(),
    })
    .chunk(StreamPart::ToolError {
        call_id: "call_2".into(),
        tool_name: "fail".into(),
        error: "boom".into(),
    });
    let part = tool_part(feed.draft_parts(), "call_2");
    assert_eq!(part.state, ToolPartState::OutputError);
    assert_eq!(part.error_text.as_deref(), Some("boom"));
}

#[test]
fn error_raw_and_finish_chunks_change_no_message() {
    let mut feed = Feed::new();
    feed.started().turn(Event::StepStarted { step: 0 });
    let before = feed.state.draft.clone();
    feed.chunk(StreamPart::Raw {
        value: json!({"x": 1}),
    })
    .chunk(StreamPart::Error {
        message: "overloaded".into(),
    })
    .chunk(StreamPart::Finish {
        finish_reason: FinishReason::Stop,
        raw_finish_reason: None,
        usage: Usage::default(),
        provider_metadata: None,
    });
    assert_eq!(feed.state.draft, before);
    assert!(feed.state.messages.is_empty());
}

#[test]
fn the_saved_assistant_message_is_authoritative_and_ends_the_draft() {
    let mut feed = Feed::new();
    feed.started()
        .chunk(StreamPart::TextStart { id: "t0".into() });
    feed.turn(Event::AssistantMessageSaved {
        request_id: "req_1".into(),
        message: UIMessage::text("msg_2", Role::Assistant, "final"),
    });
    assert!(feed.state.draft.is_none());
    assert_eq!(feed.state.messages.len(), 1);
    assert_eq!(feed.state.messages[0].plain_text(), "final");
    feed.turn(Event::AssistantMessageSaved {
        request_id: "req_1".into(),
        message: UIMessage::text("msg_2", Role::Assistant, "replaced"),
    });
    assert_eq!(feed.state.messages.len(), 1, "upserted, not duplicated");
    assert_eq!(feed.state.messages[0].plain_text(), "replaced");
}

#[test]
fn turn_finished_sets_status_steps_usage_and_duration() {
    let mut feed = Feed::new();
    feed.started()
        .chunk(StreamPart::TextStart { id: "t0".into() });
    let usage = Usage {
        input_tokens: Some(10),
        output_tokens: Some(5),
        ..Usage::default()
    };
    feed.turn(Event::TurnFinished {
        request_id: "req_1".into(),
        status: TurnStatus::Aborted,
        error: Some("cancelled".into()),
        steps: 2,
        usage: usage.clone(),
        response_owed: false,
    });
    let turn = &feed.state.turns[0];
    assert_eq!(turn.status, TurnStatus::Aborted);
    assert_eq!(turn.error.as_deref(), Some("cancelled"));
    assert_eq!((turn.steps, turn.usage.clone()), (2, usage));
    assert_eq!(turn.duration_ms, Some(2), "1 ms per event in this feed");
    assert!(feed.state.draft.is_none());
}

#[test]
fn step_finished_adds_usage_to_the_turn_and_the_session() {
    let mut feed = Feed::new();
    let record = |input, cached| StepReport {
        usage: Usage {
            input_tokens: Some(input),
            output_tokens: Some(3),
            cached_input_tokens: Some(cached),
            ..Usage::default()
        },
        ..StepReport::default()
    };
    feed.started()
        .turn(Event::StepFinished {
            record: Box::new(record(100, 40)),
        })
        .turn(Event::StepFinished {
            record: Box::new(record(200, 90)),
        });
    let turn = &feed.state.turns[0];
    assert_eq!(turn.steps, 2);
    assert_eq!(turn.usage.input_tokens, Some(300));
    assert_eq!(feed.state.usage.cached_input_tokens, Some(130));
    assert_eq!(feed.state.usage.output_tokens, Some(6));
}

#[test]
fn turn_configured_and_turn_failed_fill_in_the_turn() {
    let mut feed = Feed::new();
    feed.started()
        .turn(Event::TurnConfigured {
            config: Box::new(TurnConfigRecord {
                model_id: "gpt-test".into(),
                ..TurnConfigRecord::default()
            }),
        })
        .turn(Event::TurnFailed {
            request_id: Some("req_1".into()),
            stage: ErrorStage::Stream,
            messages_persisted: true,
            classification: None,
            error: "upstream 500".into(),
            model_error: None,
        });
    let turn = &feed.state.turns[0];
    assert_eq!(turn.model_id.as_deref(), Some("gpt-test"));
    assert_eq!(turn.error.as_deref(), Some("upstream 500"));
    assert_eq!(turn.error_stage, Some(ErrorStage::Stream));
}

#[test]
fn tool_decisions_and_outcomes_are_counted_per_turn() {
    let mut feed = Feed::new();
    feed.started();
    for action in [
        DecisionAction::Allow,
        DecisionAction::Allow,
        DecisionAction::Rewrite,
        DecisionAction::Block,
        DecisionAction::Substitute,
        DecisionAction::Invalid,
    ] {
        feed.turn(Event::ToolDecided {
            step: 0,
            call_id: "c".into(),
            tool: "t".into(),
            action,
            model_input: json!({}),
            effective_input: json!({}),
            reason: None,
            output: None,
        });
    }
    for (success, duration_ms) in [(true, 30), (false, 120), (true, 0)] {
        feed.turn(Event::ToolCallFinished {
            step: 0,
            call_id: "c".into(),
            tool: "t".into(),
            success,
            output: None,
            error: None,
            duration_ms,
        });
    }
    let stats = &feed.state.turns[0].tools;
    assert_eq!(
        (
            stats.allowed,
            stats.rewritten,
            stats.blocked,
            stats.substituted,
            stats.invalid
        ),
        (2, 1, 1, 1, 1)
    );
    assert_eq!((stats.calls, stats.failures), (3, 1));
    assert_eq!((stats.total_duration_ms, stats.max_duration_ms), (150, 120));
}

#[test]
fn client_calls_wait_until_the_client_answers() {
    let mut feed = Feed::new();
    feed.started()
        .turn(Event::ToolCallStarted {
            step: 0,
            call_id: "call_1".into(),
            tool: "confirm".into(),
            input: json!({"q": 1}),
            client: true,
            dynamic: false,
        })
        .turn(Event::ToolCallStarted {
            step: 0,
            call_id: "call_2".into(),
            tool: "search".into(),
            input: json!({}),
            client: false,
            dynamic: false,
        })
        .turn(saved_with_tool("call_1", ToolPartState::InputAvailable));
    assert_eq!(feed.state.pending_client_calls.len(), 1);
    assert_eq!(feed.state.pending_client_calls[0].call_id, "call_1");
    feed.at(
        None,
        Event::ClientToolResult {
            call_id: "call_1".into(),
            tool: "confirm".into(),
            state: ToolPartState::OutputAvailable,
            output: Some(json!("yes")),
            error: None,
        },
    );
    assert!(feed.state.pending_client_calls.is_empty());
    let part = tool_part(&feed.state.messages[0].parts, "call_1");
    assert_eq!(part.state, ToolPartState::OutputAvailable);
    assert_eq!(part.output, Some(json!("yes")));
}

#[test]
fn a_repaired_call_becomes_an_error_and_stops_waiting() {
    let mut feed = Feed::new();
    feed.started()
        .turn(Event::ToolCallStarted {
            step: 0,
            call_id: "call_1".into(),
            tool: "confirm".into(),
            input: json!({}),
            client: true,
            dynamic: false,
        })
        .turn(saved_with_tool("call_1", ToolPartState::InputAvailable));
    feed.at(
        None,
        Event::ToolCallRepaired {
            message_id: "msg_2".into(),
            call_id: "call_1".into(),
            tool: "confirm".into(),
            error_text: "The tool call was interrupted before a result was recorded.".into(),
        },
    );
    assert!(feed.state.pending_client_calls.is_empty());
    let part = tool_part(&feed.state.messages[0].parts, "call_1");
    assert_eq!(part.state, ToolPartState::OutputError);
    assert!(part.error_text.expect("text").contains("interrupted"));
}

#[test]
fn compaction_replaces_messages_with_the_summary_where_the_first_stood() {
    let mut feed = Feed::new();
    feed.at(
        None,
        Event::UserMessagesSaved {
            request_id: None,
            messages: ["m1", "m2", "m3", "m4"]
                .iter()
                .map(|id| UIMessage::user(*id, *id))
                .collect(),
        },
    );
    let compact = |ids: &[&str], summary: Option<UIMessage>| Event::CompactionApplied {
        reason: CompactionReason::Manual,
        attempt: 0,
        shortened: true,
        replaced_ids: ids.iter().map(|s| s.to_string()).collect(),
        summary,
        tokens_before: 100,
        tokens_after: 10,
    };
    feed.at(
        None,
        compact(
            &["m3", "m2"],
            Some(UIMessage::text("sum", Role::System, "s")),
        ),
    );
    let ids: Vec<_> = feed.state.messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["m1", "sum", "m4"]);
    feed.at(None, compact(&["m1"], None));
    let ids: Vec<_> = feed.state.messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["sum", "m4"]);
}

#[test]
fn context_block_updates_keep_the_latest_value_of_each_block() {
    let mut feed = Feed::new();
    let update = |block: &str, content: &str| Event::ContextBlockUpdated {
        block: block.into(),
        content: content.into(),
        source: mull_core::ContextBlockSource::Model,
        call_id: None,
    };
    feed.at(None, update("memory", "Likes tea."));
    feed.at(None, update("soul", "Be kind."));
    feed.at(None, update("memory", "Likes coffee now."));
    let blocks: Vec<_> = feed
        .state
        .context_blocks
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        blocks,
        [("memory", "Likes coffee now."), ("soul", "Be kind.")]
    );
}

#[test]
fn submissions_move_from_accepted_to_applied_to_finished() {
    let mut feed = Feed::new();
    feed.at(
        None,
        Event::SubmissionAccepted {
            submission_id: "sub_1".into(),
            idempotency_key: Some("k".into()),
            messages: vec![UIMessage::user("msg_1", "hi")],
            body: json!({}),
        },
    );
    assert_eq!(feed.state.submissions[0].phase, SubmissionPhase::Accepted);
    assert_eq!(feed.state.submissions[0].messages.len(), 1);
    feed.at(
        None,
        Event::SubmissionApplied {
            submission_id: "sub_1".into(),
            request_id: "req_1".into(),
        },
    );
    assert_eq!(feed.state.submissions[0].phase, SubmissionPhase::Applied);
    assert_eq!(
        feed.state.submissions[0].request_id.as_deref(),
        Some("req_1")
    );
    feed.at(
        None,
        Event::SubmissionFinished {
            submission_id: "sub_1".into(),
            request_id: Some("req_1".into()),
            status: SubmissionStatus::Completed,
            error: None,
        },
    );
    let sub = &feed.state.submissions[0];
    assert_eq!(
        (sub.phase, sub.status),
        (SubmissionPhase::Finished, Some(SubmissionStatus::Completed))
    );
}

#[test]
fn unknown_events_are_counted_and_change_nothing_else() {
    let mut feed = Feed::new();
    feed.started();
    let before = feed.state.clone();
    let unknown = Event::decode(1, r#"{"type":"from_the_future","x":1}"#).expect("decodes");
    feed.turn(unknown);
    assert_eq!(feed.state.unknown_events, 1);
    assert_eq!(feed.state.last_seq, 2);
    assert_eq!(feed.state.turns, before.turns);
    assert_eq!(feed.state.draft, before.draft);
}

#[test]
fn events_of_other_sessions_are_ignored() {
    let mut state = SessionState::new("sess_1");
    state.apply(&Envelope {
        seq: 7,
        session_id: "sess_2".into(),
        turn_id: None,
        at: DateTime::from_timestamp_micros(0).expect("valid"),
        v: 1,
        event: Event::UserMessagesSaved {
            request_id: None,
            messages: vec![UIMessage::user("m", "x")],
        },
    });
    assert_eq!(state, SessionState::new("sess_1"));
}

#[test]
fn retracted_messages_leave_the_conversation_and_their_calls_are_no_longer_awaited() {
    let mut feed = Feed::new();
    feed.at(
        None,
        Event::UserMessagesSaved {
            request_id: None,
            messages: vec![UIMessage::user("msg_1", "hi")],
        },
    );
    feed.started().turn(Event::ToolCallStarted {
        step: 0,
        call_id: "call_1".into(),
        tool: "confirm".into(),
        input: json!({"q": 1}),
        client: true,
        dynamic: false,
    });
    feed.turn(saved_with_tool("call_1", ToolPartState::InputAvailable));
    assert_eq!(feed.state.pending_client_calls.len(), 1);
    feed.at(
        None,
        Event::MessagesRetracted {
            request_id: Some("req_2".into()),
            message_ids: vec!["msg_2".into(), "msg_unknown".into()],
        },
    );
    let ids: Vec<_> = feed.state.messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["msg_1"]);
    assert!(feed.state.pending_client_calls.is_empty());
    assert_eq!(
        feed.state.turns.len(),
        1,
        "the turn that wrote it stays in history"
    );
}

#[test]
fn a_retraction_keeps_the_other_messages_in_order_and_a_new_answer_follows() {
    let mut feed = Feed::new();
    feed.at(
        None,
        Event::UserMessagesSaved {
            request_id: None,
            messages: vec![
                UIMessage::user("u1", "a"),
                UIMessage::text("a1", Role::Assistant, "one"),
                UIMessage::user("u2", "b"),
                UIMessage::text("a2", Role::Assistant, "two"),
            ],
        },
    );
    feed.at(
        None,
        Event::MessagesRetracted {
            request_id: None,
            message_ids: vec!["u2".into(), "a2".into()],
        },
    );
    feed.at(
        None,
        Event::AssistantMessageSaved {
            request_id: "req_3".into(),
            message: UIMessage::text("a3", Role::Assistant, "three"),
        },
    );
    let ids: Vec<_> = feed.state.messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["u1", "a1", "a3"]);
}

#[test]
fn a_step_record_is_put_together_from_the_step_s_chunks_and_its_calls_facts() {
    let mut feed = Feed::new();
    let started = |call_id: &str, dynamic| Event::ToolCallStarted {
        step: 0,
        call_id: call_id.into(),
        tool: "search".into(),
        input: json!({ "q": call_id }),
        client: false,
        dynamic,
    };
    let finished = |call_id: &str, success| Event::ToolCallFinished {
        step: 0,
        call_id: call_id.into(),
        tool: "search".into(),
        success,
        output: success.then(|| json!("found")),
        error: (!success).then(|| "offline".to_owned()),
        duration_ms: 3,
    };
    let report = |step| StepReport {
        step,
        model_id: "m".into(),
        ..StepReport::default()
    };
    feed.started()
        .turn(Event::StepStarted { step: 0 })
        .chunk(StreamPart::TextStart { id: "t0".into() })
        .chunk(StreamPart::TextDelta {
            id: "t0".into(),
            text: "Look".into(),
        })
        .chunk(StreamPart::TextDelta {
            id: "t0".into(),
            text: "ing".into(),
        })
        .turn(started("c1", true))
        .turn(started("c2", false))
        // The second call finishes first: results are listed as they were recorded.
        .turn(finished("c2", true))
        .turn(finished("c1", false))
        .turn(Event::StepFinished {
            record: Box::new(report(0)),
        });
    let (first, reasoning) = feed.state.step_record("turn_1", "msg_2", report(0));
    assert_eq!(first.text, "Looking");
    assert!(reasoning.is_empty() && first.reasoning_text.is_none());
    let calls: Vec<_> = first
        .tool_calls
        .iter()
        .map(|c| (c.call_id.as_str(), c.dynamic, c.input.clone()))
        .collect();
    assert_eq!(
        calls,
        [
            ("c1", true, json!({"q": "c1"})),
            ("c2", false, json!({"q": "c2"}))
        ]
    );
    let results: Vec<_> = first
        .tool_results
        .iter()
        .map(|r| (r.call_id.as_str(), r.success, r.input.clone()))
        .collect();
    assert_eq!(
        results,
        [
            ("c2", true, json!({"q": "c2"})),
            ("c1", false, json!({"q": "c1"}))
        ]
    );

    // The next step's record holds only what came after its start; interleaved reasoning
    // blocks stay apart.
    feed.turn(Event::StepStarted { step: 1 })
        .chunk(StreamPart::ReasoningStart { id: "r1".into() })
        .chunk(StreamPart::ReasoningDelta {
            id: "r1".into(),
            text: "Think".into(),
        })
        .chunk(StreamPart::ReasoningStart { id: "r2".into() })
        .chunk(StreamPart::ReasoningDelta {
            id: "r2".into(),
            text: "More".into(),
        })
        .chunk(StreamPart::ReasoningDelta {
            id: "r1".into(),
            text: " harder".into(),
        })
        .chunk(StreamPart::Source {
            source: Source::Url {
                id: "s1".into(),
                url: "https://example.com".into(),
                title: None,
            },
        })
        .chunk(StreamPart::File {
            media_type: "image/png".into(),
            data: "data:image/png;base64,AA==".into(),
        })
        .chunk(StreamPart::TextStart { id: "t1".into() })
        .chunk(StreamPart::TextDelta {
            id: "t1".into(),
            text: "Done.".into(),
        })
        .turn(Event::StepFinished {
            record: Box::new(report(1)),
        });
    let (second, reasoning) = feed.state.step_record("turn_1", "msg_2", report(1));
    assert_eq!(second.text, "Done.");
    assert_eq!(reasoning, ["Think harder", "More"]);
    assert_eq!(second.reasoning_text.as_deref(), Some("Think harderMore"));
    assert_eq!(second.sources.len(), 1);
    assert_eq!(
        second.files,
        [(
            "image/png".to_owned(),
            "data:image/png;base64,AA==".to_owned()
        )]
    );
    assert!(second.tool_calls.is_empty() && second.tool_results.is_empty());
    assert_eq!((second.step, second.model_id.as_str()), (1, "m"));
}
