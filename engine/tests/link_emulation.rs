//! An emulated link (`serve --link-rate --link-latency`) over real loopback TCP: a frame of known
//! size arrives after its serialisation time plus the latency, and a second frame sent right
//! behind it waits for the first one's last bit.
//!
//! Tolerance: the pacer sleeps until each frame's arrival time, and a sleep never returns early,
//! so a frame can only arrive late: by the sleep's overshoot, the loopback copy of one megabyte
//! (about a millisecond here) and the reader's wake-up. On a shared two-core machine a wake-up can
//! wait a scheduler slice or two, so the upper bound allows `SLACK` (a third of the expected time
//! of the smaller case); the lower bound allows a tenth of a millisecond for the clock reads.

use std::time::{Duration, Instant};

use moefleet_engine::pipeline::emulation::LinkEmulation;
use moefleet_engine::pipeline::link::{blocking_timed, LinkTiming};
use moefleet_engine::pipeline::wire::{Message, RowHeader, WireLimits};

const HIDDEN: usize = 256;
const SLACK: Duration = Duration::from_millis(25);

fn frame(rows: usize) -> Message {
    Message::Forward {
        seq: 1,
        group: 0,
        rows: (0..rows)
            .map(|i| RowHeader {
                slot: 0,
                pos: i as u32,
                token: 7,
                flags: 0,
            })
            .collect(),
        hidden: HIDDEN as u32,
        residual: vec![0.5; rows * HIDDEN],
    }
}

#[test]
fn frames_take_their_serialisation_time_plus_the_latency() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lim = WireLimits::new(HIDDEN);
    let timing = LinkTiming {
        stall: Duration::from_secs(5),
        emulate: LinkEmulation {
            rate_bps: Some(100e6),
            latency: Duration::from_millis(2),
        },
    };
    let (a, b) = rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, s) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
        (c.unwrap(), s.unwrap().0)
    });
    let (_, w) = {
        let _in = rt.enter();
        blocking_timed(a, lim, Some(timing)).unwrap()
    };
    let (mut r, _) = {
        let _in = rt.enter();
        blocking_timed(b, lim, None).unwrap()
    };
    let m = frame(1000); // 1000 rows of 256 floats: about 1 MB
    let bytes = m.encode();
    let wire = bytes.len() + 4;
    let serial = Duration::from_secs_f64(wire as f64 * 8.0 / 100e6);
    let one = serial + Duration::from_millis(2);
    let t0 = Instant::now();
    w.send_bytes(&bytes).unwrap();
    w.send_bytes(&bytes).unwrap();
    let (got, n) = r.recv().unwrap();
    let t1 = t0.elapsed();
    assert_eq!(n, wire);
    assert!(matches!(got, Message::Forward { ref rows, .. } if rows.len() == 1000));
    r.recv().unwrap();
    let t2 = t0.elapsed();
    let two = 2 * serial + Duration::from_millis(2);
    let early = Duration::from_micros(100);
    assert!(
        t1 + early >= one && t1 <= one + SLACK,
        "first frame after {t1:?}, expected {one:?}"
    );
    assert!(
        t2 + early >= two && t2 <= two + SLACK,
        "second frame after {t2:?}, expected {two:?}"
    );
}
