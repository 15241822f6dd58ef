//! Fleets of real processes for the fault tests (`recovery`, `spare`): /health polls, fleet files,
//! roles started by hand (optionally inside a network namespace), and namespaces joined to this
//! one by veth pairs.

#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::server::Server;

/// The link stall bound the tests run with (seconds), to keep them short.
pub const STALL_S: f64 = 1.0;

pub fn health(url: &str) -> (u16, Value) {
    let r = reqwest::blocking::Client::new()
        .get(format!("{url}/health"))
        .timeout(Duration::from_secs(5))
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

/// Poll /health every 20 ms until `want` holds, at most `limit`; the time it took.
pub fn until(url: &str, limit: Duration, want: impl Fn(u16, &Value) -> bool) -> Duration {
    let t0 = Instant::now();
    loop {
        let (code, v) = health(url);
        if want(code, &v) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < limit,
            "health still {code} {v} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn greedy(s: &Server) -> Vec<u64> {
    let (code, v) = s.post(
        "/v1/completions",
        &json!({"prompt": "The river runs", "max_tokens": 8, "ignore_eos": true, "moefleet_debug": true}),
    );
    assert_eq!(code, 200, "{v}");
    v["moefleet"]["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

pub fn stall_arg() -> String {
    STALL_S.to_string()
}

/// The options every process of a fleet-file fleet is started with.
pub fn fleet_args(fleet: &std::path::Path) -> Vec<String> {
    [
        "--preset",
        "inkling-nano",
        "--fleet",
        fleet.to_str().unwrap(),
        "--link-stall-s",
        &stall_arg(),
        "--context",
        "4096",
    ]
    .map(String::from)
    .to_vec()
}

/// `moefleet role --rank K --fleet FILE`, optionally inside a network namespace.
pub fn role(rank: usize, fleet: &std::path::Path, netns: Option<&str>) -> Child {
    let mut args = vec!["role".to_string(), "--rank".into(), rank.to_string()];
    args.extend(fleet_args(fleet));
    moefleet(&args, netns, Stdio::null())
}

/// `moefleet ARGS`, optionally inside a network namespace, its stderr to `stderr`.
pub fn moefleet(args: &[String], netns: Option<&str>, stderr: Stdio) -> Child {
    let exe = env!("CARGO_BIN_EXE_moefleet");
    let mut all: Vec<String> = Vec::new();
    if let Some(ns) = netns {
        all.extend(["netns", "exec", ns, exe].map(String::from));
    }
    all.extend(args.iter().cloned());
    Command::new(if netns.is_some() { "ip" } else { exe })
        .args(&all)
        .env("MOEFLEET_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// Role 0 of a fleet-file fleet.
pub fn serve_fleet(fleet: &std::path::Path) -> Server {
    serve_fleet_with(fleet, &[])
}

/// Role 0 of a fleet-file fleet, with more options.
pub fn serve_fleet_with(fleet: &std::path::Path, more: &[&str]) -> Server {
    let mut args = fleet_args(fleet);
    args.extend(more.iter().map(|a| a.to_string()));
    Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `role`, its stderr written to `log`.
pub fn role_logged(
    rank: usize,
    fleet: &std::path::Path,
    netns: Option<&str>,
    log: &std::path::Path,
) -> Child {
    let mut args = vec!["role".to_string(), "--rank".into(), rank.to_string()];
    args.extend(fleet_args(fleet));
    moefleet(
        &args,
        netns,
        Stdio::from(std::fs::File::create(log).unwrap()),
    )
}

/// `moefleet spare --listen ADDR`, optionally inside a network namespace.
pub fn spare(addr: &str, netns: Option<&str>) -> Child {
    let args = ["spare", "--listen", addr].map(String::from);
    moefleet(&args, netns, Stdio::null())
}

/// Wait up to `limit` for `child` to exit; its status.
pub fn exited(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(t0.elapsed() < limit, "still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn write_fleet(dir: &std::path::Path, addrs: &[String]) -> std::path::PathBuf {
    write_fleet_with_spares(dir, addrs, &[])
}

/// A fleet file with `[[spare]]` entries after the roles.
pub fn write_fleet_with_spares(
    dir: &std::path::Path,
    addrs: &[String],
    spares: &[String],
) -> std::path::PathBuf {
    let mut text = String::new();
    for (rank, a) in addrs.iter().enumerate() {
        text.push_str(&format!("[[role]]\nrank = {rank}\naddr = \"{a}\"\n\n"));
    }
    for a in spares {
        text.push_str(&format!("[[spare]]\naddr = \"{a}\"\n\n"));
    }
    let path = dir.join("fleet.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub struct Reap(pub Vec<Child>);

/// A three-role fleet file on loopback ports in `dir`, with roles 1 and 2 started by hand (role 0
/// is the caller's `serve`).
pub fn local_fleet_file(dir: &std::path::Path) -> (std::path::PathBuf, Reap) {
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let fleet = write_fleet(dir, &addrs);
    let roles = Reap(vec![role(1, &fleet, None), role(2, &fleet, None)]);
    (fleet, roles)
}

impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `ip` with the arguments; whether it succeeded.
pub fn ip(args: &str) -> bool {
    Command::new("ip")
        .args(args.split_whitespace())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A namespace joined to this one by a veth pair (10.77.N.1 here, 10.77.N.2 there); removed on
/// drop. The link is cut from inside (`peer_if` down): this side keeps its route and loses
/// carrier, as with a pulled cable (taking this side down would remove the route, and connections
/// would leave by the default route instead).
pub struct Netns {
    pub name: String,
    host_if: String,
    pub peer_if: String,
}

impl Netns {
    pub fn create(n: u8) -> Result<Netns, String> {
        let name = format!("mfrel{}-{n}", std::process::id());
        let host_if = format!("mfh{}{n}", std::process::id() % 10000);
        let peer_if = format!("mfp{}{n}", std::process::id() % 10000);
        let ns = Netns {
            name: name.clone(),
            host_if: host_if.clone(),
            peer_if: peer_if.clone(),
        };
        let steps = [
            format!("netns add {name}"),
            format!("link add {host_if} type veth peer name {peer_if}"),
            format!("link set {peer_if} netns {name}"),
            format!("addr add 10.77.{n}.1/24 dev {host_if}"),
            format!("link set {host_if} up"),
            format!("-n {name} addr add 10.77.{n}.2/24 dev {peer_if}"),
            format!("-n {name} link set {peer_if} up"),
            format!("-n {name} link set lo up"),
            // other namespaces are reached through this one (the host answers for its addresses)
            format!("-n {name} route add default via 10.77.{n}.1"),
        ];
        for s in &steps {
            if !ip(s) {
                return Err(format!("`ip {s}` failed"));
            }
        }
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        ip(&format!("link del {}", self.host_if));
        ip(&format!("netns del {}", self.name));
    }
}
