//! When a benchmark's records are due and which of them count: the open-loop schedule, the
//! warm-up cutoff and the end of a run. Pure: every time is an offset from the run's start,
//! passed in; no clock and no I/O here.

use std::time::Duration;

/// Which part of a run a record falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Sent, acknowledged and checked, but left out of every figure.
    Warmup,
    /// Counted in the latency and throughput figures.
    Measured,
    /// Past the end: not sent.
    Over,
}

/// A run's shape: a warm-up left out of the figures, then the measured part, which ends
/// after a number of records or after a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    warmup: Duration,
    length: Length,
}

/// How long the measured part lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Length {
    /// This many records after the warm-up.
    Records(u64),
    /// This long after the warm-up.
    Duration(Duration),
}

impl Window {
    pub fn new(warmup: Duration, length: Length) -> Window {
        Window { warmup, length }
    }

    pub fn warmup(&self) -> Duration {
        self.warmup
    }

    /// The phase of a record sent (or due) `at` after the start, when `measured` records
    /// have been counted before it. A record is measured from the warm-up's end, inclusive.
    pub fn phase(&self, at: Duration, measured: u64) -> Phase {
        if at < self.warmup {
            return Phase::Warmup;
        }
        let over = match self.length {
            Length::Records(records) => measured >= records,
            Length::Duration(length) => at >= self.warmup + length,
        };
        if over { Phase::Over } else { Phase::Measured }
    }

    /// The same window for one of `producers` senders that share it: each sends its share
    /// of a record count (the remainder to the first); a duration is everyone's.
    pub fn share(&self, producers: u32, index: u32) -> Window {
        let length = match self.length {
            Length::Records(records) => Length::Records(share(records, producers, index)),
            Length::Duration(length) => Length::Duration(length),
        };
        Window { length, ..*self }
    }
}

/// Records for producer `index` of `producers`: an even share, the remainder to the first.
pub(crate) fn share(records: u64, producers: u32, index: u32) -> u64 {
    let producers = u64::from(producers.max(1));
    let base = records / producers;
    if index == 0 {
        base + records % producers
    } else {
        base
    }
}

/// A fixed schedule: record `i` is due `i / rate` seconds after the start, whatever happened
/// to the records before it. Latency runs from these times, so a stall that delays sending
/// is counted in full (no coordinated omission).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Schedule {
    rate_per_s: f64,
}

/// What the sender does next, before the next record is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The record is due (or late): send it now.
    Send,
    /// Sleep this long; the record is due `spin` after that.
    Sleep(Duration),
    /// Due within `spin`: poll the clock until then.
    Spin,
}

impl Schedule {
    /// `rate_per_s` must be positive and finite (the command line checks it).
    pub fn new(rate_per_s: f64) -> Schedule {
        Schedule { rate_per_s }
    }

    /// When record `index` is due, from the start.
    pub fn due(&self, index: u64) -> Duration {
        Duration::from_secs_f64(index as f64 / self.rate_per_s)
    }

    /// What to do at `now` for a record due at `due`. An operating system's sleep overshoots
    /// by tens of microseconds (Linux's default timer slack is 50 µs), so the sender sleeps
    /// to `spin` before the due time and polls the clock for the rest.
    pub fn wait(now: Duration, due: Duration, spin: Duration) -> Wait {
        match due.checked_sub(now) {
            None => Wait::Send,
            Some(ahead) if ahead.is_zero() => Wait::Send,
            Some(ahead) if ahead > spin => Wait::Sleep(ahead - spin),
            Some(_) => Wait::Spin,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn records_are_shared_evenly_with_the_remainder_to_the_first() {
        let shares: Vec<u64> = (0..3).map(|i| share(10, 3, i)).collect();
        assert_eq!(shares, [4, 3, 3]);
        assert_eq!(share(7, 1, 0), 7);
        let window = Window::new(MS, Length::Records(10));
        assert_eq!(window.share(3, 1), Window::new(MS, Length::Records(3)));
        let timed = Window::new(MS, Length::Duration(MS * 30));
        assert_eq!(timed.share(3, 2), timed, "a duration is everyone's");
    }

    #[test]
    fn records_before_the_warmup_ends_are_not_measured() {
        let window = Window::new(MS * 5, Length::Duration(MS * 30));
        assert_eq!(window.phase(Duration::ZERO, 0), Phase::Warmup);
        assert_eq!(
            window.phase(MS * 5 - Duration::from_nanos(1), 0),
            Phase::Warmup
        );
        assert_eq!(
            window.phase(MS * 5, 0),
            Phase::Measured,
            "the cutoff counts"
        );
        assert_eq!(
            window.phase(MS * 35 - Duration::from_nanos(1), 9),
            Phase::Measured
        );
        assert_eq!(window.phase(MS * 35, 10), Phase::Over);
    }

    #[test]
    fn a_counted_run_ends_after_its_records_not_counting_the_warmup() {
        let window = Window::new(MS * 5, Length::Records(3));
        assert_eq!(window.phase(MS, 0), Phase::Warmup);
        assert_eq!(window.phase(MS * 60, 2), Phase::Measured);
        assert_eq!(window.phase(MS * 60, 3), Phase::Over);
        let no_warmup = Window::new(Duration::ZERO, Length::Records(1));
        assert_eq!(no_warmup.phase(Duration::ZERO, 0), Phase::Measured);
    }

    #[test]
    fn the_schedule_spaces_records_evenly_from_the_start() {
        let schedule = Schedule::new(20_000.0);
        assert_eq!(schedule.due(0), Duration::ZERO);
        assert_eq!(schedule.due(1), Duration::from_micros(50));
        assert_eq!(schedule.due(20_000), Duration::from_secs(1));
        // Thirty seconds at 100,000/s: still exact to the microsecond.
        let fast = Schedule::new(100_000.0);
        assert_eq!(
            fast.due(3_000_000).as_micros(),
            Duration::from_secs(30).as_micros()
        );
    }

    #[test]
    fn a_timed_window_over_the_schedule_measures_rate_times_duration() {
        let schedule = Schedule::new(1_000.0);
        let window = Window::new(MS * 500, Length::Duration(Duration::from_secs(2)));
        let mut measured = 0;
        let mut warmup = 0;
        for index in 0.. {
            match window.phase(schedule.due(index), measured) {
                Phase::Warmup => warmup += 1,
                Phase::Measured => measured += 1,
                Phase::Over => break,
            }
        }
        assert_eq!((warmup, measured), (500, 2_000));
    }

    #[test]
    fn the_sender_sleeps_to_near_the_due_time_then_spins() {
        let spin = Duration::from_micros(100);
        let due = MS * 10;
        assert_eq!(
            Schedule::wait(MS * 9, due, spin),
            Wait::Sleep(Duration::from_micros(900))
        );
        assert_eq!(Schedule::wait(due - spin, due, spin), Wait::Spin);
        assert_eq!(
            Schedule::wait(due - Duration::from_nanos(1), due, spin),
            Wait::Spin
        );
        assert_eq!(Schedule::wait(due, due, spin), Wait::Send);
        assert_eq!(
            Schedule::wait(due + MS, due, spin),
            Wait::Send,
            "late: at once"
        );
        assert_eq!(
            Schedule::wait(MS * 9, due, Duration::ZERO),
            Wait::Sleep(MS),
            "no spin: sleep all the way"
        );
    }
}
