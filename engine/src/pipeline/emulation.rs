//! Links emulated in user space (`serve --link-rate 1gbit --link-latency 0.2ms`): every message a
//! role writes to its neighbour is held back until it would have arrived over a link of that rate
//! and one-way latency, so that roles on one machine see the paper's network (gigabit Ethernet
//! through one switch) rather than loopback.
//!
//! The model is a serialising link: a message of `b` bytes (its length prefix included) starts when
//! it is handed over or when the previous message finished serialising, whichever is later, takes
//! `8 b / rate` seconds on the wire, and arrives `latency` after its last bit left. A pacer thread
//! per link holds the messages (in order, at most `QUEUE` of them, as a socket buffer would) and
//! writes each to the real connection at its arrival time, so the sender never waits for the wire
//! while it computes, as with a real network card. Loopback itself adds its few microseconds.

use std::io::Write;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Messages queued on an emulated link before the sender waits (a socket buffer's worth of frames).
const QUEUE: usize = 256;

/// An emulated link's rate and latency; the default emulates nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkEmulation {
    /// Bits per second on the wire (None: no serialisation delay).
    pub rate_bps: Option<f64>,
    /// One-way latency added to every message.
    pub latency: Duration,
}

impl LinkEmulation {
    pub fn is_on(&self) -> bool {
        self.rate_bps.is_some() || !self.latency.is_zero()
    }

    /// Time on the wire of a message of `bytes` bytes.
    pub fn serialisation(&self, bytes: usize) -> Duration {
        self.rate_bps.map_or(Duration::ZERO, |r| {
            Duration::from_secs_f64(bytes as f64 * 8.0 / r)
        })
    }

    /// When a message of `bytes` handed over at `now` arrives; `free` is when the link finished
    /// serialising the previous message, and is moved to when this one finishes.
    pub fn arrival(&self, now: Instant, free: &mut Instant, bytes: usize) -> Instant {
        let start = now.max(*free);
        *free = start + self.serialisation(bytes);
        *free + self.latency
    }
}

/// A number followed by one of `units` (suffix, scale), e.g. `0.2ms`: the number times the scale.
fn with_unit(s: &str, t: &str, units: &[(&str, f64)], example: &str) -> Result<f64, String> {
    let (num, scale) = units
        .iter()
        .find_map(|(u, k)| t.strip_suffix(u).map(|n| (n, *k)))
        .ok_or_else(|| format!("{s:?}: give a number with a unit, e.g. {example}"))?;
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: {num:?} is not a number"))?;
    Ok(v * scale)
}

/// A link rate as operators write it: a number with a unit of bits per second (`1gbit`, `100mbit`,
/// `2.5gbit`, `800kbit`, `1e9bit`; `bps` is accepted for `bit`).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix("ps").map_or(t.clone(), |u| format!("{u}it"));
    let units = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)];
    let r = with_unit(s, &t, &units, "1gbit, 100mbit, 10gbit")?;
    if !(r.is_finite() && r > 0.0) {
        return Err(format!("{s:?}: a rate must be positive"));
    }
    Ok(r)
}

/// A one-way latency as operators write it: a number with `us`, `ms` or `s` (`0.2ms`, `50us`).
pub fn parse_latency(s: &str) -> Result<Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let units = [("us", 1e-6), ("ms", 1e-3), ("s", 1.0)];
    let v = with_unit(s, &t, &units, "0.2ms, 50us")?;
    if !(v.is_finite() && (0.0..=10.0).contains(&v)) {
        return Err(format!("{s:?}: a latency must be between 0 and 10 s"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// The sending side of an emulated link: hands framed messages to the pacer thread, which writes
/// each to the connection at its arrival time. A write that fails there is reported by the next
/// `send`.
pub struct Pacer {
    tx: SyncSender<(Vec<u8>, Instant)>,
    free: Instant,
    emulation: LinkEmulation,
    failed: Arc<Mutex<Option<std::io::Error>>>,
    /// How long a full queue may hold the sender before the link counts as stalled.
    stall: Duration,
}

impl Pacer {
    /// Start the pacer thread writing to `stream`.
    pub fn start(
        mut stream: std::net::TcpStream,
        emulation: LinkEmulation,
        stall: Duration,
    ) -> std::io::Result<Pacer> {
        let (tx, rx) = mpsc::sync_channel::<(Vec<u8>, Instant)>(QUEUE);
        let failed = Arc::new(Mutex::new(None));
        let report = failed.clone();
        std::thread::Builder::new()
            .name("link-pacer".into())
            .spawn(move || {
                for (frame, due) in rx {
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    if let Err(e) = stream.write_all(&frame) {
                        *report.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        return;
                    }
                }
            })?;
        Ok(Pacer {
            tx,
            free: Instant::now(),
            emulation,
            failed,
            stall,
        })
    }

    /// Queue one framed message (length prefix included); it leaves at its arrival time.
    pub fn send(&mut self, frame: Vec<u8>) -> std::io::Result<()> {
        if let Some(e) = self.failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        let due = self
            .emulation
            .arrival(Instant::now(), &mut self.free, frame.len());
        let mut item = (frame, due);
        let t0 = Instant::now();
        loop {
            match self.tx.try_send(item) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(back)) if t0.elapsed() < self.stall => {
                    item = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(TrySendError::Full(_)) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the emulated link's queue stayed full",
                    ))
                }
                Err(TrySendError::Disconnected(_)) => {
                    let e = self.failed.lock().unwrap_or_else(|p| p.into_inner()).take();
                    return Err(e.unwrap_or_else(|| {
                        std::io::Error::new(
                            std::io::ErrorKind::BrokenPipe,
                            "the emulated link's pacer stopped",
                        )
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_latencies_parse_with_units() {
        assert_eq!(parse_rate("1gbit").unwrap(), 1e9);
        assert_eq!(parse_rate("100Mbit").unwrap(), 1e8);
        assert_eq!(parse_rate("10gbps").unwrap(), 1e10);
        assert_eq!(parse_rate("2.5gbit").unwrap(), 2.5e9);
        for bad in ["1", "fast", "-1gbit", "0mbit", "1gb"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_latency("0.2ms").unwrap(), Duration::from_micros(200));
        assert_eq!(parse_latency("50us").unwrap(), Duration::from_micros(50));
        assert_eq!(parse_latency("0s").unwrap(), Duration::ZERO);
        for bad in ["1", "-1ms", "11s", "x ms"] {
            assert!(parse_latency(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn messages_serialise_one_after_another_then_add_the_latency() {
        let e = LinkEmulation {
            rate_bps: Some(8e6), // one byte per microsecond
            latency: Duration::from_micros(200),
        };
        let t0 = Instant::now();
        let mut free = t0;
        // two back-to-back messages of 1000 bytes: the second waits for the first's last bit
        assert_eq!(
            e.arrival(t0, &mut free, 1000),
            t0 + Duration::from_micros(1200)
        );
        assert_eq!(
            e.arrival(t0, &mut free, 1000),
            t0 + Duration::from_micros(2200)
        );
        // one handed over after the link went quiet starts at once
        let later = t0 + Duration::from_millis(10);
        assert_eq!(
            e.arrival(later, &mut free, 500),
            later + Duration::from_micros(700)
        );
        assert!(!LinkEmulation::default().is_on());
    }
}
