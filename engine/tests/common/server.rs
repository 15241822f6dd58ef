//! A real `moefleet serve` process for end-to-end tests: started on a free port, its URL read from
//! its stderr, stopped (SIGINT, then kill) when dropped.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub url: String,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Start `moefleet serve --port 0 ARGS` and wait until /health says ready.
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_moefleet"))
            .arg("serve")
            .args(["--port", "0"])
            .args(args)
            .env("MOEFLEET_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start moefleet serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(at) = line.find("http://") {
                    let _ = tx.send(line[at..].trim().to_string());
                }
                l2.lock().unwrap().push(line);
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!("server did not start: {:?}", log.lock().unwrap());
            }
        };
        let s = Server { child, url, log };
        s.wait_ready(Duration::from_secs(120));
        s
    }

    pub fn wait_ready(&self, limit: Duration) {
        let t0 = Instant::now();
        let c = reqwest::blocking::Client::new();
        while t0.elapsed() < limit {
            if let Ok(r) = c.get(format!("{}/health", self.url)).send() {
                if r.status().is_success() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "fleet not ready within {limit:?}: {:?}",
            self.log.lock().unwrap()
        );
    }

    /// Process ids of the role processes this server started.
    pub fn children(&self) -> Vec<u32> {
        let out = Command::new("pgrep")
            .args(["-P", &self.child.id().to_string()])
            .output()
            .expect("pgrep");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    pub fn signal(&self, sig: &str, pid: u32) {
        let _ = Command::new("kill")
            .args([sig, &pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }

    pub fn stats(&self) -> serde_json::Value {
        reqwest::blocking::get(format!("{}/api/stats", self.url))
            .unwrap()
            .json()
            .unwrap()
    }

    /// Wait (at most `limit`) until no slot is held and no request is in flight, and return the
    /// stats then. A slot is freed once its last rows are back from the chain, which can be just
    /// after the client read the stream's end, so the gauges reach 0 soon after, not at once.
    pub fn wait_idle(&self, limit: Duration) -> serde_json::Value {
        let t0 = std::time::Instant::now();
        loop {
            let st = self.stats();
            if st["slots_busy"] == 0 && st["requests_in_flight"] == 0 {
                return st;
            }
            assert!(t0.elapsed() < limit, "not idle after {limit:?}: {st}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// POST a streamed completion; the response as it begins (status 200 checked).
    pub fn post_stream(&self, body: &serde_json::Value) -> reqwest::blocking::Response {
        let r = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap()
            .post(format!("{}/v1/completions", self.url))
            .json(body)
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r
    }

    /// POST a streamed completion and return once its first bytes have arrived (the request is
    /// then in flight on the fleet).
    pub fn stream_started(&self, body: &serde_json::Value) -> reqwest::blocking::Response {
        let mut r = self.post_stream(body);
        let mut first = [0u8; 64];
        let _ = std::io::Read::read(&mut r, &mut first).unwrap();
        r
    }

    pub fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let r = reqwest::blocking::Client::new()
            .post(format!("{}{path}", self.url))
            .json(body)
            .timeout(Duration::from_secs(300))
            .send()
            .unwrap();
        let code = r.status().as_u16();
        (code, r.json().unwrap_or(serde_json::Value::Null))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // what role 0 said, for the failure's report
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!("role 0's stderr ({} lines):", log.len());
            for line in log.iter().rev().take(60).rev() {
                eprintln!("  {line}");
            }
        }
        self.signal("-INT", self.child.id());
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read an SSE body into its `data:` payloads, in order.
pub fn sse_events(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .map(|s| s.trim().to_string())
        .collect()
}
