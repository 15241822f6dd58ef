//! A loopback OpenAI-compatible server for the load tests: chunks of several tokens (as a
//! speculating server sends them), optionally computed one at a time across every request (as a
//! server with one core computes them), and the harness's `run` against it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// A one-core server's queue of chunks to compute: each asks with the channel it waits on.
pub type Core = mpsc::Sender<mpsc::Sender<()>>;

/// Chunks per answer, tokens per chunk, and the pause before each chunk.
pub const CHUNKS: usize = 4;
pub const PER_CHUNK: u32 = 3;
pub const PAUSE: Duration = Duration::from_millis(30);

/// Answer one HTTP request on `s`: `/v1/models`, or a chat completion streamed as CHUNKS chunks
/// of PER_CHUNK tokens (moefleet's `n_tokens` field), PAUSE apart, with usage. With a `core`, each
/// chunk is computed there: one chunk at a time across every request, in the order asked, as a
/// server with one core computes them.
pub fn answer(mut s: TcpStream, core: Option<Core>) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut head = String::new();
    let mut len = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    if head.starts_with("GET /v1/models") {
        let b = r#"{"object":"list","data":[{"id":"chunky","object":"model"}]}"#;
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
            b.len()
        );
        return;
    }
    if !head.starts_with("POST /v1/chat/completions") {
        let _ = write!(
            s,
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        return;
    }
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    );
    let data = |s: &mut TcpStream, v: Value| {
        let _ = write!(s, "data: {v}\n\n");
        let _ = s.flush();
    };
    for _ in 0..CHUNKS {
        match &core {
            Some(c) => {
                let (done, wait) = mpsc::channel();
                c.send(done).unwrap();
                wait.recv().unwrap();
            }
            None => std::thread::sleep(PAUSE),
        }
        data(
            &mut s,
            serde_json::json!({"choices": [{"index": 0, "delta": {"content": "a b c"}}], "n_tokens": PER_CHUNK}),
        );
    }
    let n = CHUNKS as u32 * PER_CHUNK;
    data(
        &mut s,
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
    );
    data(
        &mut s,
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5}}),
    );
    let _ = write!(s, "data: [DONE]\n\n");
}

/// A loopback server answering every connection on its own thread (with `serial`, computing one
/// chunk at a time across them all).
pub fn loopback_server(serial: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let core = serial.then(|| {
        let (tx, rx) = mpsc::channel::<mpsc::Sender<()>>();
        std::thread::spawn(move || {
            for done in rx {
                std::thread::sleep(PAUSE);
                let _ = done.send(());
            }
        });
        tx
    });
    std::thread::spawn(move || {
        for s in listener.incoming().map_while(Result::ok) {
            let core = core.clone();
            std::thread::spawn(move || answer(s, core));
        }
    });
    url
}

pub fn chunky_server() -> String {
    loopback_server(false)
}

pub fn run(url: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    Command::new(super::harness())
        .args(["run", "--url", url, "--out", out.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

/// Eight requests (two of them warm-up) of 12 tokens as a Poisson process at 50 requests/s.
pub const POISSON: [&str; 10] = [
    "--load",
    "poisson",
    "--rate",
    "50",
    "--requests",
    "8",
    "--max-tokens",
    "12",
    "--warmup",
    "2",
];

pub fn summary(out: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

/// A small sweep: one at a time, all at once and one rate between, four requests a step.
pub const SWEEP: [&str; 6] = ["--load", "sweep", "--rates", "1", "--requests", "4"];
