//! The sweep's records as polars DataFrames, and the phase and curve statistics of MEASUREMENTS.md
//! §2.3 computed from them with polars expressions. `reference.rs` computes the same numbers with
//! plain loops over the records (through `metrics.rs`); the parity tests hold the two equal bit for
//! bit, which is also what keeps the committed runs' tables byte-identical.
//!
//! Summation order is part of that equality: polars adds a column of fewer than 128 values left to
//! right (its pairwise blocks start at 128), as the reference does, so the per-phase sums over
//! cohorts and the per-level means over phases round the same way. Inputs are sorted before every
//! grouping (`group_by_stable` keeps row order within a group), never left to a join's order.

use polars::prelude::*;

use super::run::Run;

/// The run as three frames.
/// - `phases`: one row per phase record, in run order (`order`).
/// - `requests`: one row per trace record (`req`, unique in the run), with its phase's output cap.
/// - `events`: one row per SSE chunk of a request, on the run's monotonic clock (`t`, `n` tokens).
pub struct Frames {
    pub phases: DataFrame,
    pub requests: DataFrame,
    pub events: DataFrame,
}

pub fn frames(run: &Run) -> PolarsResult<Frames> {
    let mut ph = PhaseCols::default();
    let mut rq = RequestCols::default();
    let (mut ev_req, mut ev_t, mut ev_n) = (Vec::new(), Vec::new(), Vec::new());
    for (order, p) in run.phases.iter().enumerate() {
        ph.order.push(order as u64);
        ph.phase.push(p.phase.clone());
        ph.concurrency.push(p.concurrency as u64);
        ph.output_cap.push(p.output_cap as u64);
        ph.planned.push(p.requests as u64);
        ph.seconds.push(p.end_mono - p.start_mono);
        for r in run.traces.get(&p.phase).map(Vec::as_slice).unwrap_or(&[]) {
            let req = rq.req.len() as u64;
            rq.req.push(req);
            rq.phase.push(p.phase.clone());
            rq.cohort.push(r.cohort as u64);
            rq.started.push(r.started_mono);
            rq.prompt.push(r.prompt.clone());
            rq.retries.push(r.capacity_retries as u64);
            rq.failed.push(r.error.is_some());
            rq.tokens.push(r.tokens());
            rq.cap.push(p.output_cap as u64);
            for &(t, n) in &r.events_mono {
                ev_req.push(req);
                ev_t.push(t);
                ev_n.push(n as u64);
            }
        }
    }
    Ok(Frames {
        phases: DataFrame::new(vec![
            Column::new("order".into(), ph.order),
            Column::new("phase".into(), ph.phase),
            Column::new("concurrency".into(), ph.concurrency),
            Column::new("output_cap".into(), ph.output_cap),
            Column::new("planned".into(), ph.planned),
            Column::new("seconds".into(), ph.seconds),
        ])?,
        requests: DataFrame::new(vec![
            Column::new("req".into(), rq.req),
            Column::new("phase".into(), rq.phase),
            Column::new("cohort".into(), rq.cohort),
            Column::new("started".into(), rq.started),
            Column::new("prompt".into(), rq.prompt),
            Column::new("capacity_retries".into(), rq.retries),
            Column::new("failed".into(), rq.failed),
            Column::new("tokens".into(), rq.tokens),
            Column::new("cap".into(), rq.cap),
        ])?,
        events: DataFrame::new(vec![
            Column::new("req".into(), ev_req),
            Column::new("t".into(), ev_t),
            Column::new("n".into(), ev_n),
        ])?,
    })
}

#[derive(Default)]
struct PhaseCols {
    order: Vec<u64>,
    phase: Vec<String>,
    concurrency: Vec<u64>,
    output_cap: Vec<u64>,
    planned: Vec<u64>,
    seconds: Vec<f64>,
}

#[derive(Default)]
struct RequestCols {
    req: Vec<u64>,
    phase: Vec<String>,
    cohort: Vec<u64>,
    started: Vec<f64>,
    prompt: Vec<String>,
    retries: Vec<u64>,
    failed: Vec<bool>,
    tokens: Vec<u64>,
    cap: Vec<u64>,
}

fn left() -> JoinArgs {
    JoinArgs::new(JoinType::Left)
}

fn inner() -> JoinArgs {
    JoinArgs::new(JoinType::Inner)
}

fn by(names: &[&str]) -> Vec<Expr> {
    names.iter().map(|n| col(*n)).collect()
}

fn sorted(lf: LazyFrame, names: &[&str]) -> LazyFrame {
    lf.sort(names.to_vec(), SortMultipleOptions::default())
}

/// `x.sum() / x.count()` over the non-null values: the mean as the reference computes it.
fn mean_of(name: &str) -> Expr {
    col(name).sum() / col(name).count().cast(DataType::Float64)
}

/// Token events (`n > 0`): empty structural chunks never move an interval.
fn token_events(f: &Frames) -> LazyFrame {
    f.events.clone().lazy().filter(col("n").gt(lit(0u64)))
}

/// Per request: the first and last token events and TTFT = t_first − started (null: no tokens).
pub fn per_request(f: &Frames) -> LazyFrame {
    let ends = token_events(f).group_by_stable(by(&["req"])).agg([
        col("t").first().alias("t_first"),
        col("t").last().alias("t_last"),
    ]);
    let joined = f
        .requests
        .clone()
        .lazy()
        .join(ends, by(&["req"]), by(&["req"]), left())
        .with_column((col("t_first") - col("started")).alias("ttft"));
    sorted(joined, &["req"])
}

/// Per cohort: the shared interval `a = max t_first`, `b = min t_last`, the tokens `D` of events
/// with `a < t ≤ b`, and whether it counts (every request has a token event, and `b > a`).
fn per_cohort(f: &Frames, reqs: &DataFrame) -> LazyFrame {
    let reqs = reqs.clone().lazy();
    let bounds = reqs.clone().group_by_stable(by(&["phase", "cohort"])).agg([
        col("t_first").max().alias("a"),
        col("t_last").min().alias("b"),
        col("t_first").null_count().alias("silent"),
    ]);
    let d = token_events(f)
        .join(
            reqs.select(by(&["req", "phase", "cohort"])),
            by(&["req"]),
            by(&["req"]),
            inner(),
        )
        .join(
            bounds.clone(),
            by(&["phase", "cohort"]),
            by(&["phase", "cohort"]),
            inner(),
        )
        .filter(col("t").gt(col("a")).and(col("t").lt_eq(col("b"))))
        .group_by(by(&["phase", "cohort"]))
        .agg([col("n").sum().alias("d")]);
    let cohorts = bounds
        .join(
            d,
            by(&["phase", "cohort"]),
            by(&["phase", "cohort"]),
            left(),
        )
        .with_columns([
            col("d").fill_null(lit(0u64)),
            col("silent")
                .eq(lit(0u32))
                .and(col("b").gt(col("a")))
                .fill_null(lit(false))
                .alias("kept"),
        ]);
    sorted(cohorts, &["phase", "cohort"])
}

/// One row per phase, in run order: the trace statistics of `survey_phases.csv` (the server-counter
/// audit columns are not trace statistics; `tables.rs` adds them).
/// `reqs` is [`per_request`] collected once (the curve reads it too).
pub fn phase_table(f: &Frames, reqs: &DataFrame) -> PolarsResult<DataFrame> {
    let shared = per_cohort(f, reqs).group_by_stable(by(&["phase"])).agg([
        col("d")
            .filter(col("kept"))
            .sum()
            .alias("shared_decode_tokens"),
        (col("b") - col("a"))
            .filter(col("kept"))
            .sum()
            .alias("shared_decode_s"),
        col("kept").not().sum().alias("rejected_cohorts"),
    ]);
    let reqs = reqs.clone().lazy().group_by_stable(by(&["phase"])).agg([
        len().alias("requests"),
        col("tokens").sum().alias("tokens"),
        col("ttft")
            .drop_nulls()
            .quantile(lit(0.5), QuantileMethod::Linear)
            .alias("ttft_median_s"),
        col("ttft")
            .drop_nulls()
            .quantile(lit(0.95), QuantileMethod::Linear)
            .alias("ttft_p95_s"),
        col("prompt").n_unique().alias("unique_prompts"),
        col("capacity_retries").sum(),
        col("failed").sum().alias("errors"),
        col("failed")
            .or(col("tokens").neq(col("cap")))
            .sum()
            .alias("inexact"),
    ]);
    let rate = col("shared_decode_tokens").cast(DataType::Float64) / col("shared_decode_s");
    let table = f
        .phases
        .clone()
        .lazy()
        .join(shared, by(&["phase"]), by(&["phase"]), left())
        .join(reqs, by(&["phase"]), by(&["phase"]), left())
        .with_columns([
            col("shared_decode_tokens").fill_null(lit(0u64)),
            col("shared_decode_s").fill_null(lit(0.0)),
            col("rejected_cohorts").fill_null(lit(0u32)),
            col("requests").fill_null(lit(0u32)),
            col("tokens").fill_null(lit(0u64)),
            col("unique_prompts").fill_null(lit(0u32)),
            col("capacity_retries").fill_null(lit(0u64)),
            col("errors").fill_null(lit(0u32)),
            col("inexact").fill_null(lit(0u32)),
        ])
        .with_columns([
            when(col("shared_decode_s").gt(lit(0.0)))
                .then(rate)
                .otherwise(lit(NULL).cast(DataType::Float64))
                .alias("decode_tok_s"),
            (col("tokens").cast(DataType::Float64) / col("seconds")).alias("phase_tok_s"),
            col("requests")
                .cast(DataType::UInt64)
                .eq(col("planned"))
                .and(col("inexact").eq(lit(0u32)))
                .alias("exact_tokens"),
        ])
        .with_column(
            (col("decode_tok_s") / col("concurrency").cast(DataType::Float64))
                .alias("mean_decode_per_stream"),
        );
    sorted(table, &["order"]).collect()
}

/// One row per concurrency level, ascending: the phases of the level in run order, their Q_decode
/// (non-null) and Q_phase, the paired means (Q_decode's only when every phase has one) and the TTFT
/// quantiles pooled over the level's requests.
pub fn curve_table(f: &Frames, reqs: &DataFrame, phases: &DataFrame) -> PolarsResult<DataFrame> {
    let levels = sorted(phases.clone().lazy(), &["order"])
        .group_by_stable(by(&["concurrency"]))
        .agg([
            col("phase"),
            col("decode_tok_s").drop_nulls().alias("q_decode"),
            col("phase_tok_s").alias("q_phase"),
            when(col("decode_tok_s").null_count().eq(lit(0u32)))
                .then(mean_of("decode_tok_s"))
                .otherwise(lit(NULL).cast(DataType::Float64))
                .alias("q_decode_mean"),
            mean_of("phase_tok_s").alias("q_phase_mean"),
        ]);
    let pooled = reqs
        .clone()
        .lazy()
        .join(
            f.phases
                .clone()
                .lazy()
                .select(by(&["phase", "concurrency"])),
            by(&["phase"]),
            by(&["phase"]),
            inner(),
        )
        .group_by(by(&["concurrency"]))
        .agg([
            col("ttft")
                .drop_nulls()
                .quantile(lit(0.5), QuantileMethod::Linear)
                .alias("ttft_median_s"),
            col("ttft")
                .drop_nulls()
                .quantile(lit(0.95), QuantileMethod::Linear)
                .alias("ttft_p95_s"),
        ]);
    let curve = levels.join(pooled, by(&["concurrency"]), by(&["concurrency"]), left());
    sorted(curve, &["concurrency"]).collect()
}
