//! The tables of a speculation experiment, pure functions of its runs: `table3.csv` / `.md` (the
//! paper's Table 3: per family, the first and the repeated pass with every proposer on), `onoff.csv`
//! / `.md` (each proposer set against speculation off, same prompts, same session) and `model.csv`
//! / `.md` (the first-order model against the measured speedup).

use std::fmt::Write as _;
use std::path::Path;

pub(super) use super::cells::{cell, num_at};
use super::model::{rows as model_rows, ModelRow};
use super::runs::{ConfigRun, PASSES};
use crate::csv::Table;
use crate::stats::quantile;

/// The paper's Table 3 rows and pass totals (reproduction/paper), when present.
#[derive(Clone, Debug, Default)]
pub struct PaperSpec {
    /// (family, first, repeat) decode tok/s.
    pub families: Vec<(String, f64, f64)>,
    /// (first, repeat) serial decode and whole-phase rates.
    pub decode: Option<(f64, f64)>,
    pub phase: Option<(f64, f64)>,
}

impl PaperSpec {
    pub fn load(paper_dir: &Path) -> PaperSpec {
        let mut p = PaperSpec::default();
        if let Ok(t) = Table::read(&paper_dir.join("speculation_gpu.csv")) {
            if let (Ok(f), Ok(a), Ok(b)) = (
                t.index("family"),
                t.index("first_decode_tok_s"),
                t.index("repeat_decode_tok_s"),
            ) {
                for r in &t.rows {
                    if let (Some(n), Ok(x), Ok(y)) = (r.get(f), t.num(r, a), t.num(r, b)) {
                        p.families.push((n.clone(), x, y));
                    }
                }
            }
        }
        if let Some(v) = std::fs::read_to_string(paper_dir.join("speculation_audit.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        {
            let r = &v["repeat"];
            let pair = |a: &str, b: &str| Some((r[a].as_f64()?, r[b].as_f64()?));
            p.decode = pair("first_decode", "repeat_decode");
            p.phase = pair("first_phase", "repeat_phase");
        }
        p
    }
}

/// The configuration Table 3 is made from: every proposer on (`all`), else the last present.
fn table3_config(configs: &[ConfigRun]) -> &ConfigRun {
    configs
        .iter()
        .find(|c| c.name == "all")
        .unwrap_or(&configs[configs.len() - 1])
}

/// `table3.csv`: the paper's columns, then whether both passes equal the output without speculation.
pub fn table3_csv(configs: &[ConfigRun]) -> String {
    let c = table3_config(configs);
    let off = &configs[0];
    let mut s = String::from(
        "family,prompt_index,output_tokens,first_decode_tok_s,repeat_decode_tok_s,ratio,gain_pct,identical_output,identical_to_off\n",
    );
    for (f, r) in c.passes[0].requests.iter().zip(&c.passes[1].requests) {
        let same_off = off.passes.iter().all(|p| {
            p.requests
                .iter()
                .any(|o| o.family == f.family && o.text == f.text)
        });
        let ratio = r.decode_tok_s / f.decode_tok_s;
        let _ = writeln!(
            s,
            "{},0,{},{},{},{},{},{},{}",
            f.family,
            f.tokens,
            f.decode_tok_s,
            r.decode_tok_s,
            ratio,
            100.0 * (ratio - 1.0),
            if f.text == r.text { "True" } else { "False" },
            if same_off && f.text == r.text {
                "True"
            } else {
                "False"
            }
        );
    }
    s
}

/// `table3.md`: ours per family beside the paper's, and the pass totals.
pub fn table3_md(configs: &[ConfigRun], paper: &PaperSpec) -> String {
    let c = table3_config(configs);
    let mut s = format!(
        "# Table 3: single requests, first and repeated pass (speculation on: {})\n\n\
         One prompt of each family, one request at a time, {} output tokens; the repeated pass sends \
         the same prompts after the first, so the phrase table has learned from it. Decode rate = \
         (tokens − 1) / (last − first token). The paper's rows: `reproduction/paper/speculation_gpu.csv` \
         (its Arc B390 fleet of eleven machines).\n\n\
         | family | first (tok/s) | repeated | ratio | gain | identical | paper first | paper repeated | paper ratio |\n\
         |---|---:|---:|---:|---:|---|---:|---:|---:|\n",
        c.name,
        c.passes[0].requests.first().map_or(0, |r| r.tokens)
    );
    for (f, r) in c.passes[0].requests.iter().zip(&c.passes[1].requests) {
        // the paper's table names the families as ours do
        let p = paper.families.iter().find(|p| p.0 == f.family);
        let ratio = r.decode_tok_s / f.decode_tok_s;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}× | {:+.1} % | {} | {} | {} | {} |",
            f.family,
            cell(f.decode_tok_s, 2),
            cell(r.decode_tok_s, 2),
            cell(ratio, 2),
            100.0 * (ratio - 1.0),
            if f.text == r.text { "yes" } else { "no" },
            p.map_or("–".into(), |p| cell(p.1, 2)),
            p.map_or("–".into(), |p| cell(p.2, 2)),
            p.map_or("–".into(), |p| format!("{}×", cell(p.2 / p.1, 2))),
        );
    }
    let (a, b) = (&c.passes[0], &c.passes[1]);
    let pr = |x: Option<(f64, f64)>| {
        x.map_or("–".into(), |(u, v)| {
            format!("{} → {} ({}×)", cell(u, 2), cell(v, 2), cell(v / u, 2))
        })
    };
    let _ = write!(
        s,
        "\n| over the {} prompts | this run | paper |\n|---|---:|---:|\n\
         | serial decode, Q_decode (tok/s) | {} → {} ({}×) | {} |\n\
         | whole phase, Q_phase (tok/s) | {} → {} ({}×) | {} |\n",
        a.requests.len(),
        cell(a.q_decode, 2),
        cell(b.q_decode, 2),
        cell(b.q_decode / a.q_decode, 2),
        pr(paper.decode),
        cell(a.q_phase, 2),
        cell(b.q_phase, 2),
        cell(b.q_phase / a.q_phase, 2),
        pr(paper.phase),
    );
    s
}

/// Every request of a pass returned the same text as in the reference pass.
fn same_text(p: &super::runs::Pass, o: &super::runs::Pass) -> bool {
    p.requests.len() == o.requests.len()
        && p.requests
            .iter()
            .zip(&o.requests)
            .all(|(x, y)| x.text == y.text)
}

/// `onoff.csv`: per configuration and pass, the pass rates, their ratio to speculation off, the
/// proposals, and whether every output equals the one without speculation.
pub fn onoff_csv(configs: &[ConfigRun], off_again: Option<&ConfigRun>) -> String {
    let off = &configs[0];
    let mut s = String::from(
        "key,config,pass,q_decode,q_phase,q_decode_ratio,q_phase_ratio,proposed,accepted,rewinds,acceptance,identical_to_off,load_start,load_end,drafts,wasted,accepted_per_step\n",
    );
    for c in configs.iter().chain(off_again) {
        for (pi, (p, o)) in c.passes.iter().zip(&off.passes).enumerate() {
            let sum = |f: fn(&super::runs::Request) -> u64| p.requests.iter().map(f).sum::<u64>();
            let (prop, acc, rew) = (sum(|r| r.proposed), sum(|r| r.accepted), sum(|r| r.rewinds));
            let drafts = sum(|r| r.drafts);
            let same = same_text(p, o);
            let load = |i: usize| c.load[i].map(|x| x.to_string()).unwrap_or_default();
            // vLLM's mean acceptance length: the target's own token plus the accepted ones, per draft
            let per_step = if drafts == 0 {
                f64::NAN
            } else {
                1.0 + acc as f64 / drafts as f64
            };
            let _ = writeln!(
                s,
                "{0}/{1},{0},{1},{2},{3},{4},{5},{prop},{acc},{rew},{6},{7},{8},{9},{drafts},{10},{11}",
                c.name,
                PASSES[pi],
                p.q_decode,
                p.q_phase,
                p.q_decode / o.q_decode,
                p.q_phase / o.q_phase,
                if prop == 0 {
                    f64::NAN
                } else {
                    acc as f64 / prop as f64
                },
                same,
                load(0),
                load(1),
                prop - acc,
                per_step
            );
        }
    }
    s
}

/// `onoff.md`.
pub fn onoff_md(configs: &[ConfigRun], off_again: Option<&ConfigRun>) -> String {
    let t = Table::parse(&onoff_csv(configs, off_again));
    let mut s = String::from(
        "# Speculation off against on, per proposer set\n\nThe same prompts, one request at a time, \
         in one session: each configuration is a fresh fleet (an empty phrase table) serving the \
         first and then the repeated pass. Ratios are to speculation off in the same pass; \
         `off-again` is speculation off once more at the end of the session, so its ratio is how \
         far the machine drifted meanwhile. Load: the 1-minute load average when the run began and \
         ended (two cores). It counts the fleet's own processes (a speculating fleet keeps several \
         of its roles runnable at once) and decays over about a minute, so it carries over \
         from the run before. Wasted: proposals computed by every role and then discarded \
         (proposed − accepted). Accepted per step: vLLM's mean acceptance length, 1 + accepted / \
         drafts begun (– where the run did not record drafts).\n\n\
         | proposers | pass | Q_decode (tok/s) | ratio | Q_phase (tok/s) | ratio | proposed | accepted | rewinds | wasted | accepted per step | identical output | load |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    for r in &t.rows {
        let n = |i: usize| num_at(r, i);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}× | {} | {}× | {} | {} | {} | {} | {} | {} | {} → {} |",
            r[1],
            r[2].trim_end_matches("_c001"),
            cell(n(3), 2),
            cell(n(5), 2),
            cell(n(4), 2),
            cell(n(6), 2),
            r[7],
            r[8],
            r[9],
            r[15],
            cell(n(16), 2),
            if r[11] == "true" { "yes" } else { "NO" },
            cell(n(12), 2),
            cell(n(13), 2)
        );
    }
    s
}

/// `model.csv`: one row per speculating request.
pub fn model_csv(rows: &[ModelRow]) -> String {
    let mut s = String::from("config,pass,family,latency_ms,interval_ms,a,predicted,measured\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{}",
            r.config, r.pass, r.family, r.latency_ms, r.interval_ms, r.a, r.predicted, r.measured
        );
    }
    s
}

fn med(v: Vec<f64>) -> f64 {
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    quantile(&v, 0.5).unwrap_or(f64::NAN)
}

/// Medians per configuration and pass: (key, config, pass, L, T, a, predicted, measured, |error|).
type ModelSummary = (String, String, String, f64, f64, f64, f64, f64, f64);

fn model_summary(rows: &[ModelRow]) -> Vec<ModelSummary> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in rows {
        let k = (r.config.clone(), r.pass.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(c, p)| {
            let sel: Vec<&ModelRow> = rows
                .iter()
                .filter(|r| r.config == c && r.pass == p)
                .collect();
            let m = |f: fn(&ModelRow) -> f64| med(sel.iter().map(|r| f(r)).collect());
            (
                format!("{c}/{p}"),
                c,
                p,
                m(|r| r.latency_ms),
                m(|r| r.interval_ms),
                m(|r| r.a),
                m(|r| r.predicted),
                m(|r| r.measured),
                m(|r| ((r.predicted - r.measured) / r.measured).abs()),
            )
        })
        .collect()
}

/// `model_summary.csv`: the medians of `model.md`.
pub fn model_summary_csv(rows: &[ModelRow]) -> String {
    let mut s =
        String::from("key,config,pass,latency_ms,interval_ms,a,predicted,measured,abs_rel_error\n");
    for (k, c, p, l, t, a, pr, me, e) in model_summary(rows) {
        let _ = writeln!(s, "{k},{c},{p},{l},{t},{a},{pr},{me},{e}");
    }
    s
}

/// `model.md`: medians per configuration and pass.
pub fn model_md(rows: &[ModelRow]) -> String {
    let mut s = String::from(
        "# The first-order model against the measured speedup\n\n`S ≈ L / (aT + (1 − a)L)` per \
         request (`harness/src/experiments/speculation/model.rs`): L the median round trip of role 0's frames \
         with speculation off, T the median spacing of replies to rows whose proposed input was \
         verified, a the accepted proposals over the decoded tokens; measured S = decode rate on / \
         off for the same prompt. Medians over the twelve requests.\n\n\
         | proposers | pass | L (ms) | T (ms) | a | predicted S | measured S | median \\|error\\| |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (_, c, p, l, t, a, pr, me, e) in model_summary(rows) {
        let _ = writeln!(
            s,
            "| {c} | {} | {} | {} | {} | {} | {} | {} % |",
            p.trim_end_matches("_c001"),
            cell(l, 1),
            cell(t, 1),
            cell(a, 3),
            cell(pr, 2),
            cell(me, 2),
            cell(100.0 * e, 1),
        );
    }
    s
}

/// `depth.csv`: the phrase table alone at each depth of proposals in flight, both passes, with the
/// ratio to speculation off and, on every row, the fleet's repeated pass over its own first pass
/// (the table has learned nothing yet on the first pass, so that pass is the fleet's own
/// reference, measured a minute before the repeated one rather than many minutes before).
pub fn depth_csv(off: &ConfigRun, depths: &[(usize, ConfigRun)]) -> String {
    let mut s = String::from(
        "key,depth,pass,q_decode,q_decode_ratio,proposed,accepted,rewinds,identical_to_off,repeat_over_first,load_start,load_end\n",
    );
    for (d, c) in depths {
        let within = c.passes[1].q_decode / c.passes[0].q_decode;
        let load = |i: usize| c.load[i].map(|x| x.to_string()).unwrap_or_default();
        for (pi, (p, o)) in c.passes.iter().zip(&off.passes).enumerate() {
            let sum = |f: fn(&super::runs::Request) -> u64| p.requests.iter().map(f).sum::<u64>();
            let _ = writeln!(
                s,
                "{d}/{0},{d},{0},{1},{2},{3},{4},{5},{6},{within},{7},{8}",
                PASSES[pi],
                p.q_decode,
                p.q_decode / o.q_decode,
                sum(|r| r.proposed),
                sum(|r| r.accepted),
                sum(|r| r.rewinds),
                same_text(p, o),
                load(0),
                load(1)
            );
        }
    }
    s
}

/// `depth.md`.
pub fn depth_md(off: &ConfigRun, depths: &[(usize, ConfigRun)]) -> String {
    let mut s = String::from(
        "# Proposals in flight

The phrase table alone at each depth (sampled rows of the lone \
         stream in flight, its confirmed one included), the same prompts, each depth a fresh fleet; \
         Q_decode of each pass, its ratio to speculation off (measured minutes earlier: see \
         `onoff.md` for the drift), and the repeated pass over the same fleet's first pass (the \
         table has learned nothing yet on the first pass, so that ratio does not span the drift). \
         Load: 1-minute load average at the start and end of the fleet's run.\n\n\
         | depth | first pass (tok/s) | ratio to off | repeated pass (tok/s) | ratio to off | repeated / first | rewinds | identical output | load |\n\
         |---:|---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    for (d, c) in depths {
        let r = |i: usize| c.passes[i].q_decode / off.passes[i].q_decode;
        let rewinds: u64 = c
            .passes
            .iter()
            .flat_map(|p| &p.requests)
            .map(|r| r.rewinds)
            .sum();
        let same = c
            .passes
            .iter()
            .zip(&off.passes)
            .all(|(p, o)| same_text(p, o));
        let _ = writeln!(
            s,
            "| {d} | {} | {}× | {} | {}× | {}× | {rewinds} | {} | {} → {} |",
            cell(c.passes[0].q_decode, 2),
            cell(r(0), 2),
            cell(c.passes[1].q_decode, 2),
            cell(r(1), 2),
            cell(c.passes[1].q_decode / c.passes[0].q_decode, 2),
            if same { "yes" } else { "NO" },
            cell(c.load[0].unwrap_or(f64::NAN), 2),
            cell(c.load[1].unwrap_or(f64::NAN), 2),
        );
    }
    s
}

/// Every table of a speculation experiment. `configs` must begin with `off` and hold one more
/// (`runs::load_all` makes sure); otherwise there is nothing to compare and no table.
pub fn render(
    configs: &[ConfigRun],
    off_again: Option<&ConfigRun>,
    paper: &PaperSpec,
) -> Vec<(String, String)> {
    if configs.len() < 2 || configs[0].name != "off" {
        return Vec::new();
    }
    let rows = model_rows(configs);
    vec![
        ("table3.csv".into(), table3_csv(configs)),
        ("table3.md".into(), table3_md(configs, paper)),
        ("onoff.csv".into(), onoff_csv(configs, off_again)),
        ("onoff.md".into(), onoff_md(configs, off_again)),
        ("model.csv".into(), model_csv(&rows)),
        ("model_summary.csv".into(), model_summary_csv(&rows)),
        ("model.md".into(), model_md(&rows)),
        (
            "families.csv".into(),
            super::families::families_csv(configs),
        ),
        ("families.md".into(), super::families::families_md(configs)),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::runs::{Pass, Request};
    use super::*;

    /// A configuration whose two passes decode at `rates`, every request saying `text`.
    fn run(name: &str, rates: [f64; 2], text: &str) -> ConfigRun {
        let pass = |q: f64| Pass {
            requests: ["code", "poem"]
                .iter()
                .enumerate()
                .map(|(i, f)| Request {
                    family: f.to_string(),
                    family_index: i,
                    text: text.into(),
                    tokens: 128,
                    decode_tok_s: q,
                    started_epoch: 0.0,
                    ended_epoch: 1.0,
                    proposed: 3,
                    accepted: 2,
                    rewinds: 1,
                    drafts: 1,
                })
                .collect(),
            q_decode: q,
            q_phase: q / 2.0,
        };
        ConfigRun {
            name: name.into(),
            passes: rates.iter().map(|&q| pass(q)).collect(),
            frames: Default::default(),
            load: [Some(1.5), None],
        }
    }

    #[test]
    fn on_off_ratios_drift_and_changed_output() {
        let configs = [
            run("off", [10.0, 20.0], "a"),
            run("phrase", [10.0, 50.0], "a"),
        ];
        let again = run("off-again", [9.0, 20.0], "a");
        let t = Table::parse(&onoff_csv(&configs, Some(&again)));
        let row = |k: &str| t.rows.iter().find(|r| r[0] == k).unwrap().clone();
        assert_eq!(row("phrase/repeat_c001")[5], "2.5");
        assert_eq!(row("phrase/repeat_c001")[7], "6", "proposals summed");
        assert_eq!(row("off-again/first_c001")[5], "0.9");
        assert_eq!(row("off/first_c001")[12..14], ["1.5", ""]);
        // two requests of 3 proposals, 2 accepted, 1 draft each: 2 wasted, 1 + 4 / 2 per step
        assert_eq!(row("phrase/repeat_c001")[14..], ["2", "2", "3"]);
        let f = Table::parse(&super::super::families::families_csv(&configs));
        let frow = f
            .rows
            .iter()
            .find(|r| r[0] == "phrase/repeat_c001/poem")
            .unwrap();
        assert_eq!((frow[5].as_str(), frow[9].as_str()), ("2.5", "true"));
        assert!(super::super::families::families_md(&configs)
            .contains("| poem | 20.00 | 2.50× (2/3) |"));
        assert!(t.rows.iter().all(|r| r[11] == "true"));
        // one changed output is flagged, in the CSV and the table
        let bad = [
            run("off", [10.0, 20.0], "a"),
            run("draft", [10.0, 20.0], "b"),
        ];
        assert_eq!(Table::parse(&onoff_csv(&bad, None)).rows[2][11], "false");
        assert!(onoff_md(&bad, None).contains("| NO |"));
    }

    #[test]
    fn depth_rows_carry_the_same_fleet_ratio() {
        let off = run("off", [10.0, 10.0], "a");
        let depths = [
            (2, run("depth-2", [8.0, 12.0], "a")),
            (16, run("depth-16", [8.0, 20.0], "b")),
        ];
        let t = Table::parse(&depth_csv(&off, &depths));
        assert_eq!(t.rows.len(), 4);
        assert_eq!(t.rows[1][0], "2/repeat_c001");
        assert_eq!(t.rows[1][4], "1.2");
        assert_eq!(t.rows[0][9], "1.5");
        assert_eq!(t.rows[3][9], "2.5");
        assert_eq!(t.rows[3][8], "false");
        let md = depth_md(&off, &depths);
        assert!(
            md.contains("| 16 | 8.00 | 0.80× | 20.00 | 2.00× | 2.50× | 4 | NO | 1.50 → – |"),
            "{md}"
        );
    }

    #[test]
    fn nothing_to_compare_is_no_table() {
        let paper = PaperSpec::default();
        assert!(render(&[run("phrase", [1.0, 2.0], "a")], None, &paper).is_empty());
        let two = [run("off", [1.0, 1.0], "a"), run("all", [1.0, 2.0], "a")];
        assert_eq!(render(&two, None, &paper).len(), 9);
    }
}
