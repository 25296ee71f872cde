//! The ids a client chooses — chat, message, tool call, approval and WebSocket request ids —
//! are short and plain: at most [`MAX_ID_LEN`] bytes of `A-Z a-z 0-9 _ - . :`. The chat id is
//! stored on every row of its chat and the others in events, so a client that could choose a
//! megabyte id would grow the log by that much per row; and a plain charset keeps ids safe in
//! paths, logs and terminals. The AI SDK's generated ids (`generateId`, `createIdGenerator`)
//! and the providers' tool call ids fit.
//!
//! A request with an id that does not fit is refused with a JSON 400 naming the field
//! (`messages[2].id`), before it reaches a session.

use mull_core::UIPart;

use crate::error::ApiError;
use crate::wire::ChatRequest;

/// The longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// Whether `c` may appear in an id.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')
}

/// Checks one id; `field` names it in the refusal.
pub fn check_id(field: &str, id: &str) -> Result<(), ApiError> {
    let reason = if id.is_empty() {
        "is empty".to_owned()
    } else if id.len() > MAX_ID_LEN {
        format!("is {} bytes long", id.len())
    } else if let Some(bad) = id.chars().find(|c| !allowed(*c)) {
        format!("has the character {bad:?}")
    } else {
        return Ok(());
    };
    Err(ApiError::InvalidId {
        field: field.to_owned(),
        reason: format!("{reason}; ids are 1 to {MAX_ID_LEN} bytes of A-Z a-z 0-9 _ - . :"),
    })
}

/// Checks every id a chat request carries.
pub fn check_request(request: &ChatRequest) -> Result<(), ApiError> {
    check_id("id", &request.chat_id)?;
    if let Some(message_id) = &request.message_id {
        check_id("messageId", message_id)?;
    }
    for (i, message) in request.messages.iter().enumerate() {
        check_id(&format!("messages[{i}].id"), &message.id)?;
        for (j, part) in message.parts.iter().enumerate() {
            if let UIPart::Tool(tool) = part {
                check_id(
                    &format!("messages[{i}].parts[{j}].toolCallId"),
                    &tool.call_id,
                )?;
            }
        }
    }
    for answer in &request.approvals {
        check_id("approval.id", &answer.approval_id)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_short_ids_pass_and_the_rest_are_named() {
        for ok in [
            "chat-1",
            "msg_AbC.9:x",
            "toolu_01A",
            &"a".repeat(MAX_ID_LEN),
        ] {
            assert!(check_id("id", ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(MAX_ID_LEN + 1);
        for (bad, why) in [
            ("", "is empty"),
            (long.as_str(), "129 bytes"),
            ("a b", "' '"),
            ("../x", "'/'"),
            ("é", "'é'"),
        ] {
            let error = check_id("messages[0].id", bad).unwrap_err();
            let text = error.to_string();
            assert!(text.starts_with("messages[0].id: "), "{text}");
            assert!(text.contains(why), "{text}");
            assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST);
        }
    }
}
