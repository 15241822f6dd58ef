//! Tables of a draft replay, from its anchor record alone (pure; `figure8` draws from `mtp.csv`):
//! `mtp.csv` (first-draft agreement per family and calculation), `chain.csv` (per-draft chain
//! statistics of every calculation), `table6.md` (the paper's Table 6 beside ours, with the
//! references) and `chain.md` (the chain table and E beside the paper's).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use super::anchors::Anchors;
use super::replay::NOT_REPLAYED;
use super::stats::{chain, expected_accepted, first_draft, marginal_chance, Agreement, ChainRow};

/// The calculation that compares the fitted head with shuffled labels (not a prediction column).
pub const SHUFFLED: &str = "shuffled_labels";

/// The paper's published draft numbers (reproduction/paper), when present.
#[derive(Clone, Debug, Default)]
pub struct PaperDraft {
    pub full: Option<f64>,
    pub vocab65k: Option<f64>,
    pub deployment: Option<f64>,
    /// E = Σ prefix over the published chain rows, (teacher, own).
    pub e_teacher: Option<f64>,
    pub e_self_fed: Option<f64>,
    /// prefix_k of the published chain rows, (teacher, own), k = 1..8.
    pub prefix_teacher: Vec<f64>,
    pub prefix_self_fed: Vec<f64>,
    /// (family, original, deployment) in the paper's order.
    pub families: Vec<(String, f64, f64)>,
}

impl PaperDraft {
    pub fn load(paper_dir: &Path) -> PaperDraft {
        let json = |f: &str| -> Option<Value> {
            serde_json::from_str(&std::fs::read_to_string(paper_dir.join(f)).ok()?).ok()
        };
        let mut p = PaperDraft::default();
        if let Some(d) = json("derived.json") {
            p.full = d["mtp_fleet_original"].as_f64();
            p.vocab65k = d["mtp_vocab65k"].as_f64();
            p.deployment = d["mtp_fleet_deployment"].as_f64();
        }
        if let Some(r) = json("mtp_rescore.json") {
            let prefixes = |mode: &str| -> Vec<f64> {
                r["protocols"][mode]
                    .as_array()
                    .map(|a| a.iter().filter_map(|x| x["prefix"].as_f64()).collect())
                    .unwrap_or_default()
            };
            p.prefix_teacher = prefixes("teacher");
            p.prefix_self_fed = prefixes("own");
            p.e_teacher = (!p.prefix_teacher.is_empty()).then(|| p.prefix_teacher.iter().sum());
            p.e_self_fed = (!p.prefix_self_fed.is_empty()).then(|| p.prefix_self_fed.iter().sum());
        }
        if let Ok(t) = std::fs::read_to_string(paper_dir.join("mtp_families.csv")) {
            let t = crate::csv::Table::parse(&t);
            if let (Ok(f), Ok(o), Ok(q)) = (
                t.index("family"),
                t.index("original_a1"),
                t.index("quantized_a1"),
            ) {
                for r in &t.rows {
                    if let (Some(name), Ok(a), Ok(b)) = (r.get(f), t.num(r, o), t.num(r, q)) {
                        p.families.push((name.clone(), a, b));
                    }
                }
            }
        }
        p
    }
}

/// Families in the order they first appear.
pub fn families(a: &Anchors) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in &a.family {
        if !out.contains(f) {
            out.push(f.clone());
        }
    }
    out
}

/// A first-draft calculation: (name, predictions, targets).
type Calculation<'a> = (String, &'a [u32], &'a [u32]);

/// Every first-draft calculation: each prediction column against the targets, and the fitted head
/// against the shuffled targets.
fn calculations(a: &Anchors) -> anyhow::Result<Vec<Calculation<'_>>> {
    let mut out: Vec<Calculation<'_>> = a
        .columns
        .iter()
        .zip(&a.preds)
        .map(|(c, p)| (c.clone(), p.as_slice(), a.target.as_slice()))
        .collect();
    out.push((
        SHUFFLED.into(),
        a.column("fitted_teacher")?,
        a.target_shuffled.as_slice(),
    ));
    Ok(out)
}

/// `mtp.csv`: family (each, then "all"), calculation, anchors, hits, agreement (module 0).
pub fn mtp_csv(a: &Anchors) -> anyhow::Result<String> {
    let mut s = String::from("family,calculation,anchors,hits,agreement\n");
    let mut fams: Vec<Option<String>> = families(a).into_iter().map(Some).collect();
    fams.push(None);
    for (name, p, t) in calculations(a)? {
        for f in &fams {
            let g = first_draft(a, p, t, f.as_deref());
            writeln!(
                s,
                "{},{name},{},{},{}",
                f.as_deref().unwrap_or("all"),
                g.anchors,
                g.hits,
                g.rate()
            )?;
        }
    }
    Ok(s)
}

/// `chain.csv`: per calculation and draft k, the chain statistics (a draft the calculation did
/// not replay, `NOT_REPLAYED` at every one of its anchors, is left out).
pub fn chain_csv(a: &Anchors) -> String {
    let mut s = String::from("calculation,k,n,hits,a,n_cond,cond,prefix\n");
    for (name, p) in a.columns.iter().zip(&a.preds) {
        // the drafts k this column replayed at some anchor, in one pass over its anchors
        let replayed: std::collections::BTreeSet<usize> = (0..a.len())
            .filter(|&i| p[i] != NOT_REPLAYED)
            .map(|i| a.module[i] as usize + 1)
            .collect();
        for r in chain(a, p).into_iter().filter(|r| replayed.contains(&r.k)) {
            let cond = r.cond.map_or(String::new(), |c| c.to_string());
            let _ = writeln!(
                s,
                "{name},{},{},{},{},{},{cond},{}",
                r.k, r.n, r.hits, r.a, r.n_cond, r.prefix
            );
        }
    }
    s
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.2} %", 100.0 * x)
    } else {
        "–".into()
    }
}

fn opt_pct(x: Option<f64>) -> String {
    x.map_or("–".into(), pct)
}

/// What Table 6 shows, for the report and the claims.
pub struct Table6 {
    pub full: Agreement,
    pub restricted: Agreement,
    pub restricted_grids: Agreement,
    pub grids_full: Agreement,
}

pub fn table6_numbers(a: &Anchors) -> anyhow::Result<Table6> {
    let g = |c: &str| -> anyhow::Result<Agreement> {
        Ok(first_draft(a, a.column(c)?, &a.target, None))
    };
    Ok(Table6 {
        full: g("fitted_teacher")?,
        restricted: g("fitted_teacher_r64k")?,
        restricted_grids: g("grids_teacher_r64k")?,
        grids_full: g("grids_teacher")?,
    })
}

/// `table6.md`. `vocab` and `rows64k` describe the restriction; `model` names the model, `real`
/// says whether it is a trained checkpoint (else synthetic weights).
pub fn table6_md(
    a: &Anchors,
    paper: &PaperDraft,
    model: &str,
    real: bool,
    vocab: usize,
    rows64k: usize,
) -> anyhow::Result<String> {
    let t = table6_numbers(a)?;
    let seqs = a.seq.iter().copied().max().map_or(0, |m| m + 1);
    let mut s = String::new();
    let whose = if real {
        "ours for a head fitted to this trained checkpoint's own captures (training and \
         evaluation prompts disjoint). Both agree with their own model's greedy output, but a 135M \
         model and a 975B one with different vocabularies and heads: the levels are comparable \
         as levels, not as a reproduction"
    } else {
        "ours for a head fitted by ridge regression to a model with synthetic weights, so the \
         levels are not comparable, only the method"
    };
    writeln!(
        s,
        "# Table 6: first-draft agreement of the fitted draft head\n\n`{model}`, {seqs} evaluation \
         sequences, {} anchors (module 0 predicting x(t+2) at every generated position t). The \
         paper's numbers are for Inkling's trained head on real text; {whose}.\n",
        t.full.anchors
    )?;
    writeln!(s, "| | this run | paper |\n|---|---:|---:|")?;
    writeln!(
        s,
        "| full head ({vocab} rows) | {} | {} |",
        pct(t.full.rate()),
        opt_pct(paper.full)
    )?;
    writeln!(
        s,
        "| restricted vocabulary (first {rows64k} of {vocab} rows; paper 65,536 of 200,058) | {} | {} |",
        pct(t.restricted.rate()),
        opt_pct(paper.vocab65k)
    )?;
    writeln!(
        s,
        "| restricted + deployment grids (INT8 rows, INT4 g32 MLP) | {} | {} |",
        pct(t.restricted_grids.rate()),
        opt_pct(paper.deployment)
    )?;
    let pp = |x: f64, y: f64| format!("{:.3}", 100.0 * (x - y));
    let ppo = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => pp(x, y),
        _ => "–".into(),
    };
    writeln!(
        s,
        "| vocabulary difference (full − restricted), pp | {} | {} |",
        pp(t.full.rate(), t.restricted.rate()),
        ppo(paper.full, paper.vocab65k)
    )?;
    writeln!(
        s,
        "| incremental quantisation loss (restricted − restricted + grids), pp | {} | {} |",
        pp(t.restricted.rate(), t.restricted_grids.rate()),
        ppo(paper.vocab65k, paper.deployment)
    )?;
    writeln!(
        s,
        "| full head on the deployment grids | {} | – |",
        pct(t.grids_full.rate())
    )?;
    writeln!(
        s,
        "\nOn the same anchors:\n\n| reference | first-draft agreement |\n|---|---:|"
    )?;
    let fd = |c: &str| -> anyhow::Result<f64> {
        Ok(first_draft(a, a.column(c)?, &a.target, None).rate())
    };
    writeln!(
        s,
        "| untrained head (synthetic weights of the same seed) | {} |",
        pct(fd("untrained_teacher")?)
    )?;
    if a.column("control_teacher").is_ok() {
        writeln!(
            s,
            "| control: the same fit to targets shuffled across positions | {} |",
            pct(fd("control_teacher")?)
        )?;
    }
    writeln!(s, "| repeat the last token | {} |", pct(fd("repeat_last")?))?;
    writeln!(
        s,
        "| bigram of the training captures | {} |",
        pct(fd("bigram")?)
    )?;
    if a.column("unigram").is_ok() {
        writeln!(
            s,
            "| always the training captures' most frequent generated token | {} |",
            pct(fd("unigram")?)
        )?;
    }
    if a.column("suffix").is_ok() {
        writeln!(
            s,
            "| the engine's suffix proposer over the tokens so far (no proposal counts as a miss) | {} |",
            pct(fd("suffix")?)
        )?;
    }
    let fitted = a.column("fitted_teacher")?;
    writeln!(
        s,
        "| fitted head replayed against shuffled labels (a check of the pipeline: any predictor \
         scores about the marginal chance below) | {} |",
        pct(first_draft(a, fitted, &a.target_shuffled, None).rate())
    )?;
    let m0: Vec<usize> = (0..a.len()).filter(|&i| a.module[i] == 0).collect();
    let pick = |v: &[u32]| m0.iter().map(|&i| v[i]).collect::<Vec<u32>>();
    writeln!(
        s,
        "| chance: independent draws with the fitted head's and the targets' token frequencies | {} |",
        pct(marginal_chance(&pick(fitted), &pick(&a.target)))
    )?;
    writeln!(
        s,
        "| chance: uniform over the vocabulary, 1/{vocab} | {} |",
        pct(1.0 / vocab as f64)
    )?;
    Ok(s)
}

fn cell(x: Option<f64>) -> String {
    x.map_or("–".into(), |v| format!("{v:.4}"))
}

/// `chain.md`: the chain table of the three modes with E, beside the paper's prefixes and E.
pub fn chain_md(a: &Anchors, paper: &PaperDraft) -> anyhow::Result<String> {
    let modes = ["fitted_teacher", "fitted_self_fed", "fitted_no_context"];
    let rows: Vec<Vec<ChainRow>> = modes
        .iter()
        .map(|m| Ok(chain(a, a.column(m)?)))
        .collect::<anyhow::Result<_>>()?;
    let mut s = String::from(
        "# Chain statistics of the fitted head\n\nDraft k is module k − 1; `a` its hit rate, `cond` \
         its hit rate where every earlier draft hit, `prefix` the share of its anchors where drafts \
         1..k all hit; E = Σ prefix is the expected number of accepted drafts.\n\n",
    );
    s.push_str(
        "| k | teacher a | teacher cond | teacher prefix | self-fed a | self-fed cond | self-fed prefix | \
         no-context a | no-context prefix | paper teacher prefix | paper self-fed prefix |\n",
    );
    s.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for i in 0..rows[0].len() {
        let (t, f, n) = (&rows[0][i], &rows[1][i], &rows[2][i]);
        writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            t.k,
            cell(Some(t.a)),
            cell(t.cond),
            cell(Some(t.prefix)),
            cell(Some(f.a)),
            cell(f.cond),
            cell(Some(f.prefix)),
            cell(Some(n.a)),
            cell(Some(n.prefix)),
            cell(paper.prefix_teacher.get(i).copied()),
            cell(paper.prefix_self_fed.get(i).copied()),
        )?;
    }
    writeln!(
        s,
        "\n| E (expected accepted drafts) | this run | paper |\n|---|---:|---:|\n| teacher | {:.3} | {} |\n| self-fed | {:.3} | {} |\n| no-context | {:.3} | – |",
        expected_accepted(&rows[0]),
        paper.e_teacher.map_or("–".into(), |e| format!("{e:.3}")),
        expected_accepted(&rows[1]),
        paper.e_self_fed.map_or("–".into(), |e| format!("{e:.3}")),
        expected_accepted(&rows[2]),
    )?;
    Ok(s)
}

/// The four tables of a replay directory, from its `anchors.csv.gz` and `replay.json` (model,
/// vocabulary, restriction) and the paper's data under `root/reproduction/paper`.
pub fn render(dir: &Path, root: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let a = Anchors::read_gz(&dir.join("anchors.csv.gz"))?;
    let rp = dir.join("replay.json");
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(&rp).with_context(|| format!("reading {}", rp.display()))?,
    )?;
    let vocab = r["vocab"].as_u64().context("replay.json: no vocab")? as usize;
    let rows64k = r["restrictions"]["r64k"]
        .as_u64()
        .context("replay.json: no restrictions.r64k")? as usize;
    let model = r["model"]["preset"]["name"]
        .as_str()
        .or_else(|| r["model_name"].as_str())
        .unwrap_or("the model")
        .to_string();
    let real = r["model"].get("gguf").is_some();
    let paper = PaperDraft::load(&root.join("reproduction/paper"));
    Ok(vec![
        ("mtp.csv".into(), mtp_csv(&a)?),
        ("chain.csv".into(), chain_csv(&a)),
        (
            "table6.md".into(),
            table6_md(&a, &paper, &model, real, vocab, rows64k)?,
        ),
        ("chain.md".into(), chain_md(&a, &paper)?),
    ])
}

/// Write the four tables of a replay directory (see `render`).
pub fn write(dir: &Path, root: &Path) -> anyhow::Result<()> {
    for (name, text) in render(dir, root)? {
        crate::csv::write(&dir.join(&name), &text)?;
    }
    Ok(())
}
