//! The reliability table (docs/RESULTS.md's, and `scripts/reliability.sh`'s OUT/RELIABILITY.md) rendered from committed
//! records only: a faults run's findings, a soak's summary and the wire fuzzing record. `verify`
//! renders it again and compares.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use super::faults::{Fault, FaultsRecord};
use super::soak::SoakRecord;

fn ms(s: Option<f64>) -> String {
    match s {
        Some(s) if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        Some(s) => format!("{s:.2} s"),
        None => "never".to_string(),
    }
}

/// What a user sees when this fault happens (behaviour, stated once; the numbers are measured):
/// ridden through, streams held through the recovery (`held`: the fleet noticed and no stream in
/// flight was lost, as since the engine replays them), or streams ended (the records made before).
fn seen(f: &Fault, ridden_through: bool, held: bool) -> &'static str {
    if ridden_through {
        return "streams pause while the link is down and then go on; nothing is reported (TCP \
                resends what was lost)";
    }
    if held {
        return match f {
            Fault::Kill(_) | Fault::Stop(_) => {
                "streams in flight pause (a stopped role until the link's read times out, \
                 `--link-stall-s`), role 0 restarts the role, replays them and they carry on \
                 with the text they have alone; `/health` 503 `recovering` meanwhile, new \
                 requests 503 with Retry-After"
            }
            Fault::Cut(_) => {
                "streams in flight pause until the link's read times out (`--link-stall-s`) and \
                 the link returns; the chain relinks, role 0 replays them and they carry on with \
                 the text they have alone; `/health` 503 `recovering` meanwhile"
            }
            Fault::Gone(_) => {
                "streams in flight pause; past `--spare-after-s` role 0 finds the host \
                 unreachable, hands its role to the spare and relinks through it, replays them \
                 and they carry on with the text they have alone; the host, back later, finds its \
                 role taken and leaves"
            }
        };
    }
    match f {
        Fault::Kill(_) => {
            "streams in flight end with an error naming the role; `/health` 503 `recovering`; \
             new requests 503 with Retry-After; role 0 restarts the role"
        }
        Fault::Stop(_) => {
            "streams stall until the link's read times out (`--link-stall-s`), then end with an \
             error naming the role; then as for a kill (the stopped process is killed)"
        }
        Fault::Cut(_) => {
            "streams stall until the link's read times out (`--link-stall-s`), then end with an \
             error naming the link; `/health` 503 `recovering` until the link returns and the \
             chain relinks"
        }
        Fault::Gone(_) => {
            "streams stall until the link's read times out, then end with an error naming the \
             link; role 0 hands the role to the spare and relinks through it"
        }
    }
}

/// What holding the streams in flight cost (records that have the server's counts).
fn resumed(r: Option<&crate::reliability::faults::Resumed>) -> String {
    let Some(r) = r else {
        return String::new();
    };
    let pause = match (r.pause_median_s, r.pause_max_s) {
        (Some(m), Some(x)) => format!(
            ", their longest pause {} median, {} at most",
            ms(Some(m)),
            ms(Some(x))
        ),
        _ => String::new(),
    };
    let counted = match (r.server.tokens, r.client_tokens) {
        (Some(s), Some(c)) if s == c => format!("; server and clients counted {s} tokens"),
        (Some(s), Some(c)) => format!("; **the server counted {s} tokens, the clients {c}**"),
        _ => String::new(),
    };
    format!(
        "; {} held streams completed{pause}; the server replayed {} streams, {} rows{counted}",
        r.streams, r.server.streams_resumed, r.server.replay_rows
    )
}

fn name(f: &Fault, roles: Option<usize>) -> String {
    let last = |r: &usize| roles.is_some_and(|n| *r + 1 == n);
    match f {
        Fault::Kill(r) if last(r) => format!("`kill -9` role {r} (the last)"),
        Fault::Kill(r) => format!("`kill -9` role {r}"),
        Fault::Stop(r) if last(r) => format!("SIGSTOP role {r} (the last)"),
        Fault::Stop(r) => format!("SIGSTOP role {r}"),
        Fault::Cut(ms) => format!(
            "link cut for {} s (veth down in a network namespace)",
            *ms as f64 / 1000.0
        ),
        Fault::Gone(ms) => format!(
            "a role's host cut off for {} s, a spare listed (its namespace's veth down)",
            *ms as f64 / 1000.0
        ),
    }
}

fn fleet(model: &str, roles: Option<usize>) -> String {
    match roles {
        Some(n) => format!("{model}, {n} roles"),
        None => model.to_string(),
    }
}

/// The table, from the faults runs `faults` (directories), the soak `soak` and the fuzz record
/// `fuzz`, every path relative to `root` and shown as given.
pub fn render(root: &Path, faults: &[String], soak: &str, fuzz: &str) -> anyhow::Result<String> {
    let read = |p: &str| -> anyhow::Result<String> {
        std::fs::read_to_string(root.join(p)).with_context(|| format!("reading {p}"))
    };
    let mut out = String::from(
        "| fault | fleet | what the user sees | detected | ready again | streams lost | cost | checks | record |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for dir in faults {
        let path = format!("{dir}/faults.json");
        let rec: FaultsRecord = serde_json::from_str(&read(&path)?).context(path.clone())?;
        for (ev, f) in rec.scenarios.iter().zip(&rec.findings) {
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} of {} streams in flight lost; {} others; {} refused (503) while recovering{} | {} | `{path}` |",
                name(&ev.fault, rec.roles),
                fleet(&rec.model, rec.roles),
                seen(&ev.fault, f.ridden_through, f.broken == 0),
                if f.ridden_through { "not noticed".to_string() } else { ms(f.detect_s) },
                if f.ridden_through { "never unready".to_string() } else { ms(f.ready_s) },
                f.broken,
                f.broken - f.broken_after_unready,
                f.in_flight_at_fault,
                f.broken_after_unready,
                f.refused,
                resumed(f.resumed.as_ref()),
                match (f.passed, f.ridden_through) {
                    (true, true) => "pass: every stream complete, outputs as before".to_string(),
                    (true, false) => format!(
                        "pass: one recovery; {}/{} requests begun after it complete, outputs as \
                         before, no process leaked",
                        f.after_ready_complete, f.after_ready
                    ),
                    (false, _) => "**fail** (see the record)".to_string(),
                },
            )?;
        }
    }
    let path = format!("{soak}/soak.json");
    let rec: SoakRecord = serde_json::from_str(&read(&path)?).context(path.clone())?;
    let s = &rec.summary;
    let c = &rec.config;
    let growth = s
        .procs
        .iter()
        .filter_map(|p| {
            Some(p.rss_max_second_half_kib? as f64 / p.rss_max_first_half_kib? as f64 - 1.0)
        })
        .reduce(f64::max)
        .unwrap_or(f64::NAN);
    let role0 = s.procs.first();
    let failed: Vec<&str> = (s.checks.iter())
        .filter(|(_, ok)| !**ok)
        .map(|(name, _)| name.as_str())
        .collect();
    let pairs: Vec<String> = (s.procs.iter())
        .map(|p| {
            let n = |f: Option<u64>| f.map_or("?".to_string(), |f| f.to_string());
            format!("{}/{}", n(p.fds_idle_after), n(p.fds_idle_before))
        })
        .collect();
    let fds = match pairs.split_first() {
        Some((first, rest)) if !rest.is_empty() && rest.iter().all(|p| p == &rest[0]) => {
            format!("role 0 {first}, the others {}", rest[0])
        }
        _ => pairs.join(", "),
    };
    let verdict = if s.passed {
        "pass".to_string()
    } else {
        format!("**fail** ({})", failed.join(", "))
    };
    writeln!(
        out,
        "| soak: {} streams for {:.0} min, {}× bursts of {:.0} s every {:.0} s | {} | every output compared with the prompt's output alone; {} requests, {} at-capacity 503s retried | | | no fault made | {} corrupted, {} truncated | {verdict}: server tokens {} (client {}); largest RSS growth first→second half {:+.2} % (role 0 {}→{} MiB under load); descriptors idle after/before: {fds} | `{path}` |",
        c.streams,
        c.duration_s / 60.0,
        c.burst_factor,
        c.burst_s,
        c.burst_every_s,
        fleet(&rec.model, Some(s.procs.len())),
        s.requests,
        s.capacity_retries,
        s.corrupted,
        s.truncated,
        s.server_tokens,
        s.client_tokens,
        growth * 100.0,
        role0.and_then(|p| p.rss_load_first_kib).unwrap_or(0) / 1024,
        role0.and_then(|p| p.rss_load_last_kib).unwrap_or(0) / 1024,
    )?;
    let fz: Value = serde_json::from_str(&read(fuzz)?).context(fuzz.to_string())?;
    writeln!(
        out,
        "| malformed frames on a role link (coverage-guided fuzzing of the wire decoder) | decoder | a clear error for the link; no panic, no allocation beyond the input's size | | | no fault made | | {} inputs, {} crashes, coverage {} | `{fuzz}` |",
        fz["executions"],
        fz["crash_reports"],
        fz["coverage"]["cov"],
    )?;
    Ok(out)
}
