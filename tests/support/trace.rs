//! A trace of events as stable text for snapshots: one line per event, `seq turn kind body`,
//! where each test file decides what an event's body shows.

use mull::core::Envelope;

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
