//! The scores of `attend_x86`: `vecmath::dot_f16` of a query head with each cached key, in the
//! host layout's order (16 or 8 lanes of f32 per ggml register), vectorised key by key, sixteen
//! keys at a time where AVX-512 is (the whole steps of a 64- or 128-wide head reduced side by
//! side, a tail past the whole steps as sixteen chains of f64 adds). Each value has the plain
//! code's bits; `attention::tests` holds them to it.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::vecmath::Simd;

/// Keys whose dot products are computed together before the softmax walks them.
pub(super) const CHUNK: usize = 64;

/// Values one step of the dot product consumes (four registers).
pub(super) fn step(simd: Simd) -> usize {
    match simd {
        Simd::Avx512 => 64,
        Simd::Avx2 => 32,
    }
}

/// `vecmath::dot_f16`: over the whole steps four accumulators of the layout's lanes (two
/// `__m256` each for 16 lanes), folded (0+2, 1+3), (0+1), then reduced in the layout's order; the
/// tail's products added to that in f64.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f16(simd: Simd, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let whole = n - n % step(simd);
    let mut s = dot_steps(simd, &a[..whole], &b[..whole]) as f64;
    for i in whole..n {
        s += (a[i] * b[i]) as f64;
    }
    s as f32
}

/// `dot_f16` of each key row of `keys` ([out.len(), q.len()]) with `q`, into `out`: each value
/// is the one `dot_f16` gives. A tail past the layout's whole steps (all of a 32-wide head under
/// the AVX-512 layout) is a chain of f64 additions, one product at a time; eight keys run their
/// chains side by side here (lanes of two `__m256d`, the products moved into key order by 4 x 4
/// transposes), each chain adding the same f32 products in the same order.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot_f16_keys(simd: Simd, keys: &[f32], q: &[f32], out: &mut [f32]) {
    let d = q.len();
    let whole = d - d % step(simd);
    let m = out.len();
    debug_assert!(keys.len() >= m * d && d.is_multiple_of(8));
    let mut j = 0;
    if whole < d {
        let qp = q.as_ptr();
        while j + 8 <= m {
            let k = |r: usize| keys.as_ptr().add((j + r) * d);
            let mut base = [0.0f64; 8];
            for (r, b) in base.iter_mut().enumerate() {
                *b = dot_steps(simd, std::slice::from_raw_parts(k(r), whole), &q[..whole]) as f64;
            }
            let mut s0 = _mm256_loadu_pd(base.as_ptr());
            let mut s1 = _mm256_loadu_pd(base.as_ptr().add(4));
            for i in (whole..d).step_by(4) {
                let qv = _mm_loadu_ps(qp.add(i));
                let p: [__m128; 8] =
                    std::array::from_fn(|r| _mm_mul_ps(_mm_loadu_ps(k(r).add(i)), qv));
                let a = transpose4(p[0], p[1], p[2], p[3]);
                let b = transpose4(p[4], p[5], p[6], p[7]);
                for e in 0..4 {
                    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(a[e]));
                    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(b[e]));
                }
            }
            let mut sums = [0.0f64; 8];
            _mm256_storeu_pd(sums.as_mut_ptr(), s0);
            _mm256_storeu_pd(sums.as_mut_ptr().add(4), s1);
            for (o, &v) in out[j..j + 8].iter_mut().zip(&sums) {
                *o = v as f32;
            }
            j += 8;
        }
    }
    for (jj, o) in out.iter_mut().enumerate().skip(j) {
        *o = dot_f16(simd, &keys[jj * d..(jj + 1) * d], q);
    }
}

/// `dot_f16_keys` under the AVX-512 layout for a head of whole steps (`d` a multiple of 64), over
/// the whole blocks of sixteen keys of `keys` ([out.len(), d]); returns the keys done (out.len()
/// rounded down to sixteen). Each key's four 16-lane sums and their fold are `dot_steps`' in
/// 512-bit registers; then sixteen keys' folded registers reduce side by side (`reduce16`), each
/// lane adding the pairs `reduce_add_16` adds in its order, where `dot_steps` stores each key's
/// register and adds its lanes one at a time. The same bits.
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and FMA; `d` is a multiple of 64, `q` holds `d` values and `keys`
/// `out.len()` rows of `d`.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn dot_whole16(d: usize, keys: &[f32], q: &[f32], out: &mut [f32]) -> usize {
    let m = out.len();
    debug_assert!(d.is_multiple_of(64) && q.len() == d && keys.len() >= m * d);
    let (kp, qp) = (keys.as_ptr(), q.as_ptr());
    for b in 0..m / 16 {
        let mut x = [_mm512_setzero_ps(); 16];
        for (k, xk) in x.iter_mut().enumerate() {
            let key = kp.add((b * 16 + k) * d);
            let mut s = [_mm512_setzero_ps(); 4];
            for i in (0..d).step_by(64) {
                for (j, sj) in s.iter_mut().enumerate() {
                    let at = i + 16 * j;
                    *sj = _mm512_fmadd_ps(
                        _mm512_loadu_ps(key.add(at)),
                        _mm512_loadu_ps(qp.add(at)),
                        *sj,
                    );
                }
            }
            *xk = _mm512_add_ps(_mm512_add_ps(s[0], s[2]), _mm512_add_ps(s[1], s[3]));
        }
        _mm512_storeu_ps(out.as_mut_ptr().add(b * 16), reduce16(&x));
    }
    m - m % 16
}

/// `reduce_add_16` of sixteen registers at once, lane k of the result key k's: the 256-bit halves
/// (lanes l and l + 8), then the 128-bit halves of those (l and l + 4), then lanes (0 + 2) and
/// (1 + 3), then the two, each level pairing the lanes its scalar form pairs (two, then four,
/// then eight keys to a register, then all sixteen), and a permute into key order.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn reduce16(x: &[__m512; 16]) -> __m512 {
    // keys 2m (lanes 0..8) and 2m + 1 (8..16): t8[l] = x[l + 8] + x[l]
    let y: [__m512; 8] = std::array::from_fn(|m| {
        let (a, b) = (x[2 * m], x[2 * m + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0xEE>(a, b),
            _mm512_shuffle_f32x4::<0x44>(a, b),
        )
    });
    // quarter q of z[n] is key 4n + q: t4[l] = t8[l + 4] + t8[l]
    let z: [__m512; 4] = std::array::from_fn(|n| {
        let (a, b) = (y[2 * n], y[2 * n + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0xDD>(a, b),
            _mm512_shuffle_f32x4::<0x88>(a, b),
        )
    });
    // quarter q of w[p]: (t4[0] + t4[2], t4[1] + t4[3]) of keys 8p + q, then 8p + 4 + q
    let w: [__m512; 2] = std::array::from_fn(|p| {
        let (a, b) = (z[2 * p], z[2 * p + 1]);
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(a, b),
            _mm512_shuffle_ps::<0xEE>(a, b),
        )
    });
    // lane 4q + i: key 4i + q's (t4[0] + t4[2]) + (t4[1] + t4[3])
    let r = _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(w[0], w[1]),
        _mm512_shuffle_ps::<0xDD>(w[0], w[1]),
    );
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(order, r)
}

/// `dot_f16_keys` for every head of `qs` ([g, d]) over the whole blocks of sixteen keys among the
/// `m` rows of `keys` ([m, d], m at most CHUNK), into `dots` (CHUNK per head); returns m, every
/// key done: a last block of fewer than sixteen is computed as sixteen with zero keys in the
/// missing places, whose values land past the m keys' places in `dots` and are not read (so
/// `dot_f16_keys`' slower chains, one or eight keys at a time, take none of these keys). The tail
/// past the layout's whole steps is transposed, sixteen
/// keys at a time, so that one register holds one dimension of sixteen keys, and widened to f64
/// once (the group's heads share both); then each head's sixteen f64 chains (two `__m512d`, four
/// heads side by side) add the products `k · q` in dimension order, one dimension a step, as
/// `dot_f16` adds them one at a time.
///
/// Each step is one f64 fused multiply-add, `s + k·q` rounded once, where `dot_f16` rounds the
/// f32 product and adds it to the f64 sum: the same bits, since keys and queries are f16 values
/// (the cache and `attend_heads` round them so; at most 11 significant bits and exponents from −24
/// to 15 each), whose product has at most 22 significant bits within f32's range and so is exact in
/// f32 and in f64 alike. Counted from the code (not measured), a dimension of four heads is now
/// eight multiply-adds and the shared widening, where the f32 product, its two widenings and two
/// adds per head were about thirty micro-operations.
///
/// `qt` holds the heads' tails as f64 (`tails_f64`), made once for all the chunks of a call.
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and FMA; `d` is a multiple of 8 with a tail past the layout's whole
/// steps; `keys` holds whole rows of `d`, at most CHUNK, and `dots` `g` heads of CHUNK.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn dot_tails16(
    simd: Simd,
    d: usize,
    keys: &[f32],
    qs: &[f32],
    qt: &[f64],
    dots: &mut [f32],
) -> usize {
    let m = keys.len() / d;
    let whole = d - d % step(simd);
    let tail = d - whole;
    let g = qs.len() / d;
    debug_assert!(m <= CHUNK && tail > 0 && tail < 64 && tail.is_multiple_of(8));
    debug_assert!(dots.len() >= g * CHUNK && qt.len() == g * tail);
    // dimension i of the sixteen keys as f64: keys 0..8 in kt[i][0], 8..16 in kt[i][1]
    let mut kt = [[_mm512_setzero_pd(); 2]; 64];
    let mut base = vec![0.0f64; g * 16];
    for b in 0..m.div_ceil(16) {
        let k0 = keys.as_ptr().add(b * 16 * d);
        // a last block of fewer than sixteen keys: zeros in the place of the missing ones
        let live = (m - 16 * b).min(16);
        for c in (0..tail).step_by(16) {
            let width = (tail - c).min(16);
            let mask: __mmask16 = if width == 16 { 0xffff } else { 0x00ff };
            let mut r: [__m512; 16] = std::array::from_fn(|k| {
                if k < live {
                    _mm512_maskz_loadu_ps(mask, k0.add(k * d + whole + c))
                } else {
                    _mm512_setzero_ps()
                }
            });
            transpose16(&mut r);
            for (kd, r) in kt[c..c + width].iter_mut().zip(&r) {
                let upper = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*r)));
                *kd = [
                    _mm512_cvtps_pd(_mm512_castps512_ps256(*r)),
                    _mm512_cvtps_pd(upper),
                ];
            }
        }
        if whole > 0 {
            for (h, bh) in base.chunks_exact_mut(16).enumerate() {
                let qh = &qs[h * d..h * d + whole];
                for (k, v) in bh.iter_mut().enumerate().take(live) {
                    let key = std::slice::from_raw_parts(k0.add(k * d), whole);
                    *v = dot_steps(simd, key, qh) as f64;
                }
            }
        }
        let kt = &kt[..tail];
        for h0 in (0..g).step_by(4) {
            let at = (kt, &qt[h0 * tail..], tail, &base[h0 * 16..]);
            let out = &mut dots[h0 * CHUNK + b * 16..];
            match g - h0 {
                1 => tails_heads::<1>(at, out),
                2 => tails_heads::<2>(at, out),
                3 => tails_heads::<3>(at, out),
                _ => tails_heads::<4>(at, out),
            }
        }
    }
    m
}

/// The query heads' values past the layout's whole steps (`qs`: heads of `d`), as f64, head after
/// head: `dot_tails16`'s `qt`.
pub(super) fn tails_f64(simd: Simd, d: usize, qs: &[f32]) -> Vec<f64> {
    let whole = d - d % step(simd);
    let mut qt = Vec::with_capacity(qs.len() / d * (d - whole));
    for qh in qs.chunks_exact(d) {
        qt.extend(qh[whole..].iter().map(|&x| x as f64));
    }
    qt
}

/// `dot_tails16`'s chains for H heads: `kt` the transposed tail widened to f64 (two registers per
/// dimension), `qt` the first head's tail values as f64 (heads `tail` apart), `base` each head's
/// sixteen starting values (the whole steps' sums); sixteen results per head into `out`, heads
/// CHUNK apart.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tails_heads<const H: usize>(
    (kt, qt, tail, base): (&[[__m512d; 2]], &[f64], usize, &[f64]),
    out: &mut [f32],
) {
    let mut lo = [_mm512_setzero_pd(); H];
    let mut hi = [_mm512_setzero_pd(); H];
    for h in 0..H {
        lo[h] = _mm512_loadu_pd(base.as_ptr().add(h * 16));
        hi[h] = _mm512_loadu_pd(base.as_ptr().add(h * 16 + 8));
    }
    for (i, k) in kt.iter().enumerate() {
        for h in 0..H {
            let q = _mm512_set1_pd(*qt.get_unchecked(h * tail + i));
            lo[h] = _mm512_fmadd_pd(k[0], q, lo[h]);
            hi[h] = _mm512_fmadd_pd(k[1], q, hi[h]);
        }
    }
    for h in 0..H {
        let o = out.as_mut_ptr().add(h * CHUNK);
        _mm256_storeu_ps(o, _mm512_cvtpd_ps(lo[h]));
        _mm256_storeu_ps(o.add(8), _mm512_cvtpd_ps(hi[h]));
    }
}

/// Sixteen rows of sixteen as sixteen columns: afterwards `r[c]` holds element c of every row,
/// in row order. Pairs of rows interleave by 32 then 64 bits (each 128-bit lane then holds four
/// rows of one column), then the lanes gather by two rounds of 128-bit shuffles.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn transpose16(r: &mut [__m512; 16]) {
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4m + c], lane L: column 4L + c of rows 4m..4m+3
    let mut u = [_mm512_setzero_ps(); 16];
    let pd = _mm512_castps_pd;
    let ps = _mm512_castpd_ps;
    for m in 0..4 {
        let (a, b, c, e) = (t[4 * m], t[4 * m + 1], t[4 * m + 2], t[4 * m + 3]);
        u[4 * m] = ps(_mm512_unpacklo_pd(pd(a), pd(c)));
        u[4 * m + 1] = ps(_mm512_unpackhi_pd(pd(a), pd(c)));
        u[4 * m + 2] = ps(_mm512_unpacklo_pd(pd(b), pd(e)));
        u[4 * m + 3] = ps(_mm512_unpackhi_pd(pd(b), pd(e)));
    }
    for c in 0..4 {
        let w0 = _mm512_shuffle_f32x4::<0x44>(u[c], u[4 + c]);
        let w1 = _mm512_shuffle_f32x4::<0xee>(u[c], u[4 + c]);
        let w2 = _mm512_shuffle_f32x4::<0x44>(u[8 + c], u[12 + c]);
        let w3 = _mm512_shuffle_f32x4::<0xee>(u[8 + c], u[12 + c]);
        r[c] = _mm512_shuffle_f32x4::<0x88>(w0, w2);
        r[4 + c] = _mm512_shuffle_f32x4::<0xdd>(w0, w2);
        r[8 + c] = _mm512_shuffle_f32x4::<0x88>(w1, w3);
        r[12 + c] = _mm512_shuffle_f32x4::<0xdd>(w1, w3);
    }
}

/// Four rows of four as four columns: element e of the result holds element e of each row.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn transpose4(r0: __m128, r1: __m128, r2: __m128, r3: __m128) -> [__m128; 4] {
    let t0 = _mm_unpacklo_ps(r0, r1);
    let t1 = _mm_unpacklo_ps(r2, r3);
    let t2 = _mm_unpackhi_ps(r0, r1);
    let t3 = _mm_unpackhi_ps(r2, r3);
    [
        _mm_movelh_ps(t0, t1),
        _mm_movehl_ps(t1, t0),
        _mm_movelh_ps(t2, t3),
        _mm_movehl_ps(t3, t2),
    ]
}

/// The whole steps of `dot_f16` (zero when there are none, as the plain code's zero registers
/// reduce to).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_steps(simd: Simd, a: &[f32], b: &[f32]) -> f32 {
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    match simd {
        Simd::Avx512 => {
            // sum[j] lanes 0..8 in lo[j], 8..16 in hi[j]
            let mut lo = [_mm256_setzero_ps(); 4];
            let mut hi = [_mm256_setzero_ps(); 4];
            for i in (0..a.len()).step_by(64) {
                for j in 0..4 {
                    let k = i + 16 * j;
                    lo[j] = _mm256_fmadd_ps(
                        _mm256_loadu_ps(pa.add(k)),
                        _mm256_loadu_ps(pb.add(k)),
                        lo[j],
                    );
                    hi[j] = _mm256_fmadd_ps(
                        _mm256_loadu_ps(pa.add(k + 8)),
                        _mm256_loadu_ps(pb.add(k + 8)),
                        hi[j],
                    );
                }
            }
            let xl = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
            let xh = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
            // reduce_add_16: t8 = x[8..16] + x[0..8], t4 = t8[4..8] + t8[0..4]
            let mut t8 = [0.0f32; 8];
            _mm256_storeu_ps(t8.as_mut_ptr(), _mm256_add_ps(xh, xl));
            let t4: [f32; 4] = std::array::from_fn(|l| t8[l + 4] + t8[l]);
            (t4[0] + t4[2]) + (t4[1] + t4[3])
        }
        Simd::Avx2 => {
            let mut s = [_mm256_setzero_ps(); 4];
            for i in (0..a.len()).step_by(32) {
                for (j, sj) in s.iter_mut().enumerate() {
                    let k = i + 8 * j;
                    *sj = _mm256_fmadd_ps(
                        _mm256_loadu_ps(pa.add(k)),
                        _mm256_loadu_ps(pb.add(k)),
                        *sj,
                    );
                }
            }
            let x = _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3]));
            let mut xs = [0.0f32; 8];
            _mm256_storeu_ps(xs.as_mut_ptr(), x);
            let t: [f32; 4] = std::array::from_fn(|l| xs[l] + xs[l + 4]);
            (t[0] + t[1]) + (t[2] + t[3])
        }
    }
}
