//! The SSE client against each server's framing, over real HTTP: a loopback server answers one
//! request with a stream written by hand from that server's documented chunks (llama-server with
//! and without usage, its completions endpoint with `timings`, vLLM, the OpenAI API, moefleet's `n_tokens`),
//! and the trace record must count exactly the generated tokens.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;

use moefleet_harness::driver::client::{run, Clock, Outcome, RequestSpec};
use moefleet_harness::trace::TraceRecord;

/// Serve `body` as one `text/event-stream` answer to the first request on a loopback port.
fn serve_once(body: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        // read the request head and its JSON body (Content-Length) before answering
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).unwrap();
            req.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&req);
            if let Some(head_end) = text.find("\r\n\r\n") {
                let len = text[..head_end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if req.len() >= head_end + 4 + len {
                    break;
                }
            }
            assert!(n > 0, "client closed before sending its request");
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body.as_bytes()).unwrap();
    });
    url
}

fn sse(chunks: &[&str]) -> String {
    let mut out = String::new();
    for c in chunks {
        out.push_str("data: ");
        out.push_str(c);
        out.push_str("\n\n");
    }
    out.push_str("data: [DONE]\n\n");
    out
}

async fn record(chunks: &[&str]) -> TraceRecord {
    let url = serve_once(sse(chunks));
    let spec = RequestSpec {
        url,
        model: "m".into(),
        prompt: "p".into(),
        max_tokens: 3,
        ignore_eos: true,
        j: 0,
        capture: false,
        history: Vec::new(),
    };
    let mut rec = TraceRecord::default();
    let outcome = run(&reqwest::Client::new(), &Clock::new(), &spec, &mut rec).await;
    assert_eq!(outcome, Outcome::Ok);
    rec
}

fn assert_clean(rec: &TraceRecord, text: &str) {
    assert_eq!(rec.error, None);
    assert_eq!(rec.tokens(), 3);
    assert_eq!(rec.completion_tokens(), Some(3));
    assert_eq!(rec.usage_check, None);
    assert_eq!(rec.text, text);
    assert_eq!(rec.finish_reason.as_deref(), Some("length"));
}

#[tokio::test]
async fn llama_server_chat_with_include_usage() {
    // role-only opener with content null, a finish chunk with an empty delta, then usage (with
    // llama-server's `timings`) in a chunk whose choices are empty
    let rec = record(&[
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"The"}}],"object":"chat.completion.chunk"}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" sky"}}],"object":"chat.completion.chunk"}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" is"}}],"object":"chat.completion.chunk"}"#,
        r#"{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"object":"chat.completion.chunk"}"#,
        r#"{"choices":[],"object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":9,"total_tokens":12},"timings":{"prompt_n":9,"predicted_n":3,"predicted_per_second":100.0}}"#,
    ])
    .await;
    assert_clean(&rec, "The sky is");
    assert_eq!(rec.prompt_tokens, Some(9));
    assert_eq!(rec.events.len(), 5, "every chunk with choices is an event");
}

#[tokio::test]
async fn llama_server_completions_with_usage_on_the_finish_chunk() {
    // llama-server's /v1/completions framing: `text` per token, usage and timings on the finish
    // event (the client reads both endpoints' chunks the same way)
    let rec = record(&[
        r#"{"choices":[{"text":"a","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}"#,
        r#"{"choices":[{"text":"b","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}"#,
        r#"{"choices":[{"text":"c","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}"#,
        r#"{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"object":"text_completion","usage":{"completion_tokens":3,"prompt_tokens":4,"total_tokens":7},"timings":{"predicted_n":3}}"#,
    ])
    .await;
    assert_clean(&rec, "abc");
}

#[tokio::test]
async fn vllm_and_openai_openers_with_empty_content() {
    // vLLM and the OpenAI API open with "content":"" (OpenAI adds "refusal":null) and send usage
    // in a last chunk with empty choices
    let rec = record(&[
        r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"one"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" two"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" three"},"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null}"#,
        r#"{"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#,
    ])
    .await;
    assert_clean(&rec, "one two three");
}

#[tokio::test]
async fn moefleet_chunks_count_their_n_tokens() {
    let rec = record(&[
        r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"ab"},"finish_reason":null}],"n_tokens":2}"#,
        r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":""},"finish_reason":null}],"n_tokens":1}"#,
        r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}],"n_tokens":0}"#,
        r#"{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}"#,
    ])
    .await;
    assert_clean(&rec, "ab");
}

#[tokio::test]
async fn a_token_without_text_is_an_error_that_names_its_chunk() {
    // a token that decoded to no text (an empty delta): usage says 3, the text shows 2
    let rec = record(&[
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}]}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":""}}]}"#,
        r#"{"choices":[{"finish_reason":"length","index":0,"delta":{"content":"b"}}]}"#,
        r#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":1,"total_tokens":4}}"#,
    ])
    .await;
    let e = rec.error.expect("a count mismatch is an error");
    assert!(e.contains("counted 2 tokens, usage says 3"), "{e}");
    assert!(e.contains("chunks [0, 2]"), "{e}");
}

#[tokio::test]
async fn a_server_without_usage_is_recorded_as_unchecked() {
    // llama-server's chat stream when include_usage is not honoured: no usage event at all
    let rec = record(&[
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"x"}}]}"#,
        r#"{"choices":[{"finish_reason":"length","index":0,"delta":{}}]}"#,
    ])
    .await;
    assert_eq!(rec.error, None);
    assert_eq!(rec.tokens(), 1);
    assert_eq!(
        rec.usage_check.as_deref(),
        Some("unchecked: the server sent no usage")
    );
}

#[tokio::test]
async fn an_end_of_text_stop_counts_its_token_on_the_last_chunk() {
    // llama-server stopping on end-of-text: usage counts the stop token, no chunk carries its text
    let rec = record(&[
        r#"{"choices":[{"text":"a","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}"#,
        r#"{"choices":[{"text":"b","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}"#,
        r#"{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}],"object":"text_completion","usage":{"completion_tokens":3,"prompt_tokens":4,"total_tokens":7}}"#,
    ])
    .await;
    assert_eq!(rec.error, None);
    assert_eq!(rec.tokens(), 3);
    assert_eq!(rec.events_mono.last().unwrap().1, 1, "on the finish chunk");
    assert!(rec.usage_check.as_deref().unwrap().contains("end-of-text"));
    // two missing stay errors, at a stop or at a length cut
    for (finish, usage) in [("stop", 4), ("length", 4)] {
        let last = format!(
            r#"{{"choices":[{{"text":"","index":0,"finish_reason":"{finish}"}}],"usage":{{"completion_tokens":{usage},"prompt_tokens":4,"total_tokens":9}}}}"#
        );
        let rec = record(&[
            r#"{"choices":[{"text":"a","index":0,"finish_reason":null}]}"#,
            r#"{"choices":[{"text":"b","index":0,"finish_reason":null}]}"#,
            &last,
        ])
        .await;
        let e = rec.error.expect("still a mismatch");
        assert!(e.contains(&format!("usage says {usage}")), "{finish}: {e}");
    }
}

#[tokio::test]
async fn a_length_cut_counts_a_held_back_last_token_on_the_last_chunk() {
    // llama-server cut at max_tokens while the last token was the first byte of a character: it
    // counts the token in usage but never sends the incomplete character (SmolLM2 writing Spanish)
    let rec = record(&[
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}]}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"?"}}]}"#,
        r#"{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"timings":{"predicted_n":3}}"#,
        r#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":1,"total_tokens":4}}"#,
    ])
    .await;
    assert_eq!(rec.error, None);
    assert_eq!(rec.tokens(), 3);
    assert_eq!(rec.events_mono.last().unwrap().1, 1, "on the last chunk");
    assert!(rec.usage_check.as_deref().unwrap().contains("held back"));
    // the same from a server without llama-server's timings (one that counts its own tokens):
    // a token went missing
    let rec = record(&[
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"a"}}],"n_tokens":1}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"?"}}],"n_tokens":1}"#,
        r#"{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"n_tokens":0}"#,
        r#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":1,"total_tokens":4}}"#,
    ])
    .await;
    let e = rec.error.expect("a missing token");
    assert!(e.contains("counted 2 tokens, usage says 3"), "{e}");
}
