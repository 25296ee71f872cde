//! How a service embeds mull: an agent with two tools and a `before_tool_call` policy, opened
//! on a database file and driven from code. The model here is scripted so the example runs
//! offline; swap in a provider from `mull::providers` for a real one.
//!
//! Run: `cargo run --example embed -- /tmp/embed.db`, then `mull dash /tmp/embed.db`.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use mull::core::{LanguageModel, UIMessage};
use mull::engine::{
    Agent, FnTool, HookResult, Session, SessionOptions, ToolCallContext, ToolCallDecision,
    ToolError, ToolSet, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use mull::store::Log;
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize, schemars::JsonSchema)]
struct OrderQuery {
    /// The order number, e.g. "A-1001".
    order: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Refund {
    order: String,
    /// Amount in cents.
    amount_cents: u64,
}

/// A support agent: it may look orders up freely; refunds above a limit are blocked.
struct Support {
    model: Arc<dyn LanguageModel>,
}

#[async_trait]
impl Agent for Support {
    fn name(&self) -> &str {
        "support"
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }

    fn system_prompt(&self) -> String {
        "You help customers with orders. Refunds over 50 EUR need a human.".into()
    }

    fn tools(&self) -> ToolSet {
        let lookup = FnTool::new(
            "order_status",
            "Looks an order up.",
            |q: OrderQuery, _| async move {
                Ok::<Value, ToolError>(
                    json!({"order": q.order, "status": "delivered", "total_cents": 12900}),
                )
            },
        )
        .shared();
        let refund = FnTool::new(
            "refund",
            "Refunds part of an order.",
            |r: Refund, _| async move {
                Ok::<Value, ToolError>(json!({"refunded_cents": r.amount_cents, "order": r.order}))
            },
        )
        .shared();
        ToolSet::new().with(lookup).with(refund)
    }

    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        if ctx.tool_name == "refund" {
            let amount = ctx.input["amount_cents"].as_u64().unwrap_or(u64::MAX);
            if amount > 5_000 {
                return Ok(Some(ToolCallDecision::Block {
                    reason: Some(format!(
                        "Refunds over 50 EUR need a human; asked for {amount} cents."
                    )),
                }));
            }
        }
        Ok(None)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "embed.db".into());
    let log = Log::open(&path)?;

    let model = ScriptedModel::builder("scripted-support")
        .step(|s| {
            s.text("Let me check.")
                .tool_call("c1", "order_status", json!({"order": "A-1001"}))
        })
        .step(|s| {
            s.tool_call(
                "c2",
                "refund",
                json!({"order": "A-1001", "amount_cents": 12900}),
            )
        })
        .step(|s| s.text("A full refund needs a colleague's approval; I've flagged it."))
        .build();
    let agent = Arc::new(Support {
        model: Arc::new(model),
    });
    let session = Session::open(&log, agent, SessionOptions::new("customer-42")).await?;

    // Watch every event from here on, once each and in order (a lagging watcher is made good
    // from the log).
    let mut events = session.follow(session.read_state(|s| s.last_seq));
    let watcher = tokio::spawn(async move {
        let mut count = 0;
        while let Some(Ok(envelope)) = events.next().await {
            count += 1;
            if envelope.kind() == "tool_decided" {
                println!("decision: {}", envelope.event.encode());
            }
            if envelope.kind() == "turn_finished" {
                break;
            }
        }
        count
    });

    // Stream a turn back to the caller.
    let mut chat = session.chat(
        vec![UIMessage::user(
            "m1",
            "Order A-1001 arrived broken, refund it please.",
        )],
        TurnOptions::default(),
    )?;
    while let Some(part) = chat.next().await {
        if let mull::core::StreamPart::TextDelta { text, .. } = part {
            print!("{text}");
        }
    }
    println!();
    let outcome = chat.finish().await?;
    println!("request {} ended {:?}", outcome.request_id, outcome.status);
    println!(
        "{} events observed; the log at {path} holds them all",
        watcher.await?
    );
    Ok(())
}
