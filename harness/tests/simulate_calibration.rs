//! The simulator's calibration and replay on hand-made inputs: held-out levels never reach the fit
//! (neither their frame records nor their measured outcomes), and a one-stream replay of a
//! constant-cost fleet gives the rate and TTFT that the arithmetic of a chain round gives.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use moefleet_harness::analysis::tables::{tables, CurveRow};
use moefleet_harness::simulate::costs::{self, Costs, Curve};
use moefleet_harness::simulate::des::FleetModel;
use moefleet_harness::simulate::validate::{self, Setup};
use moefleet_harness::simulate::{simulate_plan, PromptLengths};
use moefleet_harness::trace::{append_jsonl, PhaseRecord};
use moefleet_harness::workload::{Families, Plan};
use serde_json::json;

/// Phases of a sweep at C = 1, 2, 4 (epoch seconds); C = 2 starts the instant C = 1 ends.
const PHASES: [(usize, f64, f64); 3] = [(1, 100.0, 110.0), (2, 110.0, 120.0), (4, 125.0, 135.0)];
const CALIB: [usize; 2] = [1, 4];
/// What a calibration frame costs (seconds): 1 ms + 0.25 ms a row; a held-out one 50 ms.
const HELD_OUT_COST: f64 = 0.05;

fn calib_cost(rows: usize) -> f64 {
    0.001 + 0.00025 * rows as f64
}

/// Frame `seq` on both roles of a two-role chain, role 0 starting at `t`: each role sends 50 µs
/// after computing, role 1 starts 200 µs after role 0 sent. Every other frame was launched alone.
fn frame_pair(seq: u64, t: f64, cost: f64) -> [serde_json::Value; 2] {
    let rows = 1 + seq as usize % 4;
    let alone = seq.is_multiple_of(2);
    let ns = (cost * 1e9).round() as u64;
    let sent0 = t + cost + 50e-6;
    let t1 = sent0 + 200e-6;
    let rec = |role: usize, start: f64| {
        json!({"role": role, "seq": seq, "rows": rows, "start_s": start,
               "epoch_s": start + cost + 50e-6, "alone": alone, "compute_ns": ns, "cpu_ns": ns})
    };
    [rec(0, t), rec(1, t1)]
}

/// A run directory (phases.jsonl) and a profiles directory (role-K.jsonl) holding 40 frames of
/// each calibration phase (seq below 1000) and, unless `calibration_only`, 40 frames of the
/// held-out phase, one starting the instant the phases meet, and one between phases (seq 1000 and
/// up, each costing 50 ms). Returns how many calibration frames there are.
fn records(dir: &Path, calibration_only: bool) -> usize {
    let (run, profiles) = (dir.join("run"), dir.join("profiles"));
    std::fs::create_dir_all(&run).unwrap();
    std::fs::create_dir_all(&profiles).unwrap();
    for (c, start, end) in PHASES {
        let p = PhaseRecord {
            phase: format!("a_c{c:03}"),
            concurrency: c,
            start,
            end,
            ..Default::default()
        };
        append_jsonl(&run.join("phases.jsonl"), &p).unwrap();
    }
    let mut frames = Vec::new();
    let mut seq = 0;
    for (_, start, _) in PHASES.iter().filter(|p| CALIB.contains(&p.0)) {
        for k in 0..40 {
            let t = start + 0.5 + 0.01 * k as f64;
            frames.push(frame_pair(seq, t, calib_cost(1 + seq as usize % 4)));
            seq += 1;
        }
    }
    let n = 2 * frames.len();
    if !calibration_only {
        let held_out = (0..40).map(|k| 111.0 + 0.01 * k as f64);
        for (seq, t) in (1000..).zip([110.0, 122.0].into_iter().chain(held_out)) {
            frames.push(frame_pair(seq, t, HELD_OUT_COST));
        }
    }
    for role in 0..2 {
        let lines: String = frames.iter().map(|f| format!("{}\n", f[role])).collect();
        std::fs::write(profiles.join(format!("role-{role}.jsonl")), lines).unwrap();
    }
    n
}

/// Extract the calibration file of `dir`'s records; the frames it holds.
fn extract(dir: &Path) -> (usize, Vec<Vec<costs::Frame>>) {
    let out = dir.join("frames.csv.gz");
    let n = validate::extract(&dir.join("run"), &dir.join("profiles"), &CALIB, &out).unwrap();
    (n, costs::read_compact(&out).unwrap())
}

#[test]
fn held_out_frames_never_reach_the_calibration_file() {
    let phases: Vec<PhaseRecord> = PHASES
        .iter()
        .map(|&(c, start, end)| PhaseRecord {
            concurrency: c,
            start,
            end,
            ..Default::default()
        })
        .collect();
    let keep = validate::calibration_split(&phases, &CALIB);
    // inside a calibration phase; the instant C = 1 ends and held-out C = 2 starts; inside the
    // held-out phase; between phases
    for (t, want) in [
        (105.0, true),
        (130.0, true),
        (110.0, false),
        (115.0, false),
        (122.0, false),
    ] {
        assert_eq!(keep(t), want, "a frame starting at {t}");
    }
    let (mixed, clean) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let want = records(mixed.path(), false);
    assert_eq!(records(clean.path(), true), want);
    let (n, kept) = extract(mixed.path());
    assert_eq!(n, want, "every calibration frame, and only those, kept");
    let leaked: Vec<u64> = kept
        .iter()
        .flatten()
        .map(|f| f.seq)
        .filter(|&s| s >= 1000)
        .collect();
    assert!(
        leaked.is_empty(),
        "held-out frames in the calibration file: {leaked:?}"
    );
    // the fitted costs and hop are those of the calibration frames alone: no 50 ms anywhere
    let (_, alone) = extract(clean.path());
    let fitted = Costs::fit(&kept, |_| true);
    assert_eq!(fitted, Costs::fit(&alone, |_| true));
    assert_eq!(
        costs::hop_latency(&kept, |_| true),
        costs::hop_latency(&alone, |_| true)
    );
    for c in fitted.shared.iter().chain(&fitted.alone) {
        for &(rows, s) in &c.points {
            assert!(
                (s - calib_cost(rows as usize)).abs() < 2e-6,
                "{rows} rows: {s} s"
            );
        }
    }
}

const PLAN: &str = "name = \"sim\"\nlevels = [1, 2, 4]\nmax_tokens = 24\nstagger_s = 0.001\n\
                    settle_s = 0.2\nmin_requests = 4\nfamily = \"mixed\"\n\n[[passes]]\n\
                    name = \"a\"\norder = \"ascending\"\n";

fn level(c: usize, q: f64, ttft: f64) -> CurveRow {
    CurveRow {
        concurrency: c,
        phases: vec![format!("a_c{c:03}")],
        q_decode: vec![q],
        q_phase: vec![q],
        q_decode_mean: Some(q),
        q_phase_mean: q,
        ttft_median_s: Some(ttft),
        ttft_p95_s: None,
    }
}

#[test]
fn held_out_measurements_do_not_steer_the_fit() {
    let dir = tempfile::tempdir().unwrap();
    records(dir.path(), true);
    extract(dir.path());
    let frames = dir.path().join("frames.csv.gz");
    let setup = Setup {
        preset: "inkling-nano".into(),
        cores: 2,
        slots: 16,
        window: 8,
    };
    let plan = Plan::from_toml(PLAN).unwrap();
    let lengths = PromptLengths::embedded().unwrap();
    let fit = |measured: &[CurveRow]| {
        let (m, f, n) = validate::fit(&frames, &setup, &plan, &CALIB, measured, &lengths).unwrap();
        (serde_json::to_value(m).unwrap(), f, n)
    };
    let measured = [
        level(1, 150.0, 0.02),
        level(2, 260.0, 0.03),
        level(4, 400.0, 0.05),
    ];
    let base = fit(&measured);
    // the held-out level measured five times faster and slower: the same fit, bit for bit
    let mut held = measured.clone();
    held[1] = level(2, 5.0 * 260.0, 0.03 / 5.0);
    assert_eq!(
        fit(&held),
        base,
        "a held-out level's measurements changed the fit"
    );
    // a calibration level's do change it (so the comparison above can fail)
    let mut calib = measured.clone();
    calib[2] = level(4, 5.0 * 400.0, 0.05 / 5.0);
    assert_ne!(fit(&calib).1.score, base.1.score);
}

/// A one-stream replay of a fleet whose every frame costs `c` on every role, with hops of `h`:
/// a decode token takes one chain round, R frames and R hops (the return included), so
/// Q_decode is exactly 1 / (R (c + h)); a prompt of P tokens goes in ⌈P / 8⌉ windows launched
/// `c` apart, the last one's token back (R − 1) (c + h) + h later, so the first token comes
/// ⌈P / 8⌉ c + (R − 1) (c + h) + h after the request.
#[test]
fn a_one_stream_replay_gives_the_rate_of_a_chain_round() {
    let (roles, c, h) = (3usize, 0.002, 0.0003);
    let flat = Curve {
        points: vec![(1.0, c), (8.0, c)],
    };
    let model = FleetModel {
        costs: Costs {
            shared: vec![flat.clone(); roles],
            alone: vec![flat; roles],
        },
        cores: None,
        hop_s: h,
        hop_cpu_s: 0.0,
        background: 0.0,
        time_slice_s: 0.003,
        link_rate_bps: None,
        link_latency_s: 0.0,
        hidden: 64,
        slots: 16,
        groups: roles,
        window: 8,
        max_inflight: 2 * roles + 2,
    };
    let plan = Plan::from_toml(&PLAN.replace("[1, 2, 4]", "[1]")).unwrap();
    let lengths = PromptLengths::embedded().unwrap();
    let run = simulate_plan(&model, &plan, &lengths).unwrap();
    let (_, curve) = tables(&run).unwrap();
    assert_eq!(curve.len(), 1);
    let round = roles as f64 * (c + h);
    let q = curve[0].q_decode_mean.unwrap();
    assert!(
        (q * round - 1.0).abs() < 1e-9,
        "Q_decode {q}, 1 / round {}",
        1.0 / round
    );
    // the TTFT median from the prompts' lengths
    let ph = &plan.phases()[0];
    let prompts = Families::builtin()
        .unwrap()
        .phase_prompts(&ph.name, None, ph.requests);
    let mut ttft: Vec<f64> = prompts
        .iter()
        .map(|p| {
            let windows = lengths.count(&p.text).unwrap().div_ceil(8) as f64;
            windows * c + (roles - 1) as f64 * (c + h) + h
        })
        .collect();
    ttft.sort_by(f64::total_cmp);
    let n = ttft.len();
    let median = if n % 2 == 1 {
        ttft[n / 2]
    } else {
        0.5 * (ttft[n / 2 - 1] + ttft[n / 2])
    };
    let got = curve[0].ttft_median_s.unwrap();
    assert!(
        (got - median).abs() < 1e-9,
        "TTFT median {got}, arithmetic {median}"
    );
}
