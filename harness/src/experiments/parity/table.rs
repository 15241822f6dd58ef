//! `parity.csv` (one row per prompt) and `PARITY.md` (the summary) of a parity run, from the
//! comparisons of its raw records and the run's `meta.json` (what ran, where, when).

use std::fmt::Write as _;

use serde_json::Value;

use super::compare::{identical, largest_margin, Noise, PromptParity};

/// Margin bins (logit units) of `margins.csv`, PARITY.md and the figure: `[edge_k, edge_k+1)`
/// by decades, the last open.
pub const MARGIN_EDGES: [f64; 7] = [0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// The bin of a margin (the last bin holds everything from its edge up).
pub fn bin_of(m: f64) -> usize {
    MARGIN_EDGES.iter().rposition(|&e| m >= e).unwrap_or(0)
}

/// `[a, b)` names of the bins.
pub fn bin_names() -> Vec<String> {
    MARGIN_EDGES
        .iter()
        .enumerate()
        .map(|(i, a)| match MARGIN_EDGES.get(i + 1) {
            Some(b) => format!("[{a}, {b})"),
            None => format!("≥ {a}"),
        })
        .collect()
}

fn opt<T: std::fmt::Display>(x: Option<T>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

fn f6(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.6}")).unwrap_or_default()
}

/// `parity.csv`: llama-server against the single process per prompt, and the fleet against the
/// single process (`fleet` None: the run has no fleet record, its columns are empty).
pub fn csv(llama: &[PromptParity], fleet: Option<&[PromptParity]>) -> String {
    let mut s = String::from(
        "id,prompt_tokens,llama_tokens,moefleet_tokens,fleet_tokens,identical,diverge_at,\
         llama_token,moefleet_token,llama_margin,moefleet_margin,swapped,noise_positions,\
         noise_mean_abs_dlogprob,noise_max_abs_dlogprob,refilled_positions,\
         refilled_max_abs_dlogprob,narrowest_agreed_margin,narrowest_at,fleet_identical,\
         fleet_diverge_at\n",
    );
    for p in llama {
        let f = fleet.and_then(|f| f.iter().find(|x| x.id == p.id));
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            p.id,
            p.prompt_tokens,
            p.reference_tokens,
            p.candidate_tokens,
            opt(f.map(|f| f.candidate_tokens)),
            p.identical(),
            opt(p.diverge_at),
            opt(p.reference_token),
            opt(p.candidate_token),
            f6(p.reference_margin),
            f6(p.candidate_margin),
            opt(p.swapped),
            p.noise.positions,
            f6(p.noise.mean()),
            f6((p.noise.positions > 0).then_some(p.noise.max)),
            p.refilled.positions,
            f6((p.refilled.positions > 0).then_some(p.refilled.max)),
            f6(p.narrowest.map(|n| n.0)),
            opt(p.narrowest.map(|n| n.1)),
            opt(f.map(PromptParity::identical)),
            opt(f.and_then(|f| f.diverge_at)),
        );
    }
    s
}

/// Per margin bin, llama-server's top-2 margins at every agreed position (recorded while
/// generating), and at the first divergences each side's margin.
pub struct MarginBins {
    pub agreed: Vec<usize>,
    pub llama_divergences: Vec<usize>,
    pub moefleet_divergences: Vec<usize>,
}

pub fn margin_bins(llama: &[PromptParity]) -> MarginBins {
    let count = |xs: &mut dyn Iterator<Item = f64>| {
        let mut c = vec![0usize; MARGIN_EDGES.len()];
        for m in xs {
            c[bin_of(m)] += 1;
        }
        c
    };
    MarginBins {
        agreed: count(&mut llama.iter().flat_map(|p| p.agreed_margins.iter().copied())),
        llama_divergences: count(&mut llama.iter().filter_map(|p| p.reference_margin)),
        moefleet_divergences: count(&mut llama.iter().filter_map(|p| p.candidate_margin)),
    }
}

/// `margins.csv`: the bins (`upper` empty for the last) and their counts.
pub fn margins_csv(b: &MarginBins) -> String {
    let mut s =
        String::from("bin,lower,upper,agreed_positions,llama_divergences,moefleet_divergences\n");
    for (i, lower) in MARGIN_EDGES.iter().enumerate() {
        let _ = writeln!(
            s,
            "{i},{lower},{},{},{},{}",
            opt(MARGIN_EDGES.get(i + 1)),
            b.agreed[i],
            b.llama_divergences[i],
            b.moefleet_divergences[i]
        );
    }
    s
}

/// A field of meta.json as text ("not recorded" when absent).
fn field(meta: &Value, pointer: &str) -> String {
    match meta.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if a.iter().all(|x| x.is_string()) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("; "),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => {
            a.iter().map(Value::to_string).collect::<Vec<_>>().join(" ")
        }
        Some(Value::Null) | None => "not recorded".into(),
        Some(v) => v.to_string(),
    }
}

fn pct(k: usize, n: usize) -> String {
    if n == 0 {
        return "–".into();
    }
    format!("{:.1} %", 100.0 * k as f64 / n as f64)
}

/// `PARITY.md`.
pub fn markdown(llama: &[PromptParity], fleet: Option<&[PromptParity]>, meta: &Value) -> String {
    let n = llama.len();
    let k = identical(llama);
    let limit = field(meta, "/request/n_predict");
    let mut s = String::from("# Greedy parity with llama.cpp on one GGUF file\n\n");
    let _ = writeln!(
        s,
        "Each prompt's token ids as llama-server tokenised them, continued greedily for up to {limit} \
         tokens (to the end-of-sequence token where one came first) by llama-server (temperature 0), \
         by `moefleet continue` in one process, and by a fleet of `moefleet serve` roles; recomputed \
         from the raw records (`llama.jsonl`, `moefleet.jsonl`, `fleet.jsonl`) by \
         `moefleet-harness parity`. A margin is a side's top-2 log-probability difference at a \
         position (its logit margin): a divergence at a near-tie is expected of two implementations \
         whose sums round differently, one at a wide margin is a bug.\n"
    );
    let _ = writeln!(s, "| | |\n|---|---|");
    for (name, p) in [
        ("model", "/model"),
        ("model sha256", "/model_sha256"),
        ("llama-server", "/llama_server_version"),
        ("llama.cpp build flags", "/build_flags"),
        ("llama-server arguments", "/server_args"),
        ("moefleet engine commit", "/engine_commit"),
        ("moefleet single process", "/moefleet_continue/command"),
        ("moefleet fleet", "/moefleet_fleet/command"),
        ("fleet requests in flight", "/moefleet_fleet/concurrency"),
        ("host", "/host/cpu"),
        ("host id", "/host/host_id"),
        ("kernel", "/host/kernel"),
        ("engine kernels", "/host/isa"),
        ("llama-server's record written (UTC)", "/date_utc"),
        ("moefleet's records written (UTC)", "/host/date_utc"),
    ] {
        let _ = writeln!(s, "| {name} | {} |", field(meta, p).replace('|', "\\|"));
    }
    for (name, p) in [
        ("llama-server", "llama"),
        ("single process", "moefleet_continue"),
        ("fleet", "moefleet_fleet"),
    ] {
        let _ = writeln!(
            s,
            "| {name}: seconds, load average at start → end | {} s, {} → {} |",
            // llama-server's stage is timed by its own script (server start included)
            field(
                meta,
                &if p == "llama" {
                    "/seconds".to_string()
                } else {
                    format!("/stage_seconds/{p}")
                }
            ),
            field(meta, &format!("/load_average/{p}/start")),
            field(meta, &format!("/load_average/{p}/end")),
        );
    }
    let _ = writeln!(
        s,
        "\n## Token for token\n\n| comparison | prompts | identical | share |\n|---|---:|---:|---:|\n\
         | llama-server against moefleet in one process | {n} | {k} | {} |",
        pct(k, n)
    );
    match fleet {
        Some(f) => {
            let kf = identical(f);
            let roles = field(meta, "/moefleet_fleet/roles");
            let _ = writeln!(
                s,
                "| moefleet fleet of {roles} roles against moefleet in one process | {} | {kf} | {} |",
                f.len(),
                pct(kf, f.len())
            );
        }
        None => s.push_str("| moefleet fleet | no fleet record | | |\n"),
    }
    let generated: usize = llama.iter().map(|p| p.reference_tokens).sum();
    let agreed: usize = llama
        .iter()
        .map(|p| p.diverge_at.unwrap_or(p.reference_tokens))
        .sum();
    let _ = writeln!(
        s,
        "\nOf llama-server's {generated} generated tokens, {agreed} ({}) came before its prompt's \
         first divergence from the single process.",
        pct(agreed, generated)
    );
    divergences(&mut s, llama);
    s
}

/// A side's margin at a prompt's divergence.
type Side = fn(&PromptParity) -> Option<f64>;

const SIDES: [(&str, Side); 2] = [
    ("llama-server's", |p| p.reference_margin),
    ("moefleet's", |p| p.candidate_margin),
];

fn divergences(s: &mut String, llama: &[PromptParity]) {
    let div: Vec<&PromptParity> = llama.iter().filter(|p| !p.identical()).collect();
    let noise = Noise::pooled(llama.iter().map(|p| &p.noise));
    let _ = writeln!(s, "\n## Margins, divergences and noise\n");
    if div.is_empty() {
        let _ = writeln!(s, "No prompt diverges.");
    } else {
        let mut at: Vec<f64> = div
            .iter()
            .filter_map(|p| p.diverge_at)
            .map(|x| x as f64)
            .collect();
        at.sort_by(f64::total_cmp);
        let _ = writeln!(
            s,
            "{} prompts diverge; the first divergence comes at generated position {} to {} \
             (median {}; 0 is the first generated token). {} of them are swaps of the two best \
             tokens (each side's second choice is the other's first).\n",
            div.len(),
            at[0],
            at[at.len() - 1],
            crate::stats::median(at.clone()),
            div.iter().filter(|p| p.swapped == Some(true)).count()
        );
        for (who, side) in SIDES {
            if let Some((mg, p)) = largest_margin(llama, side) {
                let _ = writeln!(
                    s,
                    "\nThe largest of {who} margins at a divergence: {mg:.4}, prompt `{}` at \
                     position {} (llama-server chose {}, moefleet {}; margins {} and {}).",
                    p.id,
                    opt(p.diverge_at),
                    opt(p.reference_token),
                    opt(p.candidate_token),
                    f6(p.reference_margin),
                    f6(p.candidate_margin)
                );
            }
        }
    }
    let b = margin_bins(llama);
    let _ = writeln!(
        s,
        "\n| llama-server's top-2 margin | agreed positions | divergences: llama-server's margin | \
         divergences: moefleet's margin |\n|---|---:|---:|---:|"
    );
    for (i, name) in bin_names().iter().enumerate() {
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} |",
            b.agreed[i], b.llama_divergences[i], b.moefleet_divergences[i]
        );
    }
    match noise.mean() {
        Some(mean) => {
            let _ = writeln!(
                s,
                "\nNoise before the divergence: over the {} positions where both chose the same token \
                 and recorded their top-2 while generating, the chosen token's log-probability \
                 differs by {mean:.6} on average (|Δ logprob|), at most {:.6}.",
                noise.positions, noise.max,
            );
            if !div.is_empty() {
                let within = div
                    .iter()
                    .filter(|p| p.reference_margin.is_some_and(|m| m <= noise.max))
                    .count();
                let _ = writeln!(
                    s,
                    "{within} of the {} divergences come at a llama-server margin no wider than \
                     that largest difference.",
                    div.len()
                );
            }
        }
        None => s.push_str("\nNo position where both sides agreed has both log-probabilities.\n"),
    }
    let refilled = Noise::pooled(llama.iter().map(|p| &p.refilled));
    if let Some(mean) = refilled.mean() {
        let _ = writeln!(
            s,
            "\nAt the {} agreed positions whose top-2 llama-server did not record while generating \
             (inside a UTF-8 character) but by evaluating the prompt and the tokens before them \
             again in one batch, the difference is {mean:.6} on average, at most {:.6}.",
            refilled.positions, refilled.max
        );
    }
    let narrowest = llama
        .iter()
        .filter_map(|p| p.narrowest.map(|n| (n, p)))
        .min_by(|a, b| a.0 .0.total_cmp(&b.0 .0));
    if let Some(((m, at), p)) = narrowest {
        let near = llama
            .iter()
            .filter_map(|p| p.narrowest)
            .filter(|n| n.0 < 0.01)
            .count();
        let _ = writeln!(
            s,
            "\nThe narrowest llama-server top-2 margin at which both chose the same token: {m:.6} \
             (prompt `{}`, position {at}); {near} prompts hold an agreed position with a margin \
             below 0.01.",
            p.id
        );
    }
    if !div.is_empty() {
        let _ = writeln!(
            s,
            "\n| prompt | position | llama-server: token (margin) | moefleet: token (margin) | swap | mean \\|Δ logprob\\| before |\n|---|---:|---|---|---|---:|"
        );
        let mut sorted = div.clone();
        sorted.sort_by(|a, b| {
            b.reference_margin
                .unwrap_or(f64::NAN)
                .total_cmp(&a.reference_margin.unwrap_or(f64::NAN))
                .then(a.id.cmp(&b.id))
        });
        for p in sorted {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} ({}) | {} ({}) | {} | {} |",
                p.id,
                opt(p.diverge_at),
                opt(p.reference_token),
                f6(p.reference_margin),
                opt(p.candidate_token),
                f6(p.candidate_margin),
                match p.swapped {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "–",
                },
                f6(p.noise.mean())
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_half_open_and_the_last_is_open() {
        assert_eq!(bin_of(0.0), 0);
        assert_eq!(bin_of(0.0000999), 0);
        assert_eq!(bin_of(0.0001), 1);
        assert_eq!(bin_of(1.5), 5);
        assert_eq!(bin_of(40.0), 6);
        assert_eq!(bin_names()[6], "≥ 10");
        assert_eq!(bin_names()[0], "[0, 0.0001)");
    }
}
