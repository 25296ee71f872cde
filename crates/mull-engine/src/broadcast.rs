//! A session's broadcast channels (its events, its failed turns), made by their first
//! subscriber.
//!
//! An `async-broadcast` channel reserves room for its whole capacity when it is made: for the
//! event bus, a thousand envelopes, hundreds of kilobytes per session. Most sessions are never
//! watched, so the channel waits for someone to listen, and publishing to nobody costs nothing.

use std::sync::OnceLock;

use async_broadcast::{InactiveReceiver, Receiver, Sender};

/// A broadcast channel that never makes a sender wait: a subscriber that falls `capacity`
/// values behind loses the oldest and sees `Overflowed(n)`.
pub(crate) struct Broadcast<T> {
    capacity: usize,
    channel: OnceLock<Channel<T>>,
}

struct Channel<T> {
    sender: Sender<T>,
    /// Keeps the channel open while no subscriber is.
    _keep_open: InactiveReceiver<T>,
}

impl<T: Clone> Broadcast<T> {
    /// A channel for `capacity` values per subscriber, made on first [`Broadcast::subscribe`].
    pub fn new(capacity: usize) -> Broadcast<T> {
        Broadcast {
            capacity: capacity.max(1),
            channel: OnceLock::new(),
        }
    }

    /// A new receiver of every value published from now on.
    pub fn subscribe(&self) -> Receiver<T> {
        self.channel
            .get_or_init(|| {
                let (mut sender, receiver) = async_broadcast::broadcast(self.capacity);
                // A slow subscriber must never slow the publisher: the oldest values are
                // dropped for it instead, its cue to catch up from the log.
                sender.set_overflow(true);
                Channel {
                    sender,
                    _keep_open: receiver.deactivate(),
                }
            })
            .sender
            .new_receiver()
    }

    /// Publishes the value `make` returns, if anyone listens (otherwise `make` is not called).
    pub fn publish(&self, make: impl FnOnce() -> T) {
        if let Some(channel) = self.channel.get() {
            if channel.sender.receiver_count() > 0 {
                // With overflow on, a full channel drops its oldest value instead of failing;
                // the only other error is "no receivers", which `_keep_open` rules out.
                let _ = channel.sender.try_broadcast(make());
            }
        }
    }
}
