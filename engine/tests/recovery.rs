//! Faults against real fleets (role processes over TCP, the HTTP server, real signals): a killed
//! role, a stopped role, the restart limit, a role of a fleet-file fleet restarted by hand, and a
//! link cut between network namespaces. The streams in flight survive each fault: after a pause
//! they carry on, and each carries exactly the tokens (and logits hashes, so the bits) of the same
//! request run uninterrupted, greedy and seeded. /health says `recovering` (503, Retry-After) and
//! then `ready`, the next request is served with the same tokens as before the fault, and no role
//! process outlives the server. The cut link needs network namespaces (`ip netns`, root): where
//! they cannot be made it is skipped with the reason printed, and fails instead with
//! `MOEFLEET_REQUIRE_NETNS=1` (`.ci/run` sets it where `ip netns add` works).

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::fleet::{
    alive, free_port, greedy, health, ip, local_fleet_file, role, serve_fleet, serve_fleet_with,
    stall_arg, until, write_fleet, Netns, Reap, STALL_S,
};
use common::held::{held_requests, held_streams_survived, hold, streamed, uninterrupted};
use common::server::Server;
use common::skip;
use serde_json::json;

/// Kill (or stop) one role mid-stream; the fleet must come back by itself.
fn fault_and_recover(signal: &str, victim: usize) {
    let stall = stall_arg();
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "3",
        "--context",
        "4096",
        "--link-stall-s",
        &stall,
    ]);
    let before = greedy(&s);
    let want: Vec<_> = held_requests()
        .iter()
        .map(|r| uninterrupted(&s, r))
        .collect();
    let kids = s.children();
    assert_eq!(kids.len(), 2);
    // children start from the last rank backwards: pid order is rank 2, rank 1
    let mut by_pid = kids.clone();
    by_pid.sort_unstable();
    let pid = by_pid[2 - victim];
    let held = streamed(&s, &held_requests());
    s.signal(signal, pid);
    let detect = until(&s.url, Duration::from_secs(20), |code, _| code == 503);
    // while recovering: 503 with Retry-After (or already ready again)
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/v1/completions", s.url))
        .json(&json!({"prompt": "x", "max_tokens": 2}))
        .send()
        .unwrap();
    if r.status().as_u16() == 503 {
        assert!(r.headers().contains_key("retry-after"));
    }
    let back = until(&s.url, Duration::from_secs(30), |code, _| code == 200);
    eprintln!(
        "{signal} role {victim}: detected after {:?}, ready {:?} later",
        detect, back
    );
    held_streams_survived(&s, held, &want);
    if signal == "-STOP" {
        // the receiver's read times out STALL_S after the last message, sent before the stop;
        // one second more covers scheduling and the 20 ms polls
        assert!(
            detect >= Duration::from_secs_f64(STALL_S * 0.9),
            "a stopped role was reported after {detect:?}, before the stall bound"
        );
        assert!(
            detect <= Duration::from_secs_f64(STALL_S + 1.0),
            "stall detected after {detect:?}"
        );
    }
    assert_eq!(
        greedy(&s),
        before,
        "the restarted role computes what the first one did"
    );
    assert_eq!(s.stats()["recoveries_total"], 1);
    let now = s.children();
    assert_eq!(now.len(), 2);
    // /api/stats lists the processes as they are now: role 0 and the restarted children
    let listed = s.stats()["processes"].as_array().unwrap().clone();
    let mut pids: Vec<u64> = listed[1..]
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    let mut kids: Vec<u64> = now.iter().map(|&p| u64::from(p)).collect();
    pids.sort_unstable();
    kids.sort_unstable();
    assert_eq!((listed.len(), pids), (3, kids));
    assert_eq!(listed[0]["role"], 0);
    assert!(!now.contains(&pid), "role {victim} was not replaced");
    assert!(!alive(pid), "the old role {victim} ({pid}) still runs");
    drop(s);
    std::thread::sleep(Duration::from_millis(200));
    for p in now {
        assert!(!alive(p), "role process {p} outlived serve");
    }
}

#[test]
fn a_killed_role_is_restarted_and_the_fleet_serves_again() {
    fault_and_recover("-KILL", 1);
}

#[test]
fn a_stopped_role_is_detected_within_the_stall_bound_and_replaced() {
    fault_and_recover("-STOP", 1);
}

#[test]
fn the_last_role_stopped_is_detected_by_role_0() {
    fault_and_recover("-STOP", 2);
}

/// The role restarted after a kill is killed too, as soon as it exists: whether that lands while
/// it starts, while the chain relinks or after, the supervisor tries again and the fleet serves.
#[test]
fn a_role_that_dies_again_during_its_recovery_is_restarted_again() {
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "3",
        "--rejoin-timeout-s",
        "20",
    ]);
    let before = greedy(&s);
    let first = s.children();
    let victim = first[0];
    s.signal("-KILL", victim);
    let t0 = Instant::now();
    let again = loop {
        let now = s.children();
        if let Some(&p) = now.iter().find(|p| !first.contains(p)) {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no role was restarted"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    s.signal("-KILL", again);
    until(&s.url, Duration::from_secs(40), |code, _| code == 200);
    assert_eq!(greedy(&s), before, "outputs changed across the recoveries");
    assert!(
        s.stats()["recoveries_total"].as_u64().unwrap() >= 1,
        "{}",
        s.stats()
    );
}

#[test]
fn restarts_are_bounded_then_the_failure_is_permanent() {
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "2",
        "--max-recoveries",
        "1",
    ]);
    for round in 0..2 {
        let kid = s.children()[0];
        s.signal("-KILL", kid);
        until(&s.url, Duration::from_secs(20), |code, _| code == 503);
        if round == 0 {
            until(&s.url, Duration::from_secs(30), |code, _| code == 200);
        }
    }
    let limit = Duration::from_secs(20);
    until(&s.url, limit, |_, v| v["status"] == "failed");
    let (code, v) = health(&s.url);
    assert_eq!(code, 503);
    assert!(
        v["error"].as_str().unwrap().contains("--max-recoveries"),
        "{v}"
    );
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/v1/completions", s.url))
        .json(&json!({"prompt": "x", "max_tokens": 2}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert!(
        !r.headers().contains_key("retry-after"),
        "a permanent failure"
    );
}

#[test]
fn a_role_restarted_by_hand_rejoins_a_fleet_file_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let (fleet, mut roles) = local_fleet_file(dir.path());
    let s = serve_fleet(&fleet);
    let before = greedy(&s);
    let (want, held) = hold(&s);
    let _ = roles.0[1].kill();
    let _ = roles.0[1].wait();
    until(&s.url, Duration::from_secs(20), |code, _| code == 503);
    // role 0 cannot restart a role on another host: it waits; the operator restarts it
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(health(&s.url).1["status"], "recovering");
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/v1/completions", s.url))
        .json(&json!({"prompt": "x", "max_tokens": 2}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "2");
    roles.0[1] = role(2, &fleet, None);
    until(&s.url, Duration::from_secs(30), |code, _| code == 200);
    held_streams_survived(&s, held, &want);
    assert_eq!(greedy(&s), before);
}

#[test]
fn a_cut_link_between_namespaces_is_detected_and_the_chain_relinks_when_it_returns() {
    let n = (std::process::id() % 200) as u8 + 20;
    let ns = match Netns::create(n) {
        Ok(ns) => ns,
        Err(why) => {
            return skip(
                "a_cut_link_between_namespaces",
                "MOEFLEET_REQUIRE_NETNS",
                &format!("cannot make a network namespace pair here ({why})"),
            );
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let (here, there) = (format!("10.77.{n}.1"), format!("10.77.{n}.2"));
    let addrs = vec![
        format!("{here}:{}", free_port()),
        format!("{there}:{}", 20000 + n as u16),
        format!("{here}:{}", free_port()),
    ];
    let fleet = write_fleet(dir.path(), &addrs);
    let _roles = Reap(vec![role(1, &fleet, Some(&ns.name)), role(2, &fleet, None)]);
    let s = serve_fleet(&fleet);
    let before = greedy(&s);
    let (want, held) = hold(&s);
    assert!(ip(&format!("-n {} link set {} down", ns.name, ns.peer_if)));
    let detect = until(&s.url, Duration::from_secs(20), |code, _| code == 503);
    eprintln!("cut link detected after {detect:?}");
    assert!(
        detect <= Duration::from_secs_f64(STALL_S + 1.0),
        "{detect:?}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(health(&s.url).1["status"], "recovering");
    assert!(ip(&format!("-n {} link set {} up", ns.name, ns.peer_if)));
    let back = until(&s.url, Duration::from_secs(30), |code, _| code == 200);
    eprintln!("ready {back:?} after the link came back");
    held_streams_survived(&s, held, &want);
    assert_eq!(greedy(&s), before);
}

/// Past its replay budget a stream ends with the chain's error, as streams did before they
/// survived; the fleet recovers all the same.
#[test]
fn a_stream_past_its_replay_budget_ends_with_the_error() {
    let stall = stall_arg();
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "3",
        "--link-stall-s",
        &stall,
        "--context",
        "4096",
        "--stream-replays",
        "0",
    ]);
    let mut held = streamed(&s, &held_requests()[..1]).pop().unwrap();
    s.signal("-KILL", s.children()[0]);
    let mut body = String::from_utf8(std::mem::take(&mut held.head)).unwrap();
    held.rest.read_to_string(&mut body).unwrap();
    assert!(
        body.contains("role ") && body.contains("\"error\""),
        "the stream ended without the error: ...{}",
        &body[body.len().saturating_sub(300)..]
    );
    until(&s.url, Duration::from_secs(30), |code, _| code == 200);
    let st = s.stats();
    assert_eq!(
        (
            st["streams_lost_total"].as_u64(),
            st["streams_resumed_total"].as_u64()
        ),
        (Some(1), Some(0)),
        "{st}"
    );
}

/// Held streams wait for the chain at most `--resume-deadline-s`: a role of a fleet-file fleet
/// that is not restarted within it ends them with the error (naming the deadline); restarted
/// later, the fleet serves again.
#[test]
fn held_streams_end_with_the_error_past_the_resume_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let (fleet, mut roles) = local_fleet_file(dir.path());
    let s = serve_fleet_with(&fleet, &["--resume-deadline-s", "1.5"]);
    let before = greedy(&s);
    let mut held = streamed(&s, &held_requests()[..1]).pop().unwrap();
    let t0 = Instant::now();
    let _ = roles.0[1].kill();
    let _ = roles.0[1].wait();
    let mut body = String::from_utf8(std::mem::take(&mut held.head)).unwrap();
    held.rest.read_to_string(&mut body).unwrap();
    let waited = t0.elapsed();
    assert!(
        body.contains("--resume-deadline-s"),
        "the stream ended without the deadline's error: ...{}",
        &body[body.len().saturating_sub(300)..]
    );
    assert!(
        waited >= Duration::from_secs_f64(1.4) && waited < Duration::from_secs(10),
        "held {waited:?} against a deadline of 1.5 s"
    );
    assert_eq!(health(&s.url).1["status"], "recovering");
    roles.0[1] = role(2, &fleet, None);
    until(&s.url, Duration::from_secs(30), |code, _| code == 200);
    assert_eq!(greedy(&s), before);
    assert_eq!(s.stats()["streams_lost_total"], 1);
}
