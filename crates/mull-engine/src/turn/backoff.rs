//! Bounded recovery from transient and rate-limit errors (Think 0.24): when
//! `classify_chat_error` calls a stream failure `transient` or `rate_limit` and
//! [`ChatRecovery`](crate::ChatRecovery) is on, the attempt is discarded, a
//! `recovery_scheduled` event is written with the wait, the turn waits its backoff (at most
//! 1 s doubling to a cap of 30 s, jittered down to half of that by a draw seeded from the session
//! and request id, so a replay waits the same; on the session's clock: a clock that only moves
//! when told to lets the wait pass at once)
//! and runs again under the same request id. When the attempts are used up,
//! `on_recovery_exhausted` runs and the turn ends with a terminal error naming the
//! classification.

use mull_core::{ChatErrorClassification, Event, HookName, TurnStatus};

use super::run::{Attempt, TurnRun};
use crate::context::RecoveryExhausted;
use crate::error::{ChatError, EngineError};
use crate::guard::Caller;

/// The snake_case name of a classification, as the log writes it.
fn class_name(c: ChatErrorClassification) -> &'static str {
    match c {
        ChatErrorClassification::ContextOverflow => "context_overflow",
        ChatErrorClassification::RateLimit => "rate_limit",
        ChatErrorClassification::Transient => "transient",
        ChatErrorClassification::Fatal => "fatal",
        ChatErrorClassification::Unknown => "unknown",
    }
}

impl TurnRun<'_> {
    /// Runs the request again after its backoff, or — attempts used up, or the turn aborted —
    /// ends it with its terminal error. `recoveries` is how many recoveries this request ran.
    pub(super) async fn recover(
        &mut self,
        error: ChatError,
        classification: ChatErrorClassification,
        recoveries: u32,
    ) -> Result<Attempt, EngineError> {
        let recovery = self.parts.config.recovery();
        if recoveries >= recovery.max_attempts || self.spec.signal.is_cancelled() {
            return self.give_up(error, classification, recoveries).await;
        }
        // The partial of a failed attempt is discarded: the next attempt starts afresh.
        self.append(Event::TurnFinished {
            request_id: self.spec.request_id.clone(),
            status: TurnStatus::Error,
            error: Some(error.message.clone()),
            steps: u32::try_from(self.steps.len()).unwrap_or(u32::MAX),
            usage: self.usage.clone(),
            // The next attempt ends the request: not its last end.
            response_owed: false,
        })?;
        // Seeded by the request, so a replay of this session waits what the recording did.
        let key = format!("{}/{}", self.parts.session_id(), self.spec.request_id);
        let delay = recovery.delay(recoveries, &key);
        let scheduled = self.append(Event::RecoveryScheduled {
            request_id: self.spec.request_id.clone(),
            attempt: recoveries + 1,
            max_attempts: recovery.max_attempts,
            classification,
            error: error.message.clone(),
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        })?;
        // The gate: the wait and the next attempt follow a durable decision to recover.
        self.parts.recorder.durable(scheduled).await?;
        if !self.parts.recorder.clock().skip_ahead(delay) {
            tokio::select! {
                biased;
                // The next attempt sees the signal and ends at once as aborted.
                _ = self.spec.signal.cancelled() => {}
                _ = tokio::time::sleep(delay) => {}
            }
        }
        Ok(Attempt::Recovered)
    }

    /// The attempts are used up: `on_recovery_exhausted`, then the terminal error.
    async fn give_up(
        &mut self,
        error: ChatError,
        classification: ChatErrorClassification,
        recoveries: u32,
    ) -> Result<Attempt, EngineError> {
        let ctx = RecoveryExhausted {
            request_id: self.spec.request_id.clone(),
            attempts: recoveries,
            classification,
            error: error.message.clone(),
        };
        let caller = Caller::agent(HookName::OnRecoveryExhausted);
        let hooks = self.parts.hooks;
        // A failure of the hook is recorded as `hook_failed`; the turn ends the same way.
        hooks
            .guard(
                self.tid(),
                caller,
                hooks.agent().on_recovery_exhausted(&ctx),
            )
            .await?
            .ok();
        let plural = if recoveries == 1 { "" } else { "s" };
        let terminal = ChatError {
            classification: Some(classification),
            message: format!(
                "the model kept failing ({}); gave up after {recoveries} recovery attempt{plural}: {}",
                class_name(classification),
                error.message
            ),
            ..error
        };
        self.finish(TurnStatus::Error, Some(terminal))
            .await
            .map(|e| Attempt::Done(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::ChatRecovery;

    #[test]
    fn the_backoff_doubles_to_a_cap_each_wait_jittered_between_half_and_all_of_it() {
        let recovery = ChatRecovery::new(8);
        let ceilings = [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000];
        let mut spread = std::collections::BTreeSet::new();
        for key in 0..50 {
            let key = format!("sess_{key}/req_1");
            for (n, ceiling) in (0..8).zip(ceilings) {
                let ms = recovery.delay(n, &key).as_millis();
                assert!(
                    ceiling / 2 <= ms && ms <= ceiling,
                    "attempt {n} of {key} waits {ms} ms, outside {}..={ceiling}",
                    ceiling / 2
                );
                if n == 0 {
                    spread.insert(ms);
                }
            }
        }
        // Different requests come back at different moments …
        assert!(spread.len() > 40, "{spread:?}");
        // … and the same request always waits the same (what makes a replay agree).
        let again = ChatRecovery::new(8);
        for n in 0..8 {
            assert_eq!(
                again.delay(n, "sess_a/req_1"),
                recovery.delay(n, "sess_a/req_1")
            );
        }
        assert!(recovery.delay(0, "sess_a/req_1") <= Duration::from_secs(1));
    }

    #[test]
    fn the_draw_is_a_fixed_function_of_the_request() {
        // Pinned: a replay of a recorded session re-derives these; a change here is a change
        // of recorded behaviour, to be made knowingly.
        let recovery = ChatRecovery::new(3);
        let waits: Vec<u128> = (0..3)
            .map(|n| recovery.delay(n, "sess_a/req_1").as_millis())
            .collect();
        assert_eq!(waits, [932, 1140, 2324]);
    }
}
