//! A session: one conversation of one agent over the log, with its turn lock and queue, its
//! entry paths (`chat`, `save_messages`, `submit_messages`, `continue_last_turn`, client tool
//! results with auto-continuation), cancellation and recovery on reopen.
//!
//! # The turn lock
//! One turn runs at a time per session; later ones wait in FIFO order (a fair async mutex).
//! The lock is released before `on_chat_response` runs (as in Think), so the next queued
//! turn may start while the hook runs, and whatever the hook starts (`save_messages`, `chat`,
//! `submit_messages`, awaited or spawned) queues behind the lock like any other caller. A
//! blocking turn started from inside a running turn's other hooks would wait for its own turn
//! and is refused with [`EngineError::TurnLockHeld`](crate::EngineError::TurnLockHeld);
//! `submit_messages` from there is accepted and queued.
//!
//! # Subscribers
//! [`Session::follow`] streams every event after a seq, from the log then live, once each; it is
//! built on [`Session::subscribe`], a receiver of every envelope appended from then on. The bus
//! never waits for a slow subscriber: when one lags, its oldest events are dropped and `recv`
//! reports `Overflowed(n)`; a follower then reads the missed `seq` range back from the log,
//! which holds everything. Failed turns are also sent on
//! [`Session::failures`] (Think's `chat:request:failed`).

mod answer;
mod command;
mod entry;
pub mod follow;
mod handle;
mod inbox;
mod memory;
mod submission;

pub use crate::runtime::{
    ChatStream, ClientToolOutcome, OutcomeStatus, SessionOptions, SubmissionResult, SubmitOptions,
    SubmitReceipt, TurnFailure, TurnOptions, TurnOutcome,
};
pub use command::{CommandOptions, Reply};
pub use handle::{ActiveTurn, Session};
