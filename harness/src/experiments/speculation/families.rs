//! Speculation per prompt family: each request's decode rate with a proposer set over the same
//! prompt's rate without speculation in the same pass, with its proposals (`families.csv` / `.md`;
//! pure functions of the runs).

use std::fmt::Write as _;

use super::cells::cell;
use super::runs::{ConfigRun, PASSES};

/// `families.csv`: per configuration, pass and family, the request's decode rate, its ratio to
/// speculation off for the same prompt in the same pass, and its proposals.
pub fn families_csv(configs: &[ConfigRun]) -> String {
    let off = &configs[0];
    let mut s = String::from(
        "key,config,pass,family,decode_tok_s,ratio_to_off,proposed,accepted,drafts,identical_to_off\n",
    );
    for c in configs {
        for (pi, (p, o)) in c.passes.iter().zip(&off.passes).enumerate() {
            for r in &p.requests {
                let Some(base) = o.requests.iter().find(|x| x.family == r.family) else {
                    continue;
                };
                let _ = writeln!(
                    s,
                    "{0}/{1}/{2},{0},{1},{2},{3},{4},{5},{6},{7},{8}",
                    c.name,
                    PASSES[pi],
                    r.family,
                    r.decode_tok_s,
                    r.decode_tok_s / base.decode_tok_s,
                    r.proposed,
                    r.accepted,
                    r.drafts,
                    r.text == base.text
                );
            }
        }
    }
    s
}

/// `families.md`: the speed-up of every proposer set per family, first pass and repeated pass.
pub fn families_md(configs: &[ConfigRun]) -> String {
    let off = &configs[0];
    let mut s = String::from(
        "# Speculation per family: decode rate with speculation over the rate without\n\n\
         Each cell is one request: its decode rate with that proposer set on, over the same prompt's \
         rate with speculation off in the same pass (fresh fleets, one session); in brackets the \
         proposals accepted of those made.\n",
    );
    for (pi, title) in ["First", "Repeated"].iter().enumerate() {
        let _ = write!(s, "\n## {title} pass\n\n| family | off (tok/s) |");
        for c in &configs[1..] {
            let _ = write!(s, " {} |", c.name);
        }
        s.push_str("\n|---|---:|");
        s.push_str(&"---:|".repeat(configs.len() - 1));
        s.push('\n');
        for base in &off.passes[pi].requests {
            let _ = write!(s, "| {} | {} |", base.family, cell(base.decode_tok_s, 2));
            for c in &configs[1..] {
                match c.passes[pi]
                    .requests
                    .iter()
                    .find(|r| r.family == base.family)
                {
                    Some(r) => {
                        let _ = write!(
                            s,
                            " {}× ({}/{}) |",
                            cell(r.decode_tok_s / base.decode_tok_s, 2),
                            r.accepted,
                            r.proposed
                        );
                    }
                    None => s.push_str(" – |"),
                }
            }
            s.push('\n');
        }
    }
    s
}
