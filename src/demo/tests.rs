use mull_core::ModelRole;

use super::*;

fn result(output: Value) -> ModelMessage {
    ModelMessage {
        role: ModelRole::Tool,
        content: vec![ModelContent::ToolResult {
            call_id: "call_book_1".into(),
            tool_name: "book_hotel".into(),
            output,
            is_error: false,
        }],
    }
}

#[test]
fn only_a_booking_that_came_back_without_a_reference_reads_as_declined() {
    let denied = result(json!("Tool \"book_hotel\" was denied by the user."));
    let booked = result(json!({"hotel": "Casa do Largo", "reference": "LIS-3107"}));
    assert!(booking_declined(std::slice::from_ref(&denied)));
    assert!(!booking_declined(std::slice::from_ref(&booked)));
    // Once the conversation moved on, an old denial changes nothing.
    let later = ModelMessage::text(ModelRole::User, "And a restaurant?");
    assert!(!booking_declined(&[denied, later]));
    assert!(!booking_declined(&[]));
}
