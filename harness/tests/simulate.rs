//! The fleet simulator end to end on real processes: a 3-role `inkling-nano` fleet with frame
//! records, a real sweep, `simulate validate` (calibrated on levels 1 and 4, checked at 2), the
//! record rechecked from its files (and an edited one caught), its simulated rate at C = 1 held to
//! the arithmetic of a chain round of the fitted model, and `simulate run` of the calibrated model
//! on emulated gigabit links, each role on its own machine.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use moefleet_harness::simulate::des::FleetModel;
use moefleet_harness::simulate::validate::{self, Validation};

mod common;

use common::{harness, serve};

const PLAN: &str = "name = \"sim\"\nlevels = [1, 2, 4]\nmax_tokens = 96\nstagger_s = 0.001\n\
                    settle_s = 0.2\nmin_requests = 4\nfamily = \"mixed\"\n\n[[passes]]\n\
                    name = \"a\"\norder = \"ascending\"\n";

fn run_ok(args: &[&str], at: &Path) -> String {
    let out = Command::new(harness())
        .args(args)
        .current_dir(at)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn validates_against_a_real_sweep_and_predicts_other_fleets() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let profiles = d.join("profiles");
    let (mut server, url) = serve(3, &["--profile-dir", profiles.to_str().unwrap()]);
    std::fs::write(d.join("plan.toml"), PLAN).unwrap();
    run_ok(
        &[
            "sweep",
            "--url",
            &url,
            "--plan",
            "plan.toml",
            "--out",
            "run",
        ],
        d,
    );
    // Ctrl-C: the roles flush their frame records as they stop
    let pid = server.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    server.0.wait().unwrap();
    let table = run_ok(
        &[
            "simulate",
            "validate",
            "--run",
            "run",
            "--profiles",
            "profiles",
            "--out",
            "val",
            "--preset",
            "inkling-nano",
            "--cores",
            "2",
        ],
        d,
    );
    assert!(table.contains("| 2 | yes |"), "{table}");
    let text = std::fs::read_to_string(d.join("val/validation.json")).unwrap();
    let v: Validation = serde_json::from_str(&text).unwrap();
    assert_eq!(v.calibration_levels, [1, 4]);
    assert_eq!(v.held_out_levels, [2]);
    assert!(v.frames_fitted > 0 && v.hop_s > 0.0);
    for l in &v.levels {
        // every level simulated, and the simulated run read back as the harness reads a sweep
        let (q, t) = (l.q_decode_error(), l.ttft_error());
        let (q, t) = (q.expect(&table), t.expect(&table));
        assert!(q.is_finite() && t.is_finite(), "{l:?}");
    }
    // At C = 1 the one stream decodes alone, so each token takes one chain round of the fitted
    // model: every role's one-row frame launched alone plus the work per frame, on every core the
    // background load leaves where the role recorded frames alone (else on one), and R hops (the
    // return included); the simulated Q_decode is 1 / round, to rounding.
    let model: FleetModel =
        serde_json::from_str(&std::fs::read_to_string(d.join("val/model.json")).unwrap()).unwrap();
    let cores = model.cores.unwrap() as f64;
    let free = (cores - model.background).max(0.1);
    let roles = model.roles();
    let round = (0..roles)
        .map(|r| {
            let ask = if model.costs.has_alone(r) { cores } else { 1.0 };
            (model.costs.seconds(r, 1, true) + model.hop_cpu_s) * ask / ask.min(free)
        })
        .sum::<f64>()
        + roles as f64 * model.hop_s;
    let one = v.levels.iter().find(|l| l.concurrency == 1).unwrap();
    let q = one.q_decode_simulated.unwrap();
    assert!(
        (q * round - 1.0).abs() < 1e-6,
        "simulated Q_decode at C = 1 {q}, 1 / round {}: {model:?}",
        1.0 / round
    );
    assert!(d.join("val/simulated/curve.csv").exists());
    assert!(d.join("val/validation.png").exists());
    // verify's recheck: the same files give the same record; an edited one is caught
    validate::recheck(&d.join("val")).unwrap();
    let edited = text.replacen(
        "\"held_out_q_decode_max_error\": ",
        "\"held_out_q_decode_max_error\": 1",
        1,
    );
    assert_ne!(edited, text);
    std::fs::write(d.join("val/validation.json"), edited).unwrap();
    assert!(validate::recheck(&d.join("val")).is_err());
    // a fleet never measured: each role on its own machine, gigabit links of 0.2 ms
    let table = run_ok(
        &[
            "simulate",
            "run",
            "--model",
            "val/model.json",
            "--plan",
            "plan.toml",
            "--out",
            "pred",
            "--own-machines",
            "--link-rate",
            "1gbit",
            "--link-latency",
            "0.2ms",
        ],
        d,
    );
    assert!(table.contains("| 4 |"), "{table}");
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("pred/model.json")).unwrap()).unwrap();
    assert_eq!(m["cores"], serde_json::Value::Null);
    assert_eq!(m["link_rate_bps"], 1e9);
    // bad input: a file that is not a model
    let out = Command::new(harness())
        .args(["simulate", "run", "--model", "plan.toml", "--out", "x"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a simulator model"));
}
