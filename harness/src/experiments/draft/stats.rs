//! The statistics of MEASUREMENTS.md §5, as pure functions of the anchor rows: a hit is a
//! prediction equal to the token the model emitted; first-draft agreement is module 0's hit rate
//! pooled over all anchors; per module (draft k = module + 1): its hit rate `a`, its hit rate given
//! that every earlier module hit at the same anchor (`cond`, over `n_cond` anchors), and `prefix_k`
//! = the share of the module's anchors at which modules 1..k all hit; `E = Σ_k prefix_k`.

use std::collections::HashMap;

use serde::Serialize;

use super::anchors::Anchors;

/// Hits over anchors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Agreement {
    pub anchors: usize,
    pub hits: usize,
}

impl Agreement {
    pub fn rate(&self) -> f64 {
        if self.anchors == 0 {
            f64::NAN
        } else {
            self.hits as f64 / self.anchors as f64
        }
    }
}

/// Module 0's agreement between `preds` and `targets` (columns of `a`), over every anchor or one
/// family's.
pub fn first_draft(a: &Anchors, preds: &[u32], targets: &[u32], family: Option<&str>) -> Agreement {
    let mut g = Agreement::default();
    for i in 0..a.len() {
        if a.module[i] != 0 || family.is_some_and(|f| a.family[i] != f) {
            continue;
        }
        g.anchors += 1;
        g.hits += (preds[i] == targets[i]) as usize;
    }
    g
}

/// One row of the chain table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChainRow {
    /// Draft k = module + 1 (the paper's numbering).
    pub k: usize,
    pub n: usize,
    pub hits: usize,
    pub a: f64,
    pub n_cond: usize,
    /// None when no anchor had every earlier module hit.
    pub cond: Option<f64>,
    pub prefix: f64,
}

/// The chain statistics of a prediction column against the targets.
pub fn chain(a: &Anchors, preds: &[u32]) -> Vec<ChainRow> {
    // (seq, anchor) -> bit m set when module m hit there
    let mut hit: HashMap<(u32, u32), u32> = HashMap::new();
    let mut modules = 0usize;
    for i in 0..a.len() {
        let m = a.module[i] as usize;
        modules = modules.max(m + 1);
        if preds[i] == a.target[i] {
            *hit.entry((a.seq[i], a.anchor[i])).or_default() |= 1 << m;
        }
    }
    (0..modules)
        .map(|m| {
            let (mut n, mut hits, mut n_cond, mut cond_hits, mut prefix_hits) = (0, 0, 0, 0, 0);
            let earlier = (1u32 << m) - 1;
            for i in (0..a.len()).filter(|&i| a.module[i] as usize == m) {
                let bits = hit.get(&(a.seq[i], a.anchor[i])).copied().unwrap_or(0);
                let me = bits >> m & 1 == 1;
                n += 1;
                hits += me as usize;
                if bits & earlier == earlier {
                    n_cond += 1;
                    cond_hits += me as usize;
                    prefix_hits += me as usize;
                }
            }
            let rate = |x: usize, d: usize| {
                if d == 0 {
                    f64::NAN
                } else {
                    x as f64 / d as f64
                }
            };
            ChainRow {
                k: m + 1,
                n,
                hits,
                a: rate(hits, n),
                n_cond,
                cond: (n_cond > 0).then(|| rate(cond_hits, n_cond)),
                prefix: rate(prefix_hits, n),
            }
        })
        .collect()
}

/// Expected accepted drafts `E = Σ_k prefix_k`.
pub fn expected_accepted(rows: &[ChainRow]) -> f64 {
    rows.iter().map(|r| r.prefix).sum()
}

/// The hit rate of two independent draws with the given marginals, `Σ_v p(v) q(v)`: what a
/// predictor that knows only how often each token occurs achieves against shuffled labels.
pub fn marginal_chance(preds: &[u32], targets: &[u32]) -> f64 {
    let mut p: HashMap<u32, f64> = HashMap::new();
    let mut q: HashMap<u32, f64> = HashMap::new();
    for &x in preds {
        *p.entry(x).or_default() += 1.0 / preds.len() as f64;
    }
    for &y in targets {
        *q.entry(y).or_default() += 1.0 / targets.len() as f64;
    }
    p.iter()
        .map(|(v, pv)| pv * q.get(v).copied().unwrap_or(0.0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sequences, three modules; anchors chosen so every statistic is checkable by hand.
    fn sample() -> (Anchors, Vec<u32>) {
        // (seq, anchor, module, target, pred)
        let rows = [
            (0, 5, 0, 1, 1),
            (0, 5, 1, 2, 2),
            (0, 5, 2, 3, 9),
            (0, 6, 0, 4, 4),
            (0, 6, 1, 5, 9),
            (0, 6, 2, 6, 6), // hit, but module 1 missed: not in prefix
            (1, 9, 0, 7, 9),
            (1, 9, 1, 8, 8), // hit after a module-0 miss
        ];
        let mut a = Anchors {
            columns: vec!["p".into()],
            preds: vec![Vec::new()],
            ..Default::default()
        };
        for (s, t, m, y, p) in rows {
            a.seq.push(s);
            a.family.push(if s == 0 { "code" } else { "poem" }.into());
            a.anchor.push(t);
            a.module.push(m);
            a.target.push(y);
            a.target_shuffled.push(y);
            a.preds[0].push(p);
        }
        let p = a.preds[0].clone();
        (a, p)
    }

    #[test]
    fn first_draft_and_per_family() {
        let (a, p) = sample();
        assert_eq!(
            first_draft(&a, &p, &a.target, None),
            Agreement {
                anchors: 3,
                hits: 2
            }
        );
        assert_eq!(first_draft(&a, &p, &a.target, Some("poem")).hits, 0);
    }

    #[test]
    fn chain_by_hand() {
        let (a, p) = sample();
        let c = chain(&a, &p);
        assert_eq!(c.len(), 3);
        // module 0: 2 of 3
        assert_eq!((c[0].n, c[0].hits, c[0].n_cond), (3, 2, 3));
        assert!((c[0].prefix - 2.0 / 3.0).abs() < 1e-12);
        // module 1: hits at (0,5) and (1,9); earlier all hit at (0,5), (0,6): cond 1/2
        assert_eq!((c[1].n, c[1].hits, c[1].n_cond), (3, 2, 2));
        assert_eq!(c[1].cond, Some(0.5));
        assert!((c[1].prefix - 1.0 / 3.0).abs() < 1e-12);
        // module 2: only seq 0; earlier all hit only at (0,5), where it missed
        assert_eq!((c[2].n, c[2].hits, c[2].n_cond), (2, 1, 1));
        assert_eq!((c[2].cond, c[2].prefix), (Some(0.0), 0.0));
        assert!((expected_accepted(&c) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn marginal_chance_of_independent_draws() {
        // p = half 1, half 2; q = all 2: chance 0.5
        assert!((marginal_chance(&[1, 2, 1, 2], &[2, 2]) - 0.5).abs() < 1e-12);
    }
}
