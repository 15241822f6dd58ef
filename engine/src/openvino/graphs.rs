//! The graphs the OpenVINO backend builds from a layer's stored weights (FORMAT.md "OpenVINO
//! graphs"). Weights stay in their stored formats as constants, each followed by the decompression
//! pattern OpenVINO's CPU plugin folds into a compressed `FullyConnected`:
//!
//! - INT4 group-32: `Const u4 [N, K/32, 32] → Convert f16 → Subtract (Const u4 [N, K/32, 1] of 8 →
//!   Convert f16) → Multiply (Const f16 [N, K/32, 1]) → Reshape [N, K] → Convert f32`;
//! - INT8 per row: `Const i8 [N, K] → Convert f16 → Multiply (Const f16 [N, 1]) → Convert f32`;
//!
//! then `MatMul(x, W, transpose_b)`. Rows (`n`) are a dynamic dimension: one compiled graph serves
//! a decode row and a prefill window. As written the scale multiply is in f16, where (q − 8)·s
//! (up to 15 significant bits) and q·s for INT8 (up to 18) would round; the CPU plugin instead
//! folds the whole pattern into its compressed product and decompresses in f32, exactly. A path
//! that folded the constants in f16 (an unfused graph, another device) would round the weights;
//! the parity test's per-product bound fails if that happens.

use half::f16;

use super::ir::{Graph, Out};
use crate::kernels::int4::{Int4View, GROUP};
use crate::kernels::int8::Int8Matrix;

fn f16_bytes(v: &[f16]) -> Vec<u8> {
    v.iter().flat_map(|s| s.to_bits().to_le_bytes()).collect()
}

/// Packed u4 bytes of `count` values all equal to 8.
fn eights(count: usize) -> Vec<u8> {
    vec![0x88; count.div_ceil(2)]
}

/// The dequantised f32 weights [lead.., N, K] of INT4 matrices of one shape stacked along leading
/// dims `lead` (empty for one matrix, `[E]` for E experts).
pub fn int4_weights(g: &mut Graph, views: &[Int4View<'_>], lead: &[usize]) -> Out {
    let (n, k) = (views[0].rows, views[0].cols);
    let groups = k / GROUP;
    let mut q = Vec::with_capacity(views.len() * n * k / 2);
    let mut s = Vec::with_capacity(views.len() * n * groups);
    for v in views {
        assert_eq!((v.rows, v.cols), (n, k), "stacked matrices share a shape");
        let (vq, vs) = v.consecutive();
        q.extend(vq);
        s.extend(vs);
    }
    let dims = |tail: &[usize]| -> Vec<usize> { lead.iter().chain(tail).copied().collect() };
    let wq = g.constant("u4", &dims(&[n, groups, GROUP]), &q);
    let wq = g.op("Convert", "opset1", &[("destination_type", "f16")], &[wq]);
    let zp = g.constant(
        "u4",
        &dims(&[n, groups, 1]),
        &eights(views.len() * n * groups),
    );
    let zp = g.op("Convert", "opset1", &[("destination_type", "f16")], &[zp]);
    let centred = g.op("Subtract", "opset1", &[], &[wq, zp]);
    let sc = g.constant("f16", &dims(&[n, groups, 1]), &f16_bytes(&s));
    let w = g.op("Multiply", "opset1", &[], &[centred, sc]);
    let shape: Vec<i64> = dims(&[n, k]).iter().map(|&d| d as i64).collect();
    let shape = g.ints(&shape);
    let w = g.op(
        "Reshape",
        "opset1",
        &[("special_zero", "false")],
        &[w, shape],
    );
    g.op("Convert", "opset1", &[("destination_type", "f32")], &[w])
}

/// The dequantised f32 weights [N, K] of an INT8 matrix.
pub fn int8_weights(g: &mut Graph, m: &Int8Matrix) -> Out {
    let q: Vec<u8> = m.q.iter().map(|&v| v as u8).collect();
    let wq = g.constant("i8", &[m.rows, m.cols], &q);
    let wq = g.op("Convert", "opset1", &[("destination_type", "f16")], &[wq]);
    let sc = g.constant("f16", &[m.rows, 1], &f16_bytes(&m.scales));
    let w = g.op("Multiply", "opset1", &[], &[wq, sc]);
    g.op("Convert", "opset1", &[("destination_type", "f32")], &[w])
}

/// `x · Wᵀ`.
pub fn matmul(g: &mut Graph, x: Out, w: Out) -> Out {
    g.op(
        "MatMul",
        "opset1",
        &[("transpose_a", "false"), ("transpose_b", "true")],
        &[x, w],
    )
}

/// Products of one input with several INT8 matrices: inputs `x` [n, K], outputs `y0..` [n, N_i].
pub fn int8_products(mats: &[&Int8Matrix]) -> Graph {
    let mut g = Graph::new();
    let x = g.parameter("x", "f32", &[None, Some(mats[0].cols)]);
    for (i, m) in mats.iter().enumerate() {
        let w = int8_weights(&mut g, m);
        let y = matmul(&mut g, x, w);
        g.result(y, &format!("y{i}"));
    }
    g
}

/// `silu(a) · b`.
fn swiglu(g: &mut Graph, a: Out, b: Out) -> Out {
    let s = g.op("Swish", "opset4", &[], &[a]);
    g.op("Multiply", "opset1", &[], &[s, b])
}

/// One SwiGLU as three compressed products: input `x` [n, H], output `y` [n, H] =
/// `W_d (silu(W_g x) ⊙ W_u x)` (no scale: the host applies global_scale · A_l as the native path).
pub fn three_matmul(v: &[Int4View<'_>; 3]) -> Graph {
    let mut g = Graph::new();
    let x = g.parameter("x", "f32", &[None, Some(v[0].cols)]);
    let wg = int4_weights(&mut g, &[v[0]], &[]);
    let wu = int4_weights(&mut g, &[v[1]], &[]);
    let wd = int4_weights(&mut g, &[v[2]], &[]);
    let a = matmul(&mut g, x, wg);
    let b = matmul(&mut g, x, wu);
    let h = swiglu(&mut g, a, b);
    let y = matmul(&mut g, h, wd);
    g.result(y, "y");
    g
}

/// The tiled 3-GEMM MoE form (inputs `x` [n, H] f32, `ids` [n, k] i32, `weights` [n, k] f32;
/// output `y` [n, H] = Σ_j weights[:, j] · E_{ids[:, j]}(x)), written over every expert of
/// `experts` as dense math:
///
/// `Tile(x, [E, 1]) → Reshape [E, n, H] → MatMul gate/up (stacked compressed [E, W, H]) →
/// Swish(gate) · up → MatMul down ([E, H, W]) → Reshape [E, 1, n, H]`, times the routing map
/// `ScatterElementsUpdate(zeros [n, E], ids, weights, axis 1) → Transpose → Reshape [E, 1, n] →
/// Unsqueeze [E, 1, n, 1]`, `ReduceSum` over E, `Reshape [n, H]`.
///
/// OpenVINO 2026.4's CPU plugin (x86-64) rewrites this pattern to three `GatherMatmulCompressed`
/// nodes that read only the selected experts' u4 weights; the routing map disappears. What the
/// matcher needs, found by experiment: Swish with one input (no beta), the row dimension dynamic,
/// ids and weights not constants, and the end reshapes above. Where it does not match, the graph is
/// still correct but computes every expert with weights decompressed at compile time (the
/// backend's report says which happened).
pub fn moe(experts: &[[Int4View<'_>; 3]], k: usize) -> Graph {
    let e = experts.len();
    let h = experts[0][0].cols;
    let mut g = Graph::new();
    let x = g.parameter("x", "f32", &[None, Some(h)]);
    let ids = g.parameter("ids", "i32", &[None, Some(k)]);
    let rw = g.parameter("weights", "f32", &[None, Some(k)]);
    let stack = |g: &mut Graph, m: usize| {
        let views: Vec<Int4View<'_>> = experts.iter().map(|t| t[m]).collect();
        int4_weights(g, &views, &[e])
    };
    let (wg, wu, wd) = (stack(&mut g, 0), stack(&mut g, 1), stack(&mut g, 2));
    let reps = g.ints(&[e as i64, 1]);
    let tiled = g.op("Tile", "opset1", &[], &[x, reps]);
    let to_enh = g.ints(&[e as i64, -1, h as i64]);
    let xe = g.op(
        "Reshape",
        "opset1",
        &[("special_zero", "false")],
        &[tiled, to_enh],
    );
    let a = matmul(&mut g, xe, wg);
    let b = matmul(&mut g, xe, wu);
    let hid = swiglu(&mut g, a, b);
    let d = matmul(&mut g, hid, wd);
    // the plugin's matcher wants this end reshape to [E, 1, n, H]
    let to_e1nh = g.ints(&[e as i64, 1, -1, h as i64]);
    let d = g.op(
        "Reshape",
        "opset1",
        &[("special_zero", "false")],
        &[d, to_e1nh],
    );
    // the routing map [E, n, 1]
    let shape = g.op("ShapeOf", "opset3", &[("output_type", "i64")], &[ids]);
    let first = g.ints(&[0]);
    let axis0 = g.constant("i64", &[], &0i64.to_le_bytes());
    let rows = g.op(
        "Gather",
        "opset8",
        &[("batch_dims", "0")],
        &[shape, first, axis0],
    );
    let experts_dim = g.ints(&[e as i64]);
    let zshape = g.op("Concat", "opset1", &[("axis", "0")], &[rows, experts_dim]);
    let zero = g.constant("f32", &[], &0f32.to_le_bytes());
    let zeros = g.op("Broadcast", "opset3", &[("mode", "numpy")], &[zero, zshape]);
    let axis1 = g.constant("i64", &[], &1i64.to_le_bytes());
    let map = g.op(
        "ScatterElementsUpdate",
        "opset12",
        &[("reduction", "none"), ("use_init_val", "true")],
        &[zeros, ids, rw, axis1],
    );
    let perm = g.ints(&[1, 0]);
    let map = g.op("Transpose", "opset1", &[], &[map, perm]);
    let to_e1n = g.ints(&[e as i64, 1, -1]);
    let map = g.op(
        "Reshape",
        "opset1",
        &[("special_zero", "false")],
        &[map, to_e1n],
    );
    let last = g.ints(&[-1]);
    let map = g.op("Unsqueeze", "opset1", &[], &[map, last]);
    let y = g.op("Multiply", "opset1", &[], &[d, map]);
    let over_e = g.ints(&[0]);
    let y = g.op(
        "ReduceSum",
        "opset1",
        &[("keep_dims", "false")],
        &[y, over_e],
    );
    let to_nh = g.ints(&[-1, h as i64]);
    let y = g.op(
        "Reshape",
        "opset1",
        &[("special_zero", "false")],
        &[y, to_nh],
    );
    g.result(y, "y");
    g
}
