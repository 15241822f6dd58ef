//! Two sides' greedy continuations of the same prompts, compared token for token: whether each
//! prompt's ids are identical, and where they are not, the first position that differs, the token
//! each side chose there and each side's top-2 margin (a divergence at a near-tie is expected of
//! two implementations whose sums round differently; one at a wide margin is a bug), with the
//! noise before it: |Δ logprob| of the chosen token at the positions both sides agreed on (apart
//! for the positions whose top-2 a side refilled by a second evaluation), and the narrowest
//! reference margin at which both still chose the same token.
//! Pure functions of the records.

use anyhow::{bail, Context};

use super::record::Record;

/// One prompt, the reference side (llama-server, or the single process) against the candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptParity {
    pub id: String,
    pub prompt_tokens: usize,
    pub reference_tokens: usize,
    pub candidate_tokens: usize,
    /// The first generated position where the ids differ (or where one side has ended);
    /// None: identical.
    pub diverge_at: Option<usize>,
    /// Each side's token there (None: that side had ended).
    pub reference_token: Option<u32>,
    pub candidate_token: Option<u32>,
    /// Each side's top-2 log-probability margin there, where recorded.
    pub reference_margin: Option<f64>,
    pub candidate_margin: Option<f64>,
    /// Each side's second choice there is the other's first (a swap of the two best).
    pub swapped: Option<bool>,
    /// |Δ logprob| of the chosen token over the positions before the divergence (all of them
    /// when identical) where both sides recorded it while generating.
    pub noise: Noise,
    /// The same over the positions before the divergence whose top-2 a side refilled.
    pub refilled: Noise,
    /// The narrowest reference top-2 margin at a position before the divergence (recorded while
    /// generating), with that position: both sides chose the same token there.
    pub narrowest: Option<(f64, usize)>,
    /// The reference top-2 margin at every position before the divergence recorded while
    /// generating (both sides chose the same token there).
    pub agreed_margins: Vec<f64>,
}

impl PromptParity {
    pub fn identical(&self) -> bool {
        self.diverge_at.is_none()
    }
}

/// |Δ logprob| of the chosen token: sum, largest, positions.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Noise {
    pub sum: f64,
    pub max: f64,
    pub positions: usize,
}

impl Noise {
    fn add(&mut self, d: f64) {
        self.sum += d;
        self.max = self.max.max(d);
        self.positions += 1;
    }

    pub fn mean(&self) -> Option<f64> {
        (self.positions > 0).then(|| self.sum / self.positions as f64)
    }

    /// Pooled over prompts.
    pub fn pooled<'a>(all: impl IntoIterator<Item = &'a Noise>) -> Noise {
        all.into_iter().fold(Noise::default(), |a, n| Noise {
            sum: a.sum + n.sum,
            max: a.max.max(n.max),
            positions: a.positions + n.positions,
        })
    }
}

/// One prompt of both sides (same id).
pub fn compare_one(r: &Record, c: &Record) -> anyhow::Result<PromptParity> {
    if r.prompt_ids != c.prompt_ids {
        bail!(
            "prompt '{}': the two sides were given different prompt ids (not the same input)",
            r.id
        );
    }
    let (a, b) = (&r.generated_ids, &c.generated_ids);
    let diverge_at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())));
    let agreed = diverge_at.unwrap_or(a.len());
    let (mut noise, mut refilled) = (Noise::default(), Noise::default());
    let mut narrowest: Option<(f64, usize)> = None;
    let mut agreed_margins = Vec::new();
    for (pos, &t) in a.iter().enumerate().take(agreed) {
        let again = r.refilled(pos) || c.refilled(pos);
        if let (Some(x), Some(y)) = (r.logprob(pos, t), c.logprob(pos, t)) {
            if again { &mut refilled } else { &mut noise }.add((x - y).abs());
        }
        if let Some(m) = r.margin(pos).filter(|_| !again) {
            agreed_margins.push(m);
            if narrowest.is_none_or(|n| m < n.0) {
                narrowest = Some((m, pos));
            }
        }
    }
    let at = |p: Option<usize>, f: &dyn Fn(usize) -> Option<f64>| p.and_then(f);
    let swapped = diverge_at.and_then(|p| {
        let (r1, r2) = (r.candidate(p, 0)?, r.candidate(p, 1)?);
        let (c1, c2) = (c.candidate(p, 0)?, c.candidate(p, 1)?);
        Some(r1 == c2 && c1 == r2)
    });
    Ok(PromptParity {
        id: r.id.clone(),
        prompt_tokens: r.prompt_ids.len(),
        reference_tokens: a.len(),
        candidate_tokens: b.len(),
        diverge_at,
        reference_token: diverge_at.and_then(|p| a.get(p).copied()),
        candidate_token: diverge_at.and_then(|p| b.get(p).copied()),
        reference_margin: at(diverge_at, &|p| r.margin(p)),
        candidate_margin: at(diverge_at, &|p| c.margin(p)),
        swapped,
        noise,
        refilled,
        narrowest,
        agreed_margins,
    })
}

/// Every prompt of `reference`, in its order, against the candidate's record of the same id;
/// the two must hold the same prompts.
pub fn compare(reference: &[Record], candidate: &[Record]) -> anyhow::Result<Vec<PromptParity>> {
    if let Some(extra) = candidate
        .iter()
        .find(|c| !reference.iter().any(|r| r.id == c.id))
    {
        bail!(
            "prompt '{}' is in the candidate's record only: not the same prompt set",
            extra.id
        );
    }
    reference
        .iter()
        .map(|r| {
            let c = candidate.iter().find(|c| c.id == r.id).with_context(|| {
                format!(
                    "prompt '{}' is missing from the candidate's record (the run stopped early?)",
                    r.id
                )
            })?;
            compare_one(r, c)
        })
        .collect()
}

/// Prompts identical token for token.
pub fn identical(rows: &[PromptParity]) -> usize {
    rows.iter().filter(|p| p.identical()).count()
}

/// The largest margin at a divergence on one side, with its prompt (None: no divergence with
/// that side's margin recorded).
pub fn largest_margin(
    rows: &[PromptParity],
    side: impl Fn(&PromptParity) -> Option<f64>,
) -> Option<(f64, &PromptParity)> {
    rows.iter()
        .filter_map(|p| side(p).map(|m| (m, p)))
        .max_by(|x, y| x.0.total_cmp(&y.0))
}

#[cfg(test)]
mod tests {
    use super::super::record;
    use super::*;

    fn rec(id: &str, gen: &[u32], top: &[[(u32, f64); 2]]) -> Record {
        Record {
            id: id.into(),
            prompt_ids: vec![1, 2],
            generated_ids: gen.to_vec(),
            top: (!top.is_empty()).then(|| top.iter().map(|t| t.to_vec()).collect()),
            top_refilled: Vec::new(),
        }
    }

    #[test]
    fn a_swap_at_a_near_tie_is_found_with_both_margins_and_the_noise_before_it() {
        let r = rec(
            "p",
            &[5, 6, 7],
            &[
                [(5, -0.5), (9, -1.5)],
                [(6, -1.0), (8, -1.25)],
                [(7, -0.1), (1, -3.0)],
            ],
        );
        let c = rec(
            "p",
            &[5, 8, 7],
            &[
                [(5, -0.75), (9, -1.0)],
                [(8, -1.1), (6, -1.125)],
                [(7, -0.1), (1, -3.0)],
            ],
        );
        let p = compare_one(&r, &c).unwrap();
        assert_eq!(p.diverge_at, Some(1));
        assert_eq!((p.reference_token, p.candidate_token), (Some(6), Some(8)));
        assert_eq!(p.reference_margin, Some(0.25));
        assert!((p.candidate_margin.unwrap() - 0.025).abs() < 1e-12);
        assert_eq!(p.swapped, Some(true));
        // only position 0 is before the divergence
        assert_eq!(p.noise.positions, 1);
        assert_eq!(p.noise.mean(), Some(0.25));
        assert!(!p.identical());
    }

    #[test]
    fn identical_records_and_an_early_end_and_ids_without_logprobs() {
        let r = rec(
            "p",
            &[5, 6],
            &[[(5, -0.5), (9, -1.5)], [(6, -1.0), (8, -1.5)]],
        );
        let p = compare_one(&r, &r).unwrap();
        assert!(p.identical());
        assert_eq!(p.noise.positions, 2);
        assert_eq!(p.noise.mean(), Some(0.0));
        assert_eq!(p.narrowest, Some((0.5, 1)));
        assert_eq!(p.agreed_margins, [1.0, 0.5]);
        // a refilled position counts apart and is no decision margin
        let mut q = r.clone();
        q.top_refilled.push(record::Refilled { index: 1 });
        q.top.as_mut().unwrap()[1][0].1 = -0.875;
        let p = compare_one(&q, &r).unwrap();
        assert_eq!((p.noise.positions, p.refilled.positions), (1, 1));
        assert_eq!(p.refilled.max, 0.125);
        assert_eq!(p.narrowest, Some((1.0, 0)));
        // the fleet's records carry ids only
        let f = rec("p", &[5], &[]);
        let p = compare_one(&r, &f).unwrap();
        assert_eq!(p.diverge_at, Some(1));
        assert_eq!((p.reference_token, p.candidate_token), (Some(6), None));
        assert_eq!((p.reference_margin, p.candidate_margin), (Some(0.5), None));
        assert_eq!(p.swapped, None);
        assert_eq!(p.noise.positions, 0);
    }

    #[test]
    fn different_prompts_or_prompt_sets_are_refused() {
        let a = rec("p", &[5], &[]);
        let mut b = a.clone();
        b.prompt_ids.push(3);
        assert!(compare_one(&a, &b)
            .unwrap_err()
            .to_string()
            .contains("different prompt ids"));
        let q = rec("q", &[5], &[]);
        assert!(compare(std::slice::from_ref(&a), &[a.clone(), q.clone()]).is_err());
        assert!(format!("{:#}", compare(&[a.clone(), q], &[a]).unwrap_err()).contains("missing"));
    }

    #[test]
    fn the_largest_margin_names_its_prompt() {
        let r = rec("a", &[5], &[[(5, -0.5), (9, -1.5)]]);
        let c = rec("a", &[9], &[[(9, -0.5), (5, -0.6)]]);
        let r2 = rec("b", &[5], &[[(5, -0.1), (9, -0.2)]]);
        let c2 = rec("b", &[9], &[[(9, -0.5), (5, -0.6)]]);
        let rows = compare(&[r, r2], &[c, c2]).unwrap();
        let (m, p) = largest_margin(&rows, |p| p.reference_margin).unwrap();
        assert_eq!((m, p.id.as_str()), (1.0, "a"));
        assert_eq!(identical(&rows), 0);
    }
}
