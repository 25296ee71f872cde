//! Each envelope the engine appends, handed to a telemetry layer as it is appended: what a live
//! OpenTelemetry export folds into spans, with the same fold a re-export runs over the log.
//!
//! The engine emits a `tracing` event at [`TRACE_TARGET`] (TRACE) for each envelope it appends,
//! inside [`hand_over`]; a layer reads the envelope with [`with_current`] while it handles that
//! event. `tracing` is how a process opts into telemetry (a subscriber, its filters, its scope
//! per thread or process), and the envelope rides beside the event on the emitting thread, so it
//! is neither serialized nor copied for a layer that is not there: with no layer asking for the
//! target, the engine skips all of it.

use std::cell::RefCell;

use crate::event::Envelope;

/// The `tracing` target of the appended-envelope event. Its fields: `seq`, `kind`, and
/// `content` (whether the session's telemetry may carry message content).
pub const TRACE_TARGET: &str = "mull_engine::appended";

thread_local! {
    static CURRENT: RefCell<Option<Envelope>> = const { RefCell::new(None) };
}

/// Clears the slot when the emit returns or unwinds.
struct Clear;

impl Drop for Clear {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().take());
    }
}

/// Makes `env` the current envelope of this thread while `emit` runs (the engine emits its
/// [`TRACE_TARGET`] event inside).
pub fn hand_over<R>(env: Envelope, emit: impl FnOnce() -> R) -> R {
    CURRENT.with(|c| *c.borrow_mut() = Some(env));
    let _clear = Clear;
    emit()
}

/// Calls `f` with the envelope being handed over on this thread, if one is.
pub fn with_current<R>(f: impl FnOnce(Option<&Envelope>) -> R) -> R {
    CURRENT.with(|c| f(c.borrow().as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Event;

    #[test]
    fn the_envelope_is_current_only_while_it_is_handed_over() {
        let env = Envelope {
            seq: 7,
            session_id: "s".into(),
            turn_id: None,
            at: chrono::DateTime::UNIX_EPOCH,
            v: 1,
            event: Event::StepStarted { step: 0 },
        };
        let seen = hand_over(env, || with_current(|e| e.map(|e| e.seq)));
        assert_eq!(seen, Some(7));
        assert_eq!(with_current(|e| e.map(|e| e.seq)), None);
    }
}
