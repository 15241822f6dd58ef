//! Compute kernels. Every fast kernel has a plain twin in `reference` and a parity test driven by the
//! shared case list in `cases`; dispatch picks the SIMD version at run time when the CPU has it
//! (x86-64 AVX2 + FMA + F16C) and a portable version otherwise.
//!
//! Kernels own no model state: they take slices and write slices.

pub mod attention;
mod awake;
mod away;
pub mod blocks;
pub mod cases;
pub mod conv;
pub mod f16;
pub mod int4;
pub mod int8;
pub mod linear;
pub mod quant;
pub mod reference;
pub mod router;

pub use awake::awake;

use std::sync::OnceLock;

/// Which implementation the dispatching kernels use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// Anything else: portable Rust.
    Portable,
}

static FORCE_PORTABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The instruction set chosen once per process (`MOEFLEET_ISA=portable`, read only by `bin/`,
/// forces the portable kernels).
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    if FORCE_PORTABLE.load(std::sync::atomic::Ordering::Relaxed) {
        return Isa::Portable;
    }
    *ISA.get_or_init(detect)
}

/// Use the portable kernels (f32 products, no activation quantisation) for the rest of the
/// process: the oracle tests compare the architecture in exact f32 arithmetic this way, while the
/// SIMD kernels are held to their reference by the parity tests.
pub fn force_portable() {
    FORCE_PORTABLE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// True when the INT4/INT8 products quantise their activations (`quant`: 8-bit for INT4, 16-bit
/// for INT8): the SIMD kernels do, the portable ones compute in f32. The float64 oracle emulates it when asked (`--qact`).
pub fn quantises_activations() -> bool {
    isa() == Isa::Avx2
}

/// The CPU itself has AVX2, FMA and F16C (whatever `force_portable` chose): checked before a
/// caller-chosen `Isa::Avx2` reaches SIMD code.
pub fn cpu_has_avx2() -> bool {
    detect() == Isa::Avx2
}

/// The INT4 and INT8 products' integer kernels on top of `Isa::Avx2`, narrowest first. Every one
/// gives the same bits: the same exact i32 sums per (row, group) and per lane, then the same float
/// operations in the same order (`int4::avx2`, `int8::avx2`); the wider ones do the integer part
/// in fewer instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum IntPath {
    /// `vpmaddubsw` + `vpmaddwd` (INT4: a pair of groups a step) and `vpmaddwd` (INT8: 16
    /// columns a step) on 256 bits.
    Avx2,
    /// The same on 256 bits with AVX-VNNI's `vpdpbusd` / `vpdpwssd`.
    AvxVnni,
    /// 512 bits (AVX-512 F and BW): INT4 four groups a step, INT8 32 columns.
    Avx512,
    /// 512 bits with AVX-512 VNNI's `vpdpbusd` / `vpdpwssd`.
    Avx512Vnni,
}

impl IntPath {
    pub const ALL: [IntPath; 4] = [
        IntPath::Avx2,
        IntPath::AvxVnni,
        IntPath::Avx512,
        IntPath::Avx512Vnni,
    ];

    /// The name `MOEFLEET_ISA` takes and records give.
    pub fn name(self) -> &'static str {
        match self {
            IntPath::Avx2 => "avx2",
            IntPath::AvxVnni => "avx-vnni",
            IntPath::Avx512 => "avx512",
            IntPath::Avx512Vnni => "avx512-vnni",
        }
    }

    /// The CPU itself has what this path runs on (whatever `MOEFLEET_ISA` chose).
    pub fn on_cpu(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let wide = || has!("avx512f") && has!("avx512bw");
            cpu_has_avx2()
                && match self {
                    IntPath::Avx2 => true,
                    IntPath::AvxVnni => has!("avxvnni"),
                    IntPath::Avx512 => wide(),
                    IntPath::Avx512Vnni => wide() && has!("avx512vnni"),
                }
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }
}

/// The widest integer path `MOEFLEET_ISA` allows (None: no cap).
static INT4_CAP: OnceLock<IntPath> = OnceLock::new();

/// The integer products' kernel in use: None on the portable kernels, else the widest path the
/// CPU has, at most the one `MOEFLEET_ISA` named.
pub fn int_path() -> Option<IntPath> {
    static BEST: OnceLock<Option<IntPath>> = OnceLock::new();
    if isa() != Isa::Avx2 {
        return None;
    }
    let best = (*BEST.get_or_init(|| IntPath::ALL.into_iter().rfind(|p| p.on_cpu())))?;
    Some(INT4_CAP.get().map_or(best, |&cap| best.min(cap)))
}

/// Apply a choice of instruction set (`native`, the default, or none given; `portable`: no SIMD;
/// `avx2`, `avx-vnni`, `avx512`, `avx512-vnni`: the integer products on at most that kernel, to
/// measure them side by side) for the rest of the process. The binaries read it from
/// `MOEFLEET_ISA` first thing, and role processes inherit the variable. A kernel the CPU lacks is
/// an error, not a silent fallback.
pub fn apply_isa(choice: Option<&str>) -> Result<(), String> {
    match choice {
        None | Some("") | Some("native") => Ok(()),
        Some("portable") => {
            force_portable();
            Ok(())
        }
        Some(other) => {
            let Some(path) = IntPath::ALL.into_iter().find(|p| p.name() == other) else {
                return Err(format!(
                    "MOEFLEET_ISA={other:?}: use native, portable, avx2, avx-vnni, avx512 or \
                     avx512-vnni"
                ));
            };
            if !path.on_cpu() {
                return Err(format!("MOEFLEET_ISA={other}: this CPU has no {other}"));
            }
            INT4_CAP
                .set(path)
                .map_err(|_| "MOEFLEET_ISA applied twice".to_string())
        }
    }
}

/// The kernels in use, for records: the instruction set, and the integer products' kernel.
pub fn describe() -> String {
    match int_path() {
        Some(p) if p != IntPath::Avx2 => format!("{:?} (integer products: {})", isa(), p.name()),
        _ => format!("{:?}", isa()),
    }
}

fn detect() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            return Isa::Avx2;
        }
    }
    Isa::Portable
}

std::thread_local! {
    /// The most threads the kernels split work over on this thread: see `with_width`.
    static WIDTH: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// Run `f` with the kernels splitting work over at most `n` threads (1: none, every kernel on the
/// calling thread), then restore the width it had. Scoped to the calling thread and the call, so
/// no setting outlives the frame it was chosen for: a fleet's role chooses it per frame
/// (`pipeline::frame_width`). Work split onto the pool's other threads sees the pool's own width,
/// which is what a width of 1 (no split, so nothing runs elsewhere) or the default (the whole
/// pool) mean. Results never depend on it: which thread computes a piece of work never changes
/// its bits.
pub fn with_width<R>(n: usize, f: impl FnOnce() -> R) -> R {
    /// Puts the previous width back, also when `f` unwinds.
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            WIDTH.with(|w| w.set(self.0));
        }
    }
    let _restore = Restore(WIDTH.with(|w| w.replace(n.max(1))));
    f()
}

/// Threads the kernels split work over now: the current pool's, at most the width `with_width`
/// set on this thread (1: none).
pub fn threads() -> usize {
    rayon::current_num_threads().min(WIDTH.with(|w| w.get()))
}

/// Products of one input row with fewer weights than this stay on the calling thread (`split_rows`,
/// `int8::matmul_shared`); larger ones split in as many tasks as threads: a decode token's router
/// and attention projections (tens of thousands of weights, a few microseconds each) run while the
/// pool's other threads are still awake between the token's tasks, so halving their reads pays.
pub(crate) const PAR_MIN_WEIGHTS_ONE_ROW: usize = 1 << 16;

/// Products of several input rows with fewer multiply-adds than this stay on the calling thread.
pub(crate) const PAR_MIN_WEIGHTS: usize = 1 << 20;

/// Run `rows(o, part)` over the output rows of a product (`out_rows` outputs, `weights` weights, `n`
/// input rows; `y` laid out [n, out_rows], `part` [n, o.len()]): on the calling thread when the
/// product is small (fewer than `PAR_MIN_WEIGHTS` multiply-adds, `PAR_MIN_WEIGHTS_ONE_ROW` for one
/// input row) or `threads()` is one, else in tasks on the pool. With one input row the tasks are
/// one per thread (at most `chunk` rows, a multiple of 16) writing disjoint slices of y; with more,
/// tasks of `chunk` output rows each write a private buffer whose rows are then copied into place,
/// and the tasks shrink below `chunk` (to a multiple of 16 rows) until there are four per thread:
/// a prefill window's attention projections (256 outputs) would otherwise be one task. Which thread
/// computes a row never changes its bits.
pub(crate) fn split_rows(
    out_rows: usize,
    weights: usize,
    n: usize,
    chunk: usize,
    y: &mut [f32],
    rows: &(dyn Fn(std::ops::Range<usize>, &mut [f32]) + Sync),
) {
    use rayon::prelude::*;
    assert_eq!(y.len(), n * out_rows);
    if n == 0 || out_rows == 0 {
        return;
    }
    let threads = threads();
    let min = if n == 1 {
        PAR_MIN_WEIGHTS_ONE_ROW
    } else {
        PAR_MIN_WEIGHTS
    };
    if weights.saturating_mul(n) < min || threads == 1 {
        rows(0..out_rows, y);
        return;
    }
    if n == 1 {
        let chunk = chunk.min(out_rows.div_ceil(threads).next_multiple_of(16));
        y.par_chunks_mut(chunk).enumerate().for_each(|(t, part)| {
            rows(t * chunk..t * chunk + part.len(), part);
        });
        return;
    }
    let chunk = chunk.min(out_rows.div_ceil(4 * threads).next_multiple_of(16));
    let parts: Vec<(usize, Vec<f32>)> = (0..out_rows.div_ceil(chunk))
        .into_par_iter()
        .map(|t| {
            let r = t * chunk..((t + 1) * chunk).min(out_rows);
            let mut part = vec![0.0f32; n * r.len()];
            rows(r.clone(), &mut part);
            (r.start, part)
        })
        .collect();
    // each input row's outputs gathered from the parts, rows spread over the pool (copied on
    // the calling thread alone, the other threads waited for it)
    let place = |(r, yr): (usize, &mut [f32])| {
        for (start, part) in &parts {
            let len = part.len() / n;
            yr[*start..start + len].copy_from_slice(&part[r * len..(r + 1) * len]);
        }
    };
    y.par_chunks_exact_mut(out_rows).enumerate().for_each(place);
}

/// Horizontal sum of an AVX register, in a fixed lane order (bit-stable across call sites).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn hsum256(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps(v, 1);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}
