//! One BFD session (RFC 5880, asynchronous mode, no authentication, no echo): the state
//! machine of §6.8.6, the detection time of §6.8.4 and the transmit interval of §6.8.7 (with
//! the 75–100 % jitter of §6.8.7), and the Poll/Final answer. Pure: the caller gives it the
//! packets it received and the time, and sends what it asks for.

use std::time::{Duration, Instant};

use super::packet::{Control, State};

/// What a session advertises (OVN's `bfd-min-rx`, `bfd-min-tx`, `bfd-mult` of
/// `SB_Global.options`, Open vSwitch's defaults without them: 1000 ms, 100 ms, 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timers {
    pub min_rx: Duration,
    pub min_tx: Duration,
    pub mult: u8,
}

impl Default for Timers {
    fn default() -> Self {
        Self {
            min_rx: Duration::from_millis(1000),
            min_tx: Duration::from_millis(100),
            mult: 3,
        }
    }
}

/// RFC 5880 §6.8.3: while a session is not up, it transmits at most once a second.
const SLOW_TX: Duration = Duration::from_secs(1);

/// Diagnostic: control detection time expired.
const DIAG_EXPIRED: u8 = 1;
/// Diagnostic: neighbour signaled session down.
const DIAG_NEIGHBOUR_DOWN: u8 = 3;

#[derive(Debug)]
pub struct Session {
    timers: Timers,
    local_discriminator: u32,
    remote_discriminator: u32,
    state: State,
    diagnostic: u8,
    remote_min_rx: Duration,
    remote_min_tx: Duration,
    remote_mult: u8,
    last_received: Option<Instant>,
    /// A Final is owed (the peer polled).
    final_owed: bool,
    next_transmit: Instant,
}

impl Session {
    /// A session in Down with `discriminator` (non-zero, unique among this node's sessions).
    #[must_use]
    pub fn new(discriminator: u32, timers: Timers, now: Instant) -> Self {
        Self {
            timers,
            local_discriminator: discriminator,
            remote_discriminator: 0,
            state: State::Down,
            diagnostic: 0,
            remote_min_rx: Duration::from_micros(1),
            remote_min_tx: Duration::ZERO,
            remote_mult: 0,
            last_received: None,
            final_owed: false,
            next_transmit: now,
        }
    }

    #[must_use]
    pub fn up(&self) -> bool {
        self.state == State::Up
    }

    #[must_use]
    pub fn state(&self) -> State {
        self.state
    }

    /// New timers (a changed `SB_Global.options`), taking effect with the next packet.
    pub fn set_timers(&mut self, timers: Timers) {
        self.timers = timers;
    }

    /// Takes in a control packet from the peer (RFC 5880 §6.8.6); whether the state changed.
    pub fn receive(&mut self, control: &Control, now: Instant) -> bool {
        if control.your_discriminator == 0
            && !matches!(control.state, State::Down | State::AdminDown)
        {
            return false;
        }
        if control.your_discriminator != 0 && control.your_discriminator != self.local_discriminator
        {
            return false;
        }
        self.remote_discriminator = control.my_discriminator;
        self.remote_min_rx = Duration::from_micros(u64::from(control.required_min_rx_us));
        self.remote_min_tx = Duration::from_micros(u64::from(control.desired_min_tx_us));
        self.remote_mult = control.detect_mult;
        self.last_received = Some(now);
        if control.poll {
            self.final_owed = true;
            self.next_transmit = now;
        }
        let before = self.state;
        self.state = match (self.state, control.state) {
            (State::AdminDown, _) => State::AdminDown,
            (State::Up, State::AdminDown | State::Down) => {
                self.diagnostic = DIAG_NEIGHBOUR_DOWN;
                State::Down
            }
            (_, State::AdminDown) => State::Down,
            (State::Down, State::Down) => State::Init,
            (State::Down, State::Init) | (State::Init, State::Init | State::Up) => State::Up,
            (state, _) => state,
        };
        if self.state != before && self.state == State::Up {
            self.diagnostic = 0;
        }
        self.state != before
    }

    /// The detection time (§6.8.4): the peer's multiplier times the slower of what we accept
    /// and what it sends at.
    fn detection_time(&self) -> Duration {
        let interval = self.timers.min_rx.max(self.remote_min_tx);
        interval * u32::from(self.remote_mult.max(1))
    }

    /// Goes Down when the peer has been silent for the detection time; whether the state
    /// changed.
    pub fn expire(&mut self, now: Instant) -> bool {
        let silent = self
            .last_received
            .is_some_and(|last| now.duration_since(last) > self.detection_time());
        if silent && matches!(self.state, State::Init | State::Up) {
            self.state = State::Down;
            self.diagnostic = DIAG_EXPIRED;
            self.remote_discriminator = 0;
            return true;
        }
        false
    }

    /// The packet to send now, if one is due (then the next one is scheduled with `jitter`, a
    /// fraction in [0, 1) of the 25 % RFC 5880 lets an interval shrink by).
    pub fn transmit(&mut self, now: Instant, jitter: f64) -> Option<Control> {
        if now < self.next_transmit {
            return None;
        }
        let interval = if self.state == State::Up {
            self.timers.min_tx.max(self.remote_min_rx)
        } else {
            SLOW_TX.max(self.remote_min_rx)
        };
        let interval = interval.mul_f64(1.0 - 0.25 * jitter.clamp(0.0, 1.0));
        self.next_transmit = now + interval;
        let final_ = std::mem::take(&mut self.final_owed);
        Some(Control {
            diagnostic: self.diagnostic,
            state: self.state,
            poll: false,
            final_,
            detect_mult: self.timers.mult,
            my_discriminator: self.local_discriminator,
            your_discriminator: self.remote_discriminator,
            desired_min_tx_us: duration_us(if self.state == State::Up {
                self.timers.min_tx
            } else {
                SLOW_TX
            }),
            required_min_rx_us: duration_us(self.timers.min_rx),
        })
    }

    /// When the session next wants to run (transmit or check expiry).
    #[must_use]
    pub fn next_wake(&self) -> Instant {
        match self.last_received {
            Some(last) if matches!(self.state, State::Init | State::Up) => {
                self.next_transmit.min(last + self.detection_time())
            }
            _ => self.next_transmit,
        }
    }
}

fn duration_us(duration: Duration) -> u32 {
    u32::try_from(duration.as_micros()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sessions exchanging every packet they send, at `now`.
    fn exchange(a: &mut Session, b: &mut Session, now: Instant) {
        for _ in 0..2 {
            a.next_transmit = now;
            b.next_transmit = now;
            if let Some(packet) = a.transmit(now, 0.0) {
                b.receive(&packet, now);
            }
            if let Some(packet) = b.transmit(now, 0.0) {
                a.receive(&packet, now);
            }
        }
    }

    #[test]
    fn two_sessions_come_up_and_go_down_when_one_falls_silent() {
        let start = Instant::now();
        let timers = Timers {
            min_rx: Duration::from_millis(300),
            min_tx: Duration::from_millis(100),
            mult: 3,
        };
        let (mut a, mut b) = (
            Session::new(1, timers, start),
            Session::new(2, timers, start),
        );
        exchange(&mut a, &mut b, start);
        assert!(a.up() && b.up(), "{:?} {:?}", a.state(), b.state());
        // b falls silent: a waits 3 × 300 ms, then goes down.
        let later = start + Duration::from_millis(800);
        assert!(!a.expire(later));
        assert!(a.expire(start + Duration::from_millis(1000)));
        assert_eq!(a.state(), State::Down);
        // b is heard again: a's Down brings it down too, then both come up (the three-way
        // handshake).
        let back = start + Duration::from_secs(2);
        exchange(&mut a, &mut b, back);
        exchange(&mut a, &mut b, back);
        assert!(a.up() && b.up(), "{:?} {:?}", a.state(), b.state());
    }

    #[test]
    fn a_poll_is_answered_with_a_final_and_a_stranger_is_ignored() {
        let now = Instant::now();
        let mut a = Session::new(1, Timers::default(), now);
        let poll = Control {
            diagnostic: 0,
            state: State::Down,
            poll: true,
            final_: false,
            detect_mult: 3,
            my_discriminator: 9,
            your_discriminator: 0,
            desired_min_tx_us: 100_000,
            required_min_rx_us: 1_000_000,
        };
        assert!(a.receive(&poll, now));
        assert_eq!(a.state(), State::Init);
        let answer = a.transmit(now, 0.0).unwrap();
        assert!(answer.final_ && answer.your_discriminator == 9);
        // A packet for another session's discriminator changes nothing.
        let stranger = Control {
            your_discriminator: 77,
            state: State::Up,
            poll: false,
            ..poll
        };
        assert!(!a.receive(&stranger, now));
        assert_eq!(a.state(), State::Init);
    }
}
