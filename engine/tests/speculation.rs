//! Speculative injection (ARCHITECTURE.md §3.3) against real fleets: with speculation on, every
//! output equals greedy decoding with it off, token for token and in the hash of every sampled
//! logit row, for every proposer alone and together, including one that is always right (a
//! replayed oracle) and one that is always wrong (so every proposal is rewound). Bit-equal logits
//! after rewinds are the state check: any difference left in any role's KV caches or convolution
//! histories would change the logits of every later position. Also: a second request admitted
//! mid-speculation, a role dying with proposals in flight (the stream is held through the recovery
//! and carries on with greedy decoding's tokens and bits), and the phrase table's files.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::held;
use common::server::Server;
use moefleet_engine::generate::generate;
use moefleet_engine::model::{generate as synth, ForwardOptions, Model, ModelConfig, SynthSpec};
use moefleet_engine::pipeline::wire::logits_hash;
use moefleet_engine::serve::request::render_chat;
use moefleet_engine::tokenizer::TextTokenizer;
use serde_json::{json, Value};

/// (ids, logit-row hashes) of a generation.
type Output = (Vec<u32>, Vec<String>);

fn nano() -> Model {
    Model::new(
        synth(&SynthSpec::whole(
            ModelConfig::preset("inkling-nano").unwrap(),
            7,
        ))
        .unwrap(),
        ForwardOptions::default(),
    )
}

fn reference(model: &Model, prompt: &[u32], n: usize) -> Output {
    let g = generate(model, prompt, n, 8, None, true).unwrap();
    let hashes = g
        .logits
        .iter()
        .map(|l| format!("{:016x}", logits_hash(l)))
        .collect();
    (g.tokens, hashes)
}

/// One served generation: its output and the server's speculation summary.
fn served(s: &Server, prompt: &[u32], n: usize) -> (Output, Value) {
    let (code, v) = s.post(
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": n, "moefleet_debug": true, "ignore_eos": true}),
    );
    assert_eq!(code, 200, "{v}");
    let m = &v["moefleet"];
    let ids = m["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let hashes = m["logits_hash"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    ((ids, hashes), m["speculation"].clone())
}

/// The chat prompts of two prompts per family, as token ids; then one that repeats itself, so
/// that the suffix proposer has something to match.
fn family_prompts() -> Vec<Vec<u32>> {
    let tk = TextTokenizer::embedded().unwrap();
    let mut v: Vec<Vec<u32>> = family_texts()
        .iter()
        .map(|p| {
            tk.encode(&render_chat(&[("user".into(), p.clone())]))
                .unwrap()
        })
        .collect();
    v.push([10, 11, 12, 13, 14].repeat(3)[..14].to_vec());
    v
}

/// Prompts of the twelve families (MEASUREMENTS.md §2.1) from the spec's templates with fixed
/// words, two topics each where the template has one (the harness crate owns the generator).
fn family_texts() -> Vec<String> {
    let topics = ["tides", "a lighthouse"];
    let mut v = Vec::new();
    for t in topics {
        v.push(format!(
            "Explain {t} to a curious ten-year-old in one short paragraph."
        ));
        v.push(
            "Write a Rust function that merges two sorted lists. Include a short comment.".into(),
        );
        v.push("A shop sells pencils at 32 cents each and notebooks at 302 cents each. How much do 9 pencils and 4 notebooks cost? Show the steps.".into());
        v.push(format!(
            "Write the opening paragraph of a short story that takes place near {t}."
        ));
        v.push(format!(
            "List five practical tips about {t}, one line each."
        ));
        v.push(format!(
            "Compare {t} and jazz in a short table, then give a one-sentence conclusion."
        ));
        v.push(format!("Rewrite this sentence to sound more formal: 'So basically {t} is kind of a big deal and people should really care more about it.'"));
        v.push(format!(
            "What are the three most important facts about {t}? Answer briefly."
        ));
        v.push(format!("Write a four-line poem about {t}."));
        v.push(format!("Give step-by-step instructions for a beginner who wants to learn about {t} this weekend."));
        v.push(format!("Translate into French and then into Spanish: 'The history of {t} is longer than most people think.'"));
        v.push(
            "Is it true that bats are blind? Answer yes or no, then justify in two sentences."
                .into(),
        );
    }
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| seen.insert(p.clone()));
    v
}

const N: usize = 40;

/// Every prompt served twice in a row (the phrase table learns from the first pass) by a fleet
/// started with `args`; every output must equal the reference. Returns the summed speculation.
fn run_config(args: &[&str], prompts: &[Vec<u32>], want: &[Output]) -> [u64; 4] {
    let mut all = vec![
        "--preset",
        "inkling-nano",
        "--roles",
        "3",
        "--seed",
        "7",
        "--speculate",
    ];
    all.extend_from_slice(args);
    let s = Server::start(&all);
    let mut sum = [0u64; 4];
    for pass in 0..2 {
        for (p, w) in prompts.iter().zip(want) {
            let (got, spec) = served(&s, p, N);
            assert_eq!(
                &got, w,
                "{args:?}, pass {pass}: output differs from greedy decoding"
            );
            for (i, k) in ["proposed", "accepted", "rewinds", "drafts"]
                .iter()
                .enumerate()
            {
                sum[i] += spec[k].as_u64().unwrap();
            }
        }
    }
    sum
}

#[test]
fn every_proposer_alone_and_together_leaves_the_output_unchanged() {
    let model = nano();
    let prompts = family_prompts();
    let want: Vec<Output> = prompts.iter().map(|p| reference(&model, p, N)).collect();
    // the oracle knows every sequence; the wrong one proposes the right token plus one
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay.json");
    let seqs: Vec<Vec<u32>> = prompts
        .iter()
        .zip(&want)
        .map(|(p, w)| p.iter().chain(&w.0).copied().collect())
        .collect();
    std::fs::write(&replay, serde_json::to_vec(&seqs).unwrap()).unwrap();
    let r = replay.to_str().unwrap();

    let right = run_config(
        &["--spec-replay", r, "--proposers", "suffix"],
        &prompts,
        &want,
    );
    assert!(
        right[0] > 0 && right[1] == right[0] && right[2] == 0,
        "oracle: {right:?}"
    );
    let wrong = run_config(
        &[
            "--spec-replay",
            r,
            "--spec-replay-wrong",
            "--proposers",
            "suffix",
            "--spec-min-acceptance",
            "0",
            // the deepest chain a rewind can undo: every sliding ring rewinds its whole slack
            "--spec-depth",
            "65",
        ],
        &prompts,
        &want,
    );
    // wrong proposals queue behind wrong proposals, so one rewind discards a whole chain
    assert!(
        wrong[1] == 0 && wrong[0] > wrong[2] && wrong[2] > 0,
        "always wrong: {wrong:?}"
    );
    let phrase = run_config(&["--proposers", "phrase"], &prompts, &want);
    assert!(
        phrase[1] > 0,
        "the phrase table learned nothing from the first pass: {phrase:?}"
    );
    let suffix = run_config(&["--proposers", "suffix"], &prompts, &want);
    assert!(suffix[0] > 0, "suffix proposed nothing: {suffix:?}");
    // a draft of other weights is wrong; the served model's own weights as the draft are right
    let draft = run_config(
        &[
            "--proposers",
            "draft",
            "--draft-seed",
            "8",
            "--spec-min-acceptance",
            "0",
        ],
        &prompts,
        &want,
    );
    assert!(draft[0] > 0 && draft[2] > 0, "draft: {draft:?}");
    // the acceptance gate benches the wrong draft: far fewer proposals, the output unchanged
    let gated = run_config(
        &["--proposers", "draft", "--draft-seed", "8"],
        &prompts,
        &want,
    );
    assert!(gated[0] * 4 < draft[0], "gate: {gated:?} against {draft:?}");
    let itself = run_config(
        &["--proposers", "draft", "--draft-seed", "7"],
        &prompts,
        &want,
    );
    assert!(
        itself[1] > 0 && itself[2] == 0,
        "draft of the same weights: {itself:?}"
    );
    let all = run_config(
        &["--proposers", "suffix,phrase,draft", "--draft-seed", "8"],
        &prompts,
        &want,
    );
    assert!(all[0] > 0, "together: {all:?}");
    eprintln!("proposed/accepted/rewinds/drafts: oracle {right:?}, wrong {wrong:?}, phrase {phrase:?}, suffix {suffix:?}, draft {draft:?}, draft of itself {itself:?}, gated draft {gated:?}, all {all:?}");
}

#[test]
fn eleven_roles_with_the_phrase_table_match_greedy_decoding() {
    let c = ModelConfig::preset("inkling-mini").unwrap();
    let model = Model::new(
        synth(&SynthSpec::whole(c, 7)).unwrap(),
        ForwardOptions::default(),
    );
    let prompts: Vec<Vec<u32>> = family_prompts().into_iter().take(3).collect();
    let want: Vec<Output> = prompts.iter().map(|p| reference(&model, p, 32)).collect();
    let s = Server::start(&[
        "--preset",
        "inkling-mini",
        "--roles",
        "11",
        "--speculate",
        "--proposers",
        "suffix,phrase",
    ]);
    let mut accepted = 0;
    for _ in 0..2 {
        for (p, w) in prompts.iter().zip(&want) {
            let (got, spec) = served(&s, p, 32);
            assert_eq!(&got, w);
            accepted += spec["accepted"].as_u64().unwrap();
        }
    }
    assert!(accepted > 0);
}

#[test]
fn a_second_request_mid_speculation_changes_neither_output() {
    let model = nano();
    let prompts = family_prompts();
    let (a, b) = (&prompts[0], &prompts[1]);
    let (wa, wb) = (reference(&model, a, 300), reference(&model, b, 60));
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay.json");
    let seqs = vec![
        a.iter().chain(&wa.0).copied().collect::<Vec<u32>>(),
        b.iter().chain(&wb.0).copied().collect(),
    ];
    std::fs::write(&replay, serde_json::to_vec(&seqs).unwrap()).unwrap();
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "3",
        "--speculate",
        "--spec-replay",
        replay.to_str().unwrap(),
    ]);
    let (ga, gb) = std::thread::scope(|sc| {
        let ha = sc.spawn(|| served(&s, a, 300));
        std::thread::sleep(Duration::from_millis(30));
        let hb = sc.spawn(|| served(&s, b, 60));
        (ha.join().unwrap(), hb.join().unwrap())
    });
    assert_eq!(ga.0, wa);
    assert_eq!(gb.0, wb);
    // the first request did speculate (alone before the second arrived, and after it left)
    assert!(ga.1["proposed"].as_u64().unwrap() > 0, "{}", ga.1);
}

#[test]
fn a_role_dying_with_proposals_in_flight_holds_the_stream() {
    let model = nano();
    let prompt = &family_prompts()[0];
    let w = reference(&model, prompt, 900);
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay.json");
    let seq: Vec<u32> = prompt.iter().chain(&w.0).copied().collect();
    std::fs::write(&replay, serde_json::to_vec(&vec![seq]).unwrap()).unwrap();
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "3",
        "--speculate",
        "--spec-replay",
        replay.to_str().unwrap(),
    ]);
    // Stream; once the first chunk is here, freeze a role (SIGSTOP) and kill it only when role 0
    // reports proposals in flight twice, 50 ms apart, with no token delivered between: frozen
    // behind the stopped role, those proposals are sent and unverified when it dies. A freeze
    // between proposals is thawed and tried again (a fixed sleep before the kill raced the
    // fleet, which with the oracle's proposals all accepted can finish 900 tokens in 150 ms).
    let r = held::start(
        &s,
        &json!({"prompt": prompt, "max_tokens": 900, "ignore_eos": true, "stream": true, "moefleet_debug": true}),
    );
    let kids = s.children();
    assert!(!kids.is_empty());
    let frozen = |s: &Server| {
        let st = s.stats();
        (
            st["proposals_in_flight"].as_u64().unwrap(),
            st["tokens_total"].as_u64().unwrap(),
        )
    };
    let mut seen = Vec::new();
    let in_flight = loop {
        assert!(
            seen.len() < 20,
            "no proposals in flight while the role was stopped, in 20 tries (in flight, tokens \
             delivered, 50 ms later): {seen:?}"
        );
        s.signal("-STOP", kids[0]);
        std::thread::sleep(Duration::from_millis(50));
        let a = frozen(&s);
        std::thread::sleep(Duration::from_millis(50));
        let b = frozen(&s);
        seen.push((a, b));
        if a == b && a.0 > 0 {
            break a.0;
        }
        s.signal("-CONT", kids[0]);
        std::thread::sleep(Duration::from_millis(5));
    };
    s.signal("-KILL", kids[0]);
    eprintln!("killed with {in_flight} proposals in flight");
    let t0 = Instant::now();
    let got = held::stream_tokens(r);
    assert!(t0.elapsed() < Duration::from_secs(60), "the request hung");
    // held through the recovery, it carries greedy decoding's tokens and logits bits, none twice
    let want: Vec<(u64, String)> = w.0.iter().map(|&t| u64::from(t)).zip(w.1.clone()).collect();
    let first = got.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        got == want,
        "{} tokens where greedy decoding gives {}, first difference at {first:?}",
        got.len(),
        want.len()
    );
    // the proposals in flight when the chain broke are not counted as verified
    let st = s.stats();
    assert_eq!(st["proposals_in_flight"], 0, "{st}");
    assert_eq!(st["streams_resumed_total"], 1, "{st}");
    let replay = &st["speculation"]["replay"];
    let verified = replay["accepted"].as_u64().unwrap() + replay["rewinds"].as_u64().unwrap();
    assert!(
        replay["proposed"].as_u64().unwrap() >= verified + in_flight,
        "{st}"
    );
}

#[test]
fn speculation_needs_a_pipeline_of_at_least_two_roles() {
    let out = Command::new(env!("CARGO_BIN_EXE_moefleet"))
        .args(["serve", "--port", "0", "--preset", "inkling-nano"])
        .args(["--roles", "1", "--speculate"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--speculate") && err.contains("roles"),
        "{err}"
    );
}

#[test]
fn the_phrase_table_is_saved_loaded_and_bad_files_are_refused() {
    let model = nano();
    let prompt = &family_prompts()[2];
    let w = reference(&model, prompt, N);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("phrases.bin");
    let f = file.to_str().unwrap();
    let args = [
        "--preset",
        "inkling-nano",
        "--roles",
        "2",
        "--speculate",
        "--proposers",
        "phrase",
        "--phrase-table",
        f,
    ];
    {
        let s = Server::start(&args);
        let (got, spec) = served(&s, prompt, N);
        assert_eq!(got, w);
        assert_eq!(spec["accepted"], 0, "a fresh table knows nothing");
        let (code, v) = s.post("/api/phrases/save", &json!({}));
        assert_eq!(code, 200, "{v}");
        assert!(file.exists());
    } // SIGINT: saved again on shutdown
      // a new server loads it: the first pass is already accelerated
    {
        let s = Server::start(&args);
        let (got, spec) = served(&s, prompt, N);
        assert_eq!(got, w);
        assert!(spec["accepted"].as_u64().unwrap() > 0, "{spec}");
        // the fleet's counters say the same
        let st = s.stats();
        let phrase = &st["speculation"]["phrase"];
        assert_eq!(phrase["accepted"], spec["accepted"], "{st}");
        assert!(phrase["mean_accepted_length"].as_f64().unwrap() > 1.0);
        let metrics = reqwest::blocking::get(format!("{}/metrics", s.url))
            .unwrap()
            .text()
            .unwrap();
        let line = format!(
            "moefleet_spec_accepted_total{{model=\"inkling-nano\",proposer=\"phrase\"}} {}",
            spec["accepted"]
        );
        assert!(metrics.contains(&line), "{metrics}");
    }
    // a damaged file stops the server with a clear error, unless told to start without it
    let b = std::fs::read(&file).unwrap();
    std::fs::write(&file, &b[..b.len() / 2]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_moefleet"))
        .arg("serve")
        .args(["--port", "0"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("phrase table") && err.contains("ignore-bad"),
        "{err}"
    );
    let mut ok = args.to_vec();
    ok.push("--phrase-table-ignore-bad");
    let s = Server::start(&ok);
    assert_eq!(served(&s, prompt, N).0, w);
    drop(s);
    // `moefleet phrases merge` adds the counts
    let one = dir.path().join("one.bin");
    std::fs::write(&one, &b).unwrap();
    let merged = dir.path().join("merged.bin");
    let st = Command::new(env!("CARGO_BIN_EXE_moefleet"))
        .args(["phrases", "merge"])
        .arg(&one)
        .arg(&one)
        .arg("--out")
        .arg(&merged)
        .status()
        .unwrap();
    assert!(st.success());
    let vocab = ModelConfig::preset("inkling-nano").unwrap().vocab_size as u32;
    let (a, m) = (
        moefleet_engine::spec::phrases::PhraseTable::load(&one, vocab).unwrap(),
        moefleet_engine::spec::phrases::PhraseTable::load(&merged, vocab).unwrap(),
    );
    assert_eq!(m.observations(), 2 * a.observations());
    assert_eq!(m.contexts(), a.contexts());
}
