//! What the harness's process-level tests share: a child killed on drop, the harness binary, and a
//! real `moefleet serve` (built beside it by `cargo test --workspace`) on a free port.

#![allow(clippy::unwrap_used, dead_code)]

pub mod loopback;

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn harness() -> &'static str {
    env!("CARGO_BIN_EXE_moefleet-harness")
}

/// `moefleet serve --preset inkling-nano --roles ROLES` with `extra`, and its URL.
pub fn serve(roles: usize, extra: &[&str]) -> (Kill, String) {
    let exe = Path::new(harness()).with_file_name("moefleet");
    assert!(exe.exists(), "{} is not built", exe.display());
    let mut child = Command::new(exe)
        .args(["serve", "--preset", "inkling-nano", "--port", "0"])
        .args(["--roles", &roles.to_string(), "--context", "1024"])
        .args(extra)
        .env("MOEFLEET_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = std::io::BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in err.lines().map_while(Result::ok) {
            if let Some(at) = l.find("http://") {
                let _ = tx.send(l[at..].trim().to_string());
            }
        }
    });
    let url = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    (Kill(child), url)
}

/// Wait until `url`'s `/health` answers 200 (every role linked and answering), at most `limit`.
pub fn wait_ready(url: &str, limit: Duration) {
    let t0 = std::time::Instant::now();
    let c = reqwest::blocking::Client::new();
    while t0.elapsed() < limit {
        if let Ok(r) = c.get(format!("{url}/health")).send() {
            if r.status().is_success() {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{url} not ready within {limit:?}");
}
