//! Feed-forward of one layer: dense SwiGLU (three-matmul or fused slices) and MoE with routing,
//! through the FP16 expert path with A_l / F_i restoration (ARCHITECTURE.md §1.3, 1.5, 1.6; the
//! rounding points are listed in FORMAT.md).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use rayon::prelude::*;

use super::config::{DenseForm, ModelConfig};
use super::options::ForwardOptions;
use super::weights::{LayerWeights, MlpWeights};
use crate::kernels::int4::{self, Int4View};
use crate::kernels::{self, f16, router};

/// One row's routing: expert ids and their weights.
pub type Selected = (Vec<usize>, Vec<f32>);

/// Rows from which routing and the per-row combination of a frame run on the pool (below it the
/// handoff costs more than the work).
const PAR_MIN_ROWS: usize = 16;

/// `y = MLP(xn)` for every row of xn ([n, H]).
pub fn forward(
    c: &ModelConfig,
    w: &LayerWeights,
    opts: &ForwardOptions,
    xn: &[f32],
    y: &mut [f32],
) {
    let guard = opts.row_factor;
    let r = Rounding(opts.expert_f16);
    let h = c.hidden;
    let n = xn.len() / h;
    let mut x16 = xn.to_vec();
    r.all(&mut x16);
    let a_l = w.attenuation();
    match (&w.mlp, opts.dense_form) {
        (MlpWeights::Dense(e), DenseForm::ThreeMatmul) => {
            expert_batch(&[e.gate.view(), e.up.view(), e.down.view()], r, &x16, n, y);
            let s = w.global_scale * a_l;
            y.iter_mut().for_each(|v| *v *= s);
        }
        (MlpWeights::Dense(e), DenseForm::FusedSlices) => {
            let slices = e.slices(8);
            let sel: Vec<(Vec<usize>, Vec<f32>)> = (0..n)
                .map(|_| ((0..8).collect(), vec![w.global_scale; 8]))
                .collect();
            fused(&slices, &sel, &x16, h, a_l, guard, r, y);
        }
        (
            MlpWeights::Moe {
                router: wg,
                bias,
                experts,
            },
            _,
        ) => {
            let sel = routes(c, w.global_scale, wg, bias, xn);
            ROUTE_LOG.with(|log| {
                if let Some(log) = log.borrow_mut().as_mut() {
                    log.push(sel.iter().flat_map(|s| s.0.iter().copied()).collect());
                }
            });
            let views: Vec<[Int4View<'_>; 3]> = experts
                .iter()
                .map(|e| [e.gate.view(), e.up.view(), e.down.view()])
                .collect();
            fused(&views, &sel, &x16, h, a_l, guard, r, y);
        }
    }
}

thread_local! {
    /// Where `recording_routes` collects this thread's MoE selections (None: not recording).
    static ROUTE_LOG: RefCell<Option<Vec<Vec<usize>>>> = const { RefCell::new(None) };
}

/// Run `f`, recording every MoE layer's routing that `forward` computes on this thread, in call
/// order: per call, the experts each row selected (rows in order, each row's `top_k` routed
/// experts in rank order and then its shared ones, ids from `n_routed` on). For tools that
/// model what decode reads (the harness's `ceilings`); the arithmetic is unchanged. Only this
/// module's `forward` records: a forward pass on another thread (a pool the caller installed) is
/// not recorded, nor are checkpoint (GGUF) layers or the OpenVINO backend. If `f` panics the
/// recording stops all the same.
pub fn recording_routes<R>(f: impl FnOnce() -> R) -> (R, Vec<Vec<usize>>) {
    /// Puts back what was recording before (nothing, or an outer call's log), also on a panic.
    struct Restore(Option<Vec<Vec<usize>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            ROUTE_LOG.with(|log| *log.borrow_mut() = outer);
        }
    }
    let _restore = Restore(ROUTE_LOG.with(|log| log.replace(Some(Vec::new()))));
    let r = f();
    let routes = ROUTE_LOG.with(|log| log.take()).unwrap_or_default();
    (r, routes)
}

/// Each row's selected experts and weights (`route_scale · global_scale` included).
pub fn routes(
    c: &ModelConfig,
    global_scale: f32,
    router_w: &[f32],
    bias: &[f32],
    xn: &[f32],
) -> Vec<Selected> {
    let scale = c.route_scale * global_scale;
    let route = |x: &[f32]| {
        let s = router::route(router_w, bias, x, c.top_k, scale);
        (s.ids, s.weights)
    };
    // rows route independently: a prefill window's rows spread over the pool
    if xn.len() / c.hidden >= PAR_MIN_ROWS && kernels::threads() > 1 {
        xn.par_chunks_exact(c.hidden).map(route).collect()
    } else {
        xn.chunks_exact(c.hidden).map(route).collect()
    }
}

/// The f16 rounding points of the expert path, or none (f32 throughout).
#[derive(Clone, Copy)]
struct Rounding(bool);

impl Rounding {
    fn all(self, v: &mut [f32]) {
        if self.0 {
            f16::round(v);
        }
    }
}

/// One expert over m rows (x16 [m, H] already rounded): d = f16(W_d h), h = f16(silu(g) · u).
fn expert_batch(v: &[Int4View<'_>; 3], r: Rounding, x16: &[f32], m: usize, d: &mut [f32]) {
    expert(v, r.0, x16, m, d)
}

/// One expert (gate, up, down views) over m rows of x16 ([m, H], already rounded when `f16`):
/// `d = f16(W_d f16(silu(f16(W_g x)) · f16(W_u x)))`, or the same in f32 without `f16`.
pub fn expert(v: &[Int4View<'_>; 3], f16: bool, x16: &[f32], m: usize, d: &mut [f32]) {
    let r = Rounding(f16);
    let width = v[0].rows;
    let (mut g, mut u) = (scratch(&GATE, m * width), scratch(&UP, m * width));
    int4::matmul_pair(&v[0], &v[1], x16, &mut g, &mut u);
    r.all(&mut g);
    r.all(&mut u);
    for (gv, uv) in g.iter_mut().zip(&u) {
        *gv = *gv / (1.0 + (-*gv).exp()) * uv;
    }
    r.all(&mut g);
    int4::matmul(&v[2], &g, d);
    r.all(d);
    keep(&GATE, g);
    keep(&UP, u);
}

thread_local! {
    static GATE: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    static UP: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    static ROWS: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// The buffer in `cell` (this thread's, kept between experts), `n` zeros long. An expert's
/// buffers at `inkling-mini` are a few rows of 128-256 values, allocated afresh for each of a
/// frame's hundreds of experts before. The caller puts it back when done; taken meanwhile, the
/// cell is empty, so an expert that rayon runs on the same thread in between (work stealing
/// while a product waits on its own tasks) allocates its own rather than share it.
fn scratch(cell: &'static std::thread::LocalKey<Cell<Vec<f32>>>, n: usize) -> Vec<f32> {
    let mut v = cell.take();
    v.clear();
    v.resize(n, 0.0);
    v
}

/// Put `v` back in `cell` for the next expert, unless it grew past `KEEP_MAX` values (a dense
/// layer of a full preset over a prefill window: tens of MB, not worth holding per thread).
fn keep(cell: &'static std::thread::LocalKey<Cell<Vec<f32>>>, v: Vec<f32>) {
    if v.capacity() <= KEEP_MAX {
        cell.set(v);
    }
}

/// The largest buffer `keep` holds on to: 1 MB of f32.
const KEEP_MAX: usize = 1 << 18;

/// The fused expert path: rows that select the same expert share its weight reads; each row then
/// sums `f16((w / F) · d)` in its selection order in f16 and is restored as `A_l · F · acc` in f32.
#[allow(clippy::too_many_arguments)]
fn fused(
    experts: &[[Int4View<'_>; 3]],
    sel: &[(Vec<usize>, Vec<f32>)],
    x16: &[f32],
    h: usize,
    a_l: f32,
    guard: bool,
    r: Rounding,
    y: &mut [f32],
) {
    // expert id -> (row, selection index) pairs, in ascending expert id
    let mut by_expert: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for (row, (ids, _)) in sel.iter().enumerate() {
        for (k, &e) in ids.iter().enumerate() {
            by_expert.entry(e).or_default().push((row, k));
        }
    }
    let per_row = sel.first().map_or(0, |s| s.0.len());
    // the experts are independent: spread over the pool (one expert's arithmetic is unchanged, so
    // the result is bit-identical whatever the thread count)
    let by_expert: Vec<(usize, Vec<(usize, usize)>)> = by_expert.into_iter().collect();
    let one = |(e, uses): &(usize, Vec<(usize, usize)>)| {
        let m = uses.len();
        let mut xb = scratch(&ROWS, 0);
        for &(row, _) in uses {
            xb.extend_from_slice(&x16[row * h..(row + 1) * h]);
        }
        let mut out = vec![0.0f32; m * h];
        expert_batch(&experts[*e], r, &xb, m, &mut out);
        keep(&ROWS, xb);
        out
    };
    let outs: Vec<Vec<f32>> = if kernels::threads() == 1 {
        by_expert.iter().map(one).collect()
    } else {
        by_expert.par_iter().map(one).collect()
    };
    // where the k-th selection of each row landed: (expert's place in `outs`, its row there)
    let mut at = vec![(0u32, 0u32); sel.len() * per_row];
    for (j, (_, uses)) in by_expert.iter().enumerate() {
        for (i, &(row, k)) in uses.iter().enumerate() {
            at[row * per_row + k] = (j as u32, i as u32);
        }
    }
    // `t` is a per-thread scratch row (one allocation per thread, not per row)
    let combine = |t: &mut Vec<f32>,
                   (row, (yr, (_, weights))): (usize, (&mut [f32], &Selected))| {
        t.resize(h, 0.0);
        let f = if guard { row_factor(weights) } else { 1.0 };
        yr.iter_mut().for_each(|v| *v = 0.0);
        for (k, &wk) in weights.iter().enumerate() {
            let ws = wk / f;
            let (j, i) = at[row * per_row + k];
            let dk = &outs[j as usize][i as usize * h..(i as usize + 1) * h];
            // acc = f16(acc + f16(ws · d)), element by element, in selection order
            for (tv, &dv) in t.iter_mut().zip(dk) {
                *tv = ws * dv;
            }
            r.all(t);
            for (acc, &tv) in yr.iter_mut().zip(t.iter()) {
                *acc += tv;
            }
            r.all(yr);
        }
        let restore = a_l * f;
        yr.iter_mut().for_each(|v| *v *= restore);
    };
    // each row's combination is its own: a window's rows spread over the pool
    if sel.len() >= PAR_MIN_ROWS && kernels::threads() > 1 {
        y.par_chunks_mut(h)
            .zip(sel.par_iter())
            .enumerate()
            .for_each_init(Vec::new, combine);
    } else {
        let mut t = Vec::new();
        y.chunks_mut(h)
            .zip(sel.iter())
            .enumerate()
            .for_each(|item| combine(&mut t, item));
    }
}

/// `F = 2^ceil(log2(max(1, Σ|w|)))`, exact on powers of two.
pub fn row_factor(weights: &[f32]) -> f32 {
    let s: f32 = weights.iter().map(|w| w.abs()).sum();
    if s <= 1.0 || !s.is_finite() {
        return 1.0;
    }
    let mut f = 1.0f32;
    while f < s {
        f *= 2.0;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::generate;
    use crate::model::{generate as synth, ForwardOptions, Model, SynthSpec};

    #[test]
    fn recording_routes_sees_every_moe_layer_and_changes_nothing() {
        let c = ModelConfig::preset("inkling-nano").unwrap();
        let moe = c.moe_layers();
        let m = Model::new(
            synth(&SynthSpec::whole(c.clone(), 3)).unwrap(),
            ForwardOptions::default(),
        );
        let plain = generate(&m, &[5, 9, 2], 6, 8, None, false).unwrap();
        let (g, log) = recording_routes(|| generate(&m, &[5, 9, 2], 6, 8, None, false).unwrap());
        assert_eq!(g.tokens, plain.tokens, "recording changed the tokens");
        // the prompt's window (3 rows), then one row per decode step
        let forwards = 1 + (g.tokens.len() - 1);
        assert_eq!(log.len(), forwards * moe, "{} calls", log.len());
        // a row's selections: top_k routed experts, then the shared ones (ids from n_routed)
        let per_row = c.selections_per_row();
        assert_eq!(log[0].len(), 3 * per_row);
        for call in &log[moe..] {
            assert_eq!(call.len(), per_row);
            let mut routed = call[..c.top_k].to_vec();
            routed.sort_unstable();
            routed.dedup();
            assert_eq!(
                routed.len(),
                c.top_k,
                "a row's picks are distinct: {call:?}"
            );
            assert!(routed.iter().all(|&e| e < c.n_routed), "{call:?}");
            let shared: Vec<usize> = (c.n_routed..c.n_routed + c.n_shared).collect();
            assert_eq!(call[c.top_k..], shared[..]);
        }
        // not recording afterwards, nor after a panic inside
        assert!(ROUTE_LOG.with(|l| l.borrow().is_none()));
        let caught = std::panic::catch_unwind(|| recording_routes(|| -> u8 { panic!("inside") }));
        assert!(caught.is_err());
        assert!(ROUTE_LOG.with(|l| l.borrow().is_none()));
    }
}
