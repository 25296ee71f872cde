//! A trace of events as stable text for snapshots: one line per event, `seq turn kind body`,
//! where each test file decides what an event's body shows.

use mull::core::{Envelope, Event, StepRecord};
use mull::store::SessionState;

/// One line: the seq right-aligned, the turn id (or `-`) padded, the kind, then `body`.
pub fn line(envelope: &Envelope, body: &str) -> String {
    let turn = envelope.turn_id.as_deref().unwrap_or("-");
    format!("{:>3} {turn:<7} {} {body}", envelope.seq, envelope.kind())
}

/// The lines of `events`, each rendered by `render` (which ends in [`line`]), joined by
/// newlines.
pub fn render<'a>(
    events: impl IntoIterator<Item = &'a Envelope>,
    render: impl Fn(&Envelope) -> String,
) -> String {
    events
        .into_iter()
        .map(render)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The lines of the events of `events` after seq `after`, each rendered by `render` with, for
/// a `step_finished`, the step's whole record as the log tells it: the report the event
/// carries and the content folded from the events before it (the record `on_step_finish`
/// saw). Every event is folded, shown or not.
pub fn render_steps(
    events: &[Envelope],
    after: u64,
    render: impl Fn(&Envelope, Option<&StepRecord>) -> String,
) -> String {
    let Some(first) = events.first() else {
        return String::new();
    };
    let mut state = SessionState::new(first.session_id.clone());
    let mut lines = Vec::new();
    for env in events {
        state.apply(env);
        let record = match (&env.event, env.turn_id.as_deref()) {
            (Event::StepFinished { record }, Some(turn_id)) => state
                .turns
                .iter()
                .rev()
                .find(|t| t.turn_id.as_deref() == Some(turn_id))
                .map(|t| {
                    state
                        .step_record(turn_id, &t.message_id, (**record).clone())
                        .0
                }),
            _ => None,
        };
        if env.seq > after {
            lines.push(render(env, record.as_ref()));
        }
    }
    lines.join("\n")
}
