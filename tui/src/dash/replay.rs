//! Playing a turn back as it happened: a cursor over the turn's events that advances by the
//! recorded gaps between their timestamps, scaled by a speed.

use std::time::Duration;

use mull_core::Envelope;

/// How fast a replay runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speed {
    /// Real time.
    X1,
    /// Ten times real time.
    X10,
    /// As fast as the screen can follow, ignoring the recorded gaps.
    Max,
}

/// Events a replay at max speed advances per tick.
const MAX_SPEED_EVENTS_PER_TICK: usize = 64;

impl Speed {
    /// The next speed in the 1× → 10× → max cycle.
    pub fn next(self) -> Speed {
        match self {
            Speed::X1 => Speed::X10,
            Speed::X10 => Speed::Max,
            Speed::Max => Speed::X1,
        }
    }

    /// How the speed is shown.
    pub fn label(self) -> &'static str {
        match self {
            Speed::X1 => "1×",
            Speed::X10 => "10×",
            Speed::Max => "max",
        }
    }
}

/// Where a replay stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// Index of the last event shown; events `..=cursor` have happened.
    pub cursor: usize,
    pub playing: bool,
    pub speed: Speed,
    /// Recorded time owed to the next event, in milliseconds.
    budget_ms: f64,
}

impl Replay {
    /// A replay at the first event, playing at 1×.
    pub fn new() -> Self {
        Self {
            cursor: 0,
            playing: true,
            speed: Speed::X1,
            budget_ms: 0.0,
        }
    }

    /// Advances by `elapsed` wall time; returns whether the cursor moved. Stops at the end.
    pub fn tick(&mut self, events: &[Envelope], elapsed: Duration) -> bool {
        if !self.playing || events.is_empty() {
            return false;
        }
        let last = events.len() - 1;
        let before = self.cursor;
        match self.speed {
            Speed::Max => {
                self.cursor = (self.cursor + MAX_SPEED_EVENTS_PER_TICK).min(last);
            }
            Speed::X1 | Speed::X10 => {
                let factor = if self.speed == Speed::X1 { 1.0 } else { 10.0 };
                self.budget_ms += elapsed.as_secs_f64() * 1000.0 * factor;
                while self.cursor < last {
                    let (Some(now), Some(next)) =
                        (events.get(self.cursor), events.get(self.cursor + 1))
                    else {
                        break;
                    };
                    let gap =
                        (next.at - now.at).num_microseconds().unwrap_or(0).max(0) as f64 / 1000.0;
                    if self.budget_ms < gap {
                        break;
                    }
                    self.budget_ms -= gap;
                    self.cursor += 1;
                }
            }
        }
        if self.cursor >= last {
            self.playing = false;
            self.budget_ms = 0.0;
        }
        self.cursor != before
    }

    /// Moves the cursor to `index` (clamped), pausing playback's time debt.
    pub fn seek(&mut self, index: usize, len: usize) {
        self.cursor = index.min(len.saturating_sub(1));
        self.budget_ms = 0.0;
    }

    /// Moves the cursor by `delta` events (clamped).
    pub fn step(&mut self, delta: isize, len: usize) {
        let target = if delta < 0 {
            self.cursor.saturating_sub(delta.unsigned_abs())
        } else {
            self.cursor.saturating_add(delta.unsigned_abs())
        };
        self.seek(target, len);
    }

    /// Starts or stops playback; playing from the end starts over.
    pub fn toggle(&mut self, len: usize) {
        self.playing = !self.playing;
        if self.playing && self.cursor + 1 >= len {
            self.cursor = 0;
        }
        self.budget_ms = 0.0;
    }
}

impl Default for Replay {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dash::testlog::sample_turn;

    #[test]
    fn one_x_waits_for_the_recorded_gap() {
        let events = sample_turn();
        let mut replay = Replay::new();
        // The first gap is 5 ms (turn_started → turn_configured).
        assert!(!replay.tick(&events, Duration::from_millis(4)));
        assert!(replay.tick(&events, Duration::from_millis(1)));
        assert_eq!(replay.cursor, 1);
    }

    #[test]
    fn ten_x_covers_ten_times_the_time() {
        let events = sample_turn();
        let mut one = Replay::new();
        let mut ten = Replay::new();
        ten.speed = Speed::X10;
        one.tick(&events, Duration::from_millis(300));
        ten.tick(&events, Duration::from_millis(30));
        assert_eq!(one.cursor, ten.cursor);
        assert!(one.cursor > 3);
    }

    #[test]
    fn max_speed_runs_to_the_end_and_stops() {
        let events = sample_turn();
        let mut replay = Replay::new();
        replay.speed = Speed::Max;
        while replay.tick(&events, Duration::ZERO) {}
        assert_eq!(replay.cursor, events.len() - 1);
        assert!(!replay.playing);
        replay.toggle(events.len());
        assert_eq!(replay.cursor, 0, "playing from the end starts over");
    }

    #[test]
    fn steps_and_seeks_clamp() {
        let mut replay = Replay::new();
        replay.step(-3, 10);
        assert_eq!(replay.cursor, 0);
        replay.step(4, 10);
        assert_eq!(replay.cursor, 4);
        replay.seek(99, 10);
        assert_eq!(replay.cursor, 9);
        assert_eq!(Speed::X1.next().next().next(), Speed::X1);
    }
}
