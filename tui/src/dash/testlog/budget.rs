//! A session whose second turn a budget stopped: the first turn spends 90 tokens; the second
//! turn's first step spends 120 more, and the call its second step would make is refused by the
//! session's 200-token budget.

use mull_core::{
    BudgetLimits, BudgetMeasure, BudgetScope, Envelope, ErrorStage, Event, FinishReason,
    ModelCallKind, TurnStatus,
};

use super::build::{step_finished, text, turn_started, usage, LogBuilder};

/// See the module docs.
pub fn budget_log() -> Vec<Envelope> {
    let mut b = LogBuilder::new();
    let s = "sess_budget";
    for (turn, request, at, words) in [
        ("turn_1", "req_1", 0, "Lisbon sits on seven hills."),
        ("turn_2", "req_2", 5_000, "Checking the forecast."),
    ] {
        let t = Some(turn);
        b.push(s, t, at, turn_started(request, &format!("msg_{request}")));
        b.push(s, t, at + 10, Event::StepStarted { step: 0 });
        text(&mut b, s, turn, 0, at + 100, "t0", &[(at + 150, words)]);
        let spent = if turn == "turn_1" {
            (80, 10)
        } else {
            (100, 20)
        };
        b.push(
            s,
            t,
            at + 200,
            step_finished(0, FinishReason::Stop, usage(spent.0, spent.1, None)),
        );
        if turn == "turn_1" {
            b.push(
                s,
                t,
                at + 210,
                Event::TurnFinished {
                    request_id: request.into(),
                    status: TurnStatus::Completed,
                    error: None,
                    steps: 1,
                    usage: usage(spent.0, spent.1, None),
                    response_owed: false,
                },
            );
        }
    }
    let t = Some("turn_2");
    b.push(
        s,
        t,
        5_210,
        Event::BudgetExceeded {
            request_id: Some("req_2".into()),
            scope: BudgetScope::Session,
            measure: BudgetMeasure::Tokens,
            limit: 200.0,
            spent: 210.0,
            remaining: BudgetLimits {
                tokens: Some(0),
                ..BudgetLimits::none()
            },
            call: ModelCallKind::Step,
            step: Some(1),
        },
    );
    let message = "budget exceeded: the session's token budget is used up (210 tokens spent of \
                   200 tokens); no further model call is made";
    b.push(
        s,
        t,
        5_211,
        Event::TurnFinished {
            request_id: "req_2".into(),
            status: TurnStatus::Error,
            error: Some(message.into()),
            steps: 1,
            usage: usage(100, 20, None),
            response_owed: false,
        },
    );
    b.push(
        s,
        t,
        5_212,
        Event::TurnFailed {
            request_id: Some("req_2".into()),
            stage: ErrorStage::Budget,
            messages_persisted: true,
            classification: None,
            error: message.into(),
            model_error: None,
        },
    );
    b.events
}
