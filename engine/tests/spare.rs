//! A spare host takes the rank of a host that is gone. Role 1 runs in one network namespace, a
//! spare (`moefleet spare`) in another, role 0 and role 2 here; the fleet file lists the spare.
//! With two streams in flight, role 1's namespace is cut off entirely (its end of the veth pair
//! down, the process left running, as a machine that slept or lost its network). Past
//! `--spare-after-s`, role 0 finds rank 1 unreachable, hands it to the spare and links the chain
//! through it: both streams carry exactly the tokens and logits hashes of an uninterrupted run
//! (greedy and seeded) and later requests are served as before. When the namespace comes back,
//! the original role 1 asks role 0 for the roster, finds its rank held by the spare and leaves
//! with an error saying so, rather than linking twice; the chain goes on serving. Needs network
//! namespaces (`ip netns`, root): skipped where they cannot be made, a failure with
//! `MOEFLEET_REQUIRE_NETNS=1`. On loopback (everywhere): a killed role's address refuses
//! connections, the spare takes it, and the original restarted by hand is refused; and a spare
//! answers a launch that is not for it with an error and goes on waiting.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use common::fleet::{
    exited, free_port, greedy, health, ip, role, role_logged, serve_fleet_with,
    spare as spare_process, until, write_fleet_with_spares, Netns, Reap,
};
use common::held::{held_streams_survived, hold};
use common::skip;
use serde_json::json;

#[test]
fn a_spare_takes_the_rank_of_an_unreachable_host_and_the_late_original_is_refused() {
    let n = (std::process::id() % 100) as u8 * 2 + 21;
    let made = Netns::create(n).and_then(|a| Netns::create(n + 1).map(|b| (a, b)));
    let (gone, spare_ns) = match made {
        Ok(pair) => pair,
        Err(why) => {
            return skip(
                "a_spare_takes_the_rank_of_an_unreachable_host",
                "MOEFLEET_REQUIRE_NETNS",
                &format!("cannot make two network namespaces here ({why})"),
            )
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let here = format!("10.77.{n}.1");
    let addrs = vec![
        format!("{here}:{}", free_port()),
        format!("10.77.{n}.2:{}", 20000 + n as u16),
        format!("{here}:{}", free_port()),
    ];
    let spare = format!("10.77.{}.2:{}", n + 1, 20001 + n as u16);
    let fleet = write_fleet_with_spares(dir.path(), &addrs, std::slice::from_ref(&spare));
    let log = dir.path().join("role1.log");
    let mut original = Reap(vec![role_logged(1, &fleet, Some(&gone.name), &log)]);
    let _others = Reap(vec![
        role(2, &fleet, None),
        spare_process(&spare, Some(&spare_ns.name)),
    ]);
    let s = serve_fleet_with(&fleet, &["--spare-after-s", "2"]);
    let before = greedy(&s);
    let (want, held) = hold(&s);
    assert!(ip(&format!(
        "-n {} link set {} down",
        gone.name, gone.peer_if
    )));
    let t0 = Instant::now();
    until(&s.url, Duration::from_secs(20), |code, _| code == 503);
    until(&s.url, Duration::from_secs(60), |code, _| code == 200);
    eprintln!("served again {:?} after the host was cut off", t0.elapsed());
    held_streams_survived(&s, held, &want);
    assert_eq!(greedy(&s), before, "the spare computes what role 1 did");
    let st = s.stats();
    assert_eq!(st["roles_moved_total"], 1, "{st}");
    assert_eq!(st["roles"][1], serde_json::json!(spare), "{st}");
    // the original is still running, cut off: the spare holds rank 1
    assert!(original.0[0].try_wait().unwrap().is_none());
    assert!(ip(&format!(
        "-n {} link set {} up",
        gone.name, gone.peer_if
    )));
    let t1 = Instant::now();
    left_saying_why(&mut original.0[0], &log, &spare);
    eprintln!(
        "the original left {:?} after its host came back",
        t1.elapsed()
    );
    assert_eq!(health(&s.url).0, 200);
    assert_eq!(
        greedy(&s),
        before,
        "the chain still serves through the spare"
    );
    assert_eq!(
        s.stats()["recoveries_total"].as_u64().map(|r| r >= 1),
        Some(true)
    );
}

/// A replaced role, its host back (or restarted by hand), exits within 30 s with a failure and
/// the error naming the spare that holds its rank (its stderr is `log`).
fn left_saying_why(original: &mut std::process::Child, log: &std::path::Path, spare: &str) {
    let status = exited(original, Duration::from_secs(30));
    let said = std::fs::read_to_string(log).unwrap();
    assert!(!status.success(), "{status}: {said}");
    assert!(
        said.contains(&format!("{spare} holds this rank now")),
        "the original left without saying why: {said}"
    );
}

/// A spare that refuses whatever it is handed (an error line), keeping the launch it was sent.
fn refusing_spare() -> (String, std::thread::JoinHandle<String>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let kept = std::thread::spawn(move || {
        let (mut conn, _) = l.accept().unwrap();
        let mut line = String::new();
        BufReader::new(conn.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        writeln!(conn, "{{\"error\": \"this spare refuses\"}}").unwrap();
        line
    });
    (addr, kept)
}

/// Rank 2's process is killed and its address refuses connections; the spares listed are one that
/// refuses and then a real one. Past --spare-after-s role 0 tries both, the real one takes rank 2,
/// the held streams carry on with their own tokens, and the original restarted by hand is refused.
/// The launch the refusing spare was sent, given to a third spare, is refused there: it names
/// another address.
#[test]
fn on_loopback_a_spare_takes_a_dead_roles_rank_and_the_restarted_original_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let (refuses, kept) = refusing_spare();
    let spare = format!("127.0.0.1:{}", free_port());
    let fleet = write_fleet_with_spares(dir.path(), &addrs, &[refuses.clone(), spare.clone()]);
    let mut roles = Reap(vec![
        role(1, &fleet, None),
        role(2, &fleet, None),
        spare_process(&spare, None),
    ]);
    let s = serve_fleet_with(&fleet, &["--spare-after-s", "1"]);
    let before = greedy(&s);
    let (want, held) = hold(&s);
    let _ = roles.0[1].kill();
    let _ = roles.0[1].wait();
    until(&s.url, Duration::from_secs(20), |code, _| code == 503);
    until(&s.url, Duration::from_secs(60), |code, _| code == 200);
    held_streams_survived(&s, held, &want);
    assert_eq!(greedy(&s), before, "the spare computes what role 2 did");
    let st = s.stats();
    assert_eq!(
        (&st["roles"], &st["roles_moved_total"]),
        (&json!([addrs[0], addrs[1], spare]), &json!(1)),
        "{st}"
    );
    // what the refusing spare was handed: rank 2, to listen on its address, next role 0
    let launch: serde_json::Value = serde_json::from_str(&kept.join().unwrap()).unwrap();
    assert_eq!(
        (&launch["rank"], &launch["listen"], &launch["next"]),
        (&json!(2), &json!(refuses), &json!(addrs[0]))
    );
    // the original restarted by hand on its old address asks the roster and leaves
    let log = dir.path().join("role2.log");
    let mut again = Reap(vec![role_logged(2, &fleet, None, &log)]);
    left_saying_why(&mut again.0[0], &log, &spare);
    assert_eq!(
        greedy(&s),
        before,
        "the chain still serves through the spare"
    );
    // a third spare, handed that launch (for another address), refuses it and goes on waiting
    let third = format!("127.0.0.1:{}", free_port());
    let mut waiting = Reap(vec![spare_process(&third, None)]);
    let said = answer_to(&third, &launch.to_string());
    assert!(
        said.contains("\"error\"") && said.contains(&format!("this spare is {third}")),
        "{said}"
    );
    let said = answer_to(&third, "hello");
    assert!(
        said.contains("\"error\"") && said.contains("RoleLaunch"),
        "{said}"
    );
    assert!(
        waiting.0[0].try_wait().unwrap().is_none(),
        "the spare stopped waiting"
    );
}

/// What a spare says to one line sent to it.
fn answer_to(spare: &str, line: &str) -> String {
    let t0 = Instant::now();
    let mut conn = loop {
        match std::net::TcpStream::connect(spare) {
            Ok(c) => break c,
            Err(e) => {
                assert!(t0.elapsed() < Duration::from_secs(10), "{spare}: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    writeln!(conn, "{line}").unwrap();
    let mut said = String::new();
    BufReader::new(conn).read_line(&mut said).unwrap();
    said
}
