//! What the filter (`/` search, `&` hide) matches: a query against a row's kind, tool, status
//! and text, with `kind:`, `tool:` and `status:` narrowing it to one field.

use mull_store::projection::TurnSummary;
use mull_store::{SessionOverviews, SessionSummary};

use crate::dash::timeline::Item;

/// Whether a filter query matches a row described by (kind, tool, status, text).
pub fn query_matches(query: &str, kind: &str, tool: &str, status: &str, text: &str) -> bool {
    let query = query.trim().to_lowercase();
    if query.is_empty() {
        return false;
    }
    let contains = |hay: &str, needle: &str| hay.to_lowercase().contains(needle);
    if let Some(want) = query.strip_prefix("kind:") {
        return contains(kind, want.trim());
    }
    if let Some(want) = query.strip_prefix("tool:") {
        return !tool.is_empty() && contains(tool, want.trim());
    }
    if let Some(want) = query.strip_prefix("status:") {
        return !status.is_empty() && contains(status, want.trim());
    }
    [kind, tool, status, text]
        .iter()
        .any(|h| contains(h, &query))
}

/// Whether the filter matches a timeline row.
pub fn item_matches(query: &str, item: &Item) -> bool {
    let (tool, status) = match &item.kind {
        crate::dash::timeline::ItemKind::Tool(t) => (
            t.tool.as_str(),
            t.decision.map(|d| d.as_str()).unwrap_or(""),
        ),
        crate::dash::timeline::ItemKind::TurnFinished { status, .. } => ("", status.as_str()),
        _ => ("", ""),
    };
    let status = if item.is_error() && status.is_empty() {
        "error"
    } else {
        status
    };
    query_matches(query, item.kind_name(), tool, status, &item.search_text())
}

/// Whether the filter matches a turn row.
pub fn turn_matches(query: &str, turn: &TurnSummary) -> bool {
    let text = format!(
        "{} {} {} {}",
        turn.turn_id.as_deref().unwrap_or(""),
        turn.request_id,
        turn.model_id.as_deref().unwrap_or(""),
        turn.error.as_deref().unwrap_or("")
    );
    query_matches(query, "turn", "", turn.status.as_str(), &text)
}

/// Whether the filter matches a turn row, the user's message it answers included.
pub fn turn_row_matches(query: &str, turn: &TurnSummary, prompt: Option<&str>) -> bool {
    turn_matches(query, turn) || prompt.is_some_and(|p| query_matches(query, "turn", "", "", p))
}

/// Whether the filter matches a session row: its id, agent, model or first message.
pub fn session_matches(
    query: &str,
    session: &SessionSummary,
    overviews: &SessionOverviews,
) -> bool {
    let overview = overviews.get(&session.session_id);
    let text = match overview {
        Some(o) => format!(
            "{} {} {} {}",
            session.session_id,
            o.agent.as_deref().unwrap_or(""),
            o.model_id.as_deref().unwrap_or(""),
            o.first_prompt.as_deref().unwrap_or("")
        ),
        None => session.session_id.clone(),
    };
    query_matches(query, "session", "", "", &text)
}
