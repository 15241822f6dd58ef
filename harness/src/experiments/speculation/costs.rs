//! What speculation costs the roles, from each configuration's `profile.json` (every role's
//! counters from `/api/profile` at the end of its run, the unit's `steps`) and the tokens
//! its requests emitted: rows every role computed per emitted token (1 without speculation, plus
//! the prompt's rows; each wasted proposal adds one), the roles' compute time per emitted token
//! summed over roles (on a host with fewer cores than roles, the time the cores are busy), and the
//! draft head's time in the last role. The first-order model (`model`) assumes the extra rows are
//! free, which holds on a fleet of one machine per role and not on two shared cores.

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

use super::runs::ConfigRun;

#[derive(Deserialize)]
struct Profile {
    roles: Vec<RoleCounters>,
}

#[derive(Deserialize)]
struct RoleCounters {
    rows: u64,
    compute_ns: u64,
    #[serde(default)]
    draft_ns: u64,
    #[serde(default)]
    drafted_rows: u64,
}

/// `costs.csv` (empty when no configuration kept its profile).
pub fn costs_csv(root: &Path, configs: &[ConfigRun]) -> anyhow::Result<Option<String>> {
    let mut s = String::from(
        "config,tokens,rows_per_token,compute_ms_per_token,draft_ms_per_token,draft_ms_per_drafted_row\n",
    );
    let mut any = false;
    for c in configs {
        let path = root.join(&c.name).join("profile.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let p: Profile =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let Some(first) = p.roles.first() else {
            anyhow::bail!("{}: no roles", path.display());
        };
        any = true;
        let tokens: u64 = c
            .passes
            .iter()
            .flat_map(|p| &p.requests)
            .map(|r| r.tokens)
            .sum();
        let t = tokens.max(1) as f64;
        let compute: u64 = p.roles.iter().map(|r| r.compute_ns).sum();
        let draft: u64 = p.roles.iter().map(|r| r.draft_ns).sum();
        let drafted: u64 = p.roles.iter().map(|r| r.drafted_rows).sum();
        let _ = writeln!(
            s,
            "{},{tokens},{},{},{},{}",
            c.name,
            first.rows as f64 / t,
            compute as f64 / 1e6 / t,
            draft as f64 / 1e6 / t,
            if drafted == 0 {
                f64::NAN
            } else {
                draft as f64 / 1e6 / drafted as f64
            }
        );
    }
    Ok(any.then_some(s))
}

/// `costs.md`.
pub fn costs_md(csv: &str) -> String {
    let t = crate::csv::Table::parse(csv);
    let mut s = String::from(
        "# What speculation costs the roles\n\n\
         Per configuration, over both passes: rows each role computed per emitted token (the \
         prompt's rows included; a wasted proposal is one more row in every role), the roles' \
         compute time per emitted token summed over all roles (the draft head's included), and \
         the draft head's own time in the last role. From each run's `profile.json` \
         (`/api/profile` at its end) and its traces.\n\n\
         | proposers | tokens | rows per token | compute per token (ms, all roles) | draft head per token (ms) | draft head per drafted row (ms) |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    let cell = |v: &str, d: usize| match v.parse::<f64>() {
        Ok(x) if x.is_finite() => format!("{x:.d$}"),
        _ => "–".into(),
    };
    for r in &t.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            r[0],
            r[1],
            cell(&r[2], 2),
            cell(&r[3], 1),
            cell(&r[4], 1),
            cell(&r[5], 2)
        );
    }
    s
}
