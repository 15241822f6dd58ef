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
//! `MOEFLEET_REQUIRE_NETNS=1`.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::fleet::{
    fleet_args, free_port, greedy, health, ip, moefleet, until, write_fleet_with_spares, Netns,
    Reap,
};
use common::held::{held_requests, held_streams_survived, streamed, uninterrupted};
use common::server::Server;
use common::skip;

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
    let fleet = write_fleet_with_spares(dir.path(), &addrs, &[spare.clone()]);
    let log = dir.path().join("role1.log");
    let mut original = {
        let mut args = vec!["role".to_string(), "--rank".into(), "1".into()];
        args.extend(fleet_args(&fleet));
        let stderr = Stdio::from(std::fs::File::create(&log).unwrap());
        Reap(vec![moefleet(&args, Some(&gone.name), stderr)])
    };
    let _others = Reap(vec![
        common::fleet::role(2, &fleet, None),
        moefleet(
            &["spare".to_string(), "--listen".into(), spare.clone()],
            Some(&spare_ns.name),
            Stdio::null(),
        ),
    ]);
    let mut args = fleet_args(&fleet);
    args.extend(["--spare-after-s".to_string(), "2".into()]);
    let s = Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let before = greedy(&s);
    let want: Vec<_> = held_requests()
        .iter()
        .map(|r| uninterrupted(&s, r))
        .collect();
    let held = streamed(&s, &held_requests());
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
    // the original is still running, cut off: the spare holds rank 1
    assert!(original.0[0].try_wait().unwrap().is_none());
    assert!(ip(&format!(
        "-n {} link set {} up",
        gone.name, gone.peer_if
    )));
    let t1 = Instant::now();
    let status = loop {
        if let Some(st) = original.0[0].try_wait().unwrap() {
            break st;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(30),
            "the original role 1 is still running 30 s after its host came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{status}: {said}");
    assert!(
        said.contains(&format!("{spare} holds this rank now")),
        "the original left without saying why: {said}"
    );
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
