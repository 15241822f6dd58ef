//! Attention inner loops over a contiguous block of cached keys/values of one KV head:
//! `scores[j] = q · k_j` and `out += Σ_j p_j · v_j`. The model's attention module
//! (`model::attention`) handles rings, bias, scale and softmax around them.

use super::{isa, reference, Isa};

/// `scores[j] = Σ_d q[d] · keys[j, d]` for keys [n, D].
pub fn scores(q: &[f32], keys: &[f32], out: &mut [f32]) {
    let d = q.len();
    assert!(
        keys.len() >= out.len() * d,
        "{} scores of width {d} need {} key values, got {}",
        out.len(),
        out.len() * d,
        keys.len()
    );
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: isa() checked AVX2 and FMA; keys holds out.len() rows of d (asserted above) and
        // the kernel reads q in steps of 8 up to d, a multiple of 8.
        Isa::Avx2 if d.is_multiple_of(8) => unsafe { avx2::scores(q, keys, out) },
        _ => {
            for (j, s) in out.iter_mut().enumerate() {
                *s = reference::dot(q, &keys[j * d..(j + 1) * d]);
            }
        }
    }
}

/// `out[d] += Σ_j p[j] · values[j, d]` for values [n, D].
pub fn weighted_sum(p: &[f32], values: &[f32], out: &mut [f32]) {
    let d = out.len();
    assert!(
        values.len() >= p.len() * d,
        "{} weights of width {d} need {} values, got {}",
        p.len(),
        p.len() * d,
        values.len()
    );
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: isa() checked AVX2 and FMA; values holds p.len() rows of d (asserted above) and
        // the kernel writes out in steps of 8 up to d, a multiple of 8.
        Isa::Avx2 if d.is_multiple_of(8) => unsafe { avx2::weighted_sum(p, values, out) },
        _ => {
            for (j, &pj) in p.iter().enumerate() {
                reference::axpy(pj, &values[j * d..(j + 1) * d], out);
            }
        }
    }
}

/// The relative-position bias of one query head at distances `0..bias.len()`: `bias[i] = Σ_k r[k] ·
/// table[k · extent + i]` (`table` [r.len(), extent], ARCHITECTURE.md §1.2). Summed over k in order;
/// with fused multiply-adds where the CPU has them (the same per element wherever it falls in a
/// vector, so a row's bias does not depend on how many distances are asked for).
pub fn rel_bias(r: &[f32], table: &[f32], extent: usize, bias: &mut [f32]) {
    assert!(
        bias.len() <= extent && table.len() >= r.len() * extent,
        "bias at {} distances from a [{}, {extent}] table of {} values",
        bias.len(),
        r.len(),
        table.len()
    );
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: isa() checked AVX2 and FMA; table holds r.len() rows of extent ≥ bias.len()
        // values (asserted above).
        Isa::Avx2 => unsafe { avx2::rel_bias(r, table, extent, bias) },
        _ => {
            bias.iter_mut().for_each(|b| *b = 0.0);
            for (k, &rv) in r.iter().enumerate() {
                let row = &table[k * extent..k * extent + bias.len()];
                for (b, &pv) in bias.iter_mut().zip(row) {
                    *b += rv * pv;
                }
            }
        }
    }
}

/// Scores of a tile to logits, returning their largest: `s_j = tau · (s_j · inv_d)` for `j < from`
/// and `s_j = tau · (s_j · inv_d + bias[j − from])` from there on (`bias` the tile's biased keys,
/// in key order).
fn scale_max(s: &mut [f32], from: usize, bias: &[f32], tau: f32, inv_d: f32) -> f32 {
    debug_assert_eq!(s.len(), from + bias.len());
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: isa() checked AVX2 and FMA; bias covers s[from..] (the caller's arithmetic).
        Isa::Avx2 => unsafe { avx2::scale_max(s, from, bias, tau, inv_d) },
        _ => {
            let (plain, biased) = s.split_at_mut(from);
            let mut mx = f32::NEG_INFINITY;
            for v in plain.iter_mut() {
                *v = tau * (*v * inv_d);
                mx = mx.max(*v);
            }
            for (v, &b) in biased.iter_mut().zip(bias) {
                *v = tau * (*v * inv_d + b);
                mx = mx.max(*v);
            }
            mx
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use crate::kernels::hsum256;

    /// Dot products four keys at a time (each q load serves four keys); the four sums reduce with
    /// two horizontal adds.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `q.len()` a multiple of 8; `keys` at least `out.len() *
    /// q.len()` values.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn scores(q: &[f32], keys: &[f32], out: &mut [f32]) {
        let d = q.len();
        let (qp, kp) = (q.as_ptr(), keys.as_ptr());
        let n = out.len();
        let mut j = 0;
        while j + 4 <= n {
            let k = kp.add(j * d);
            let mut a = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < d {
                let qv = _mm256_loadu_ps(qp.add(i));
                for (r, ar) in a.iter_mut().enumerate() {
                    *ar = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k.add(r * d + i)), *ar);
                }
                i += 8;
            }
            // [a0 a1 a2 a3] -> four sums
            let h01 = _mm256_hadd_ps(a[0], a[1]);
            let h23 = _mm256_hadd_ps(a[2], a[3]);
            let h = _mm256_hadd_ps(h01, h23);
            let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            _mm_storeu_ps(out.as_mut_ptr().add(j), s);
            j += 4;
        }
        while j < n {
            let k = kp.add(j * d);
            let mut a0 = _mm256_setzero_ps();
            let mut i = 0;
            while i < d {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i)), _mm256_loadu_ps(k.add(i)), a0);
                i += 8;
            }
            out[j] = hsum256(a0);
            j += 1;
        }
    }

    /// `out += Σ_j p_j v_j`, up to 64 output lanes per pass (eight independent chains); narrow
    /// heads
    /// alternate two accumulator sets over the keys to keep the FMA pipes busy.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `out.len()` a multiple of 8; `values` at least `p.len() *
    /// out.len()` values.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn weighted_sum(p: &[f32], values: &[f32], out: &mut [f32]) {
        let d = out.len();
        let mut i = 0;
        while i < d {
            let w = (d - i).min(64);
            match w / 8 {
                8 => pass::<8>(p, values, out, d, i),
                7 => pass::<7>(p, values, out, d, i),
                6 => pass::<6>(p, values, out, d, i),
                5 => pass::<5>(p, values, out, d, i),
                4 => pass::<4>(p, values, out, d, i),
                3 => pass::<3>(p, values, out, d, i),
                2 => pass::<2>(p, values, out, d, i),
                _ => pass::<1>(p, values, out, d, i),
            }
            i += w;
        }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn pass<const NV: usize>(
        p: &[f32],
        values: &[f32],
        out: &mut [f32],
        d: usize,
        i: usize,
    ) {
        let (vp, op) = (values.as_ptr(), out.as_mut_ptr());
        let mut a = [_mm256_setzero_ps(); NV];
        let mut b = [_mm256_setzero_ps(); NV];
        for k in 0..NV {
            a[k] = _mm256_loadu_ps(op.add(i + 8 * k));
        }
        let n = p.len();
        let mut j = 0;
        while j + 2 <= n {
            let (p0, p1) = (_mm256_set1_ps(p[j]), _mm256_set1_ps(p[j + 1]));
            let (v0, v1) = (vp.add(j * d + i), vp.add((j + 1) * d + i));
            for k in 0..NV {
                a[k] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v0.add(8 * k)), a[k]);
                b[k] = _mm256_fmadd_ps(p1, _mm256_loadu_ps(v1.add(8 * k)), b[k]);
            }
            j += 2;
        }
        if j < n {
            let p0 = _mm256_set1_ps(p[j]);
            let v0 = vp.add(j * d + i);
            for k in 0..NV {
                a[k] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v0.add(8 * k)), a[k]);
            }
        }
        for k in 0..NV {
            _mm256_storeu_ps(op.add(i + 8 * k), _mm256_add_ps(a[k], b[k]));
        }
    }

    /// `bias[i] = Σ_k r[k] · table[k · extent + i]`, 32 distances per pass held in registers.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `table` at least `r.len() * extent` values and `bias.len() <=
    /// extent`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn rel_bias(r: &[f32], table: &[f32], extent: usize, bias: &mut [f32]) {
        let (tp, n) = (table.as_ptr(), bias.len());
        let mut i = 0;
        while i + 32 <= n {
            let mut a = [_mm256_setzero_ps(); 4];
            for (k, &rv) in r.iter().enumerate() {
                let (rb, row) = (_mm256_set1_ps(rv), tp.add(k * extent + i));
                for (u, au) in a.iter_mut().enumerate() {
                    *au = _mm256_fmadd_ps(rb, _mm256_loadu_ps(row.add(8 * u)), *au);
                }
            }
            for (u, au) in a.iter().enumerate() {
                _mm256_storeu_ps(bias.as_mut_ptr().add(i + 8 * u), *au);
            }
            i += 32;
        }
        while i < n {
            let mut b = 0.0f32;
            for (k, &rv) in r.iter().enumerate() {
                b = rv.mul_add(*tp.add(k * extent + i), b);
            }
            bias[i] = b;
            i += 1;
        }
    }

    /// `scale_max` of the module, eight scores at a time; the scalar tails round exactly as the
    /// vector lanes do (fused multiply-add).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `bias.len() >= s.len() - from`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn scale_max(s: &mut [f32], from: usize, bias: &[f32], tau: f32, inv_d: f32) -> f32 {
        let (sp, bp) = (s.as_mut_ptr(), bias.as_ptr());
        let (tv, iv) = (_mm256_set1_ps(tau), _mm256_set1_ps(inv_d));
        let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut mx = f32::NEG_INFINITY;
        let mut j = 0;
        while j + 8 <= from {
            let v = _mm256_mul_ps(tv, _mm256_mul_ps(_mm256_loadu_ps(sp.add(j)), iv));
            _mm256_storeu_ps(sp.add(j), v);
            mv = _mm256_max_ps(mv, v);
            j += 8;
        }
        while j < from {
            let v = tau * (*sp.add(j) * inv_d);
            *sp.add(j) = v;
            mx = mx.max(v);
            j += 1;
        }
        let n = s.len();
        while j + 8 <= n {
            let x = _mm256_fmadd_ps(
                _mm256_loadu_ps(sp.add(j)),
                iv,
                _mm256_loadu_ps(bp.add(j - from)),
            );
            let v = _mm256_mul_ps(tv, x);
            _mm256_storeu_ps(sp.add(j), v);
            mv = _mm256_max_ps(mv, v);
            j += 8;
        }
        while j < n {
            let v = tau * (*sp.add(j)).mul_add(inv_d, *bp.add(j - from));
            *sp.add(j) = v;
            mx = mx.max(v);
            j += 1;
        }
        let mut lanes = [0.0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), mv);
        lanes.iter().fold(mx, |a, &b| a.max(b))
    }

    /// exp(x) for x ≤ 0 (inputs below −87.3 give 0): x = n·ln2 + r with |r| ≤ ln2/2, a degree-6
    /// polynomial for e^r, and 2^n built in the exponent bits.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn exp8(x: __m256) -> __m256 {
        let x = _mm256_max_ps(x, _mm256_set1_ps(-87.3));
        let n = _mm256_round_ps(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        );
        // r = x − n·ln2 in two steps (Cody–Waite)
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_145_75), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428_606_8e-6), r);
        let mut p = _mm256_set1_ps(1.0 / 720.0);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0 / 120.0));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0 / 24.0));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0 / 6.0));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0));
        let bits = _mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
            23,
        );
        _mm256_mul_ps(p, _mm256_castsi256_ps(bits))
    }

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_shifted(s: &mut [f32], m: f32) -> f32 {
        let mv = _mm256_set1_ps(m);
        let mut acc = _mm256_setzero_ps();
        let mut chunks = s.chunks_exact_mut(8);
        for c in &mut chunks {
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), mv));
            _mm256_storeu_ps(c.as_mut_ptr(), e);
            acc = _mm256_add_ps(acc, e);
        }
        let mut sum = hsum256(acc);
        for v in chunks.into_remainder() {
            *v = (*v - m).exp();
            sum += *v;
        }
        sum
    }
}

/// The running softmax of one query head over a range of keys: the largest score `m`, `l = Σ
/// exp(s − m)` and `acc = Σ exp(s − m) · v` ([D]). Partials over disjoint key ranges merge exactly
/// (in real arithmetic): see `merge`.
#[derive(Clone, Debug)]
pub struct Partial {
    pub m: f32,
    pub l: f32,
    pub acc: Vec<f32>,
}

impl Partial {
    pub fn empty(d: usize) -> Self {
        Partial {
            m: f32::NEG_INFINITY,
            l: 0.0,
            acc: vec![0.0; d],
        }
    }

    /// Fold `other` (a later key range) into self.
    pub fn merge(&mut self, other: &Partial) {
        if other.l == 0.0 {
            return;
        }
        let m = self.m.max(other.m);
        let (a, b) = ((self.m - m).exp(), (other.m - m).exp());
        self.l = self.l * a + other.l * b;
        for (x, &y) in self.acc.iter_mut().zip(&other.acc) {
            *x = *x * a + y * b;
        }
        self.m = m;
    }

    /// `acc / l` into out.
    pub fn finish(&self, out: &mut [f32]) {
        let inv = 1.0 / self.l;
        for (o, &a) in out.iter_mut().zip(&self.acc) {
            *o = a * inv;
        }
    }
}

/// How a block of keys is scored: `s_j = tau · (q · k_j · inv_d + bias[dist_j])`, where the key at
/// index j of the block lies `dist_j = dist0 − j` positions before the query and `bias` (per head,
/// `near` entries) applies only to distances below `near`.
#[derive(Clone, Copy, Debug)]
pub struct ScoreRule<'a> {
    pub tau: f32,
    pub inv_d: f32,
    /// [heads, near]
    pub bias: &'a [f32],
    pub near: usize,
    pub dist0: usize,
}

/// Keys per tile: scores of a tile stay in L1 and its keys and values in L2.
pub const TILE: usize = 32;

/// Update the partials of `heads` query heads (q [heads, D]) that share one KV head with a block of
/// keys and values ([n, D] each), tile by tile (online softmax). `scratch` holds TILE scores and
/// the bias of each head in key order.
pub fn attend_block(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    rule: &ScoreRule<'_>,
    parts: &mut [Partial],
    scratch: &mut Vec<f32>,
) {
    let d = parts.first().map_or(0, |p| p.acc.len());
    let n = keys.len() / d.max(1);
    let near = rule.near;
    scratch.resize(TILE + parts.len() * near, 0.0);
    let (s_all, rev) = scratch.split_at_mut(TILE);
    // each head's bias in key order: rev[x] is the bias at distance near − 1 − x; a block whose
    // nearest key (dist0 − n + 1 back) is already past `near` reads none of it
    if rule.dist0 + 1 < n + near {
        for (h, r) in rev
            .chunks_exact_mut(near.max(1))
            .enumerate()
            .take(parts.len())
        {
            for (x, v) in r.iter_mut().enumerate() {
                *v = rule.bias[h * near + near - 1 - x];
            }
        }
    }
    let mut t0 = 0;
    while t0 < n {
        let t = TILE.min(n - t0);
        let (kt, vt) = (&keys[t0 * d..(t0 + t) * d], &values[t0 * d..(t0 + t) * d]);
        // key j of the tile lies dist0 − t0 − j positions back: biased from `from` on, where
        // that distance drops below near, at rev[x0 + j − from]
        let far = (rule.dist0 - t0 + 1).saturating_sub(near);
        let from = far.min(t);
        let x0 = (near + t0 + from).saturating_sub(rule.dist0 + 1);
        for (h, part) in parts.iter_mut().enumerate() {
            let s = &mut s_all[..t];
            scores(&q[h * d..(h + 1) * d], kt, s);
            let bias = &rev[h * near + x0..h * near + x0 + (t - from)];
            let mx = scale_max(s, from, bias, rule.tau, rule.inv_d);
            let m = part.m.max(mx);
            let scale = if m == part.m { 1.0 } else { (part.m - m).exp() };
            let sum = exp_shifted(s, m);
            part.l = part.l * scale + sum;
            if scale != 1.0 {
                part.acc.iter_mut().for_each(|a| *a *= scale);
            }
            weighted_sum(s, vt, &mut part.acc);
            part.m = m;
        }
        t0 += t;
    }
}

/// `s_j = exp(s_j − m)` in place; returns Σ s_j. Vectorised with a polynomial exp (relative error
/// below 2e-7 on the arguments softmax produces, ≤ 0) where the CPU allows.
pub fn exp_shifted(s: &mut [f32], m: f32) -> f32 {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: isa() checked AVX2 and FMA.
        Isa::Avx2 => unsafe { avx2::exp_shifted(s, m) },
        _ => {
            let mut sum = 0.0;
            for v in s.iter_mut() {
                *v = (*v - m).exp();
                sum += *v;
            }
            sum
        }
    }
}
