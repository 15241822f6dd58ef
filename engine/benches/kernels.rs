//! Kernel microbenchmarks (`make bench`): the shared case list's products at the `inkling` and
//! `inkling-mini` shapes, the FP16 expert path, routing, a MoE layer, attention decode and the ggml
//! block-format products. Every group declares its throughput (weight bytes read, or FLOPs as
//! elements) so criterion prints bytes/s or elements/s; `moefleet-harness ceilings` measures the
//! machine limits to compare with.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use moefleet_engine::kernels::blocks::BlockFormat;
use moefleet_engine::kernels::cases;
use moefleet_engine::kernels::{int4, int8};

const ROWS: &[usize] = &[1, 2, 8, 64];

/// (name, outputs, inputs): INT4 group-32 shapes.
const INT4_SHAPES: &[(&str, usize, usize)] = &[
    ("inkling-expert-gate", 3072, 6144),
    ("inkling-expert-down", 6144, 3072),
    ("inkling-dense-up", 24576, 6144),
    ("inkling-dense-down", 6144, 24576),
    ("mini-expert-gate", 128, 256),
    ("mini-expert-down", 256, 128),
    ("mini-dense-up", 1024, 256),
    ("mini-dense-down", 256, 1024),
];

/// (name, outputs, inputs): INT8 per-row shapes (attention projections, head).
const INT8_SHAPES: &[(&str, usize, usize)] = &[
    ("inkling-q", 8192, 6144),
    ("inkling-kv", 1024, 6144),
    ("inkling-o", 6144, 8192),
    ("inkling-head", 201_024, 6144),
    ("mini-q", 256, 256),
    ("mini-head", 7104, 256),
];

fn int4_products(c: &mut Criterion) {
    let mut g = c.benchmark_group("int4");
    for &(name, rows, cols) in INT4_SHAPES {
        let w = cases::int4_matrix(rows, cols, 1);
        for &n in ROWS {
            let x = cases::activations(n * cols, 1.0, 2);
            let mut y = vec![0.0f32; n * rows];
            g.throughput(Throughput::Bytes(w.bytes() as u64));
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| int4::matmul(&w.view(), black_box(&x), &mut y))
            });
        }
    }
    g.finish();
}

fn int8_products(c: &mut Criterion) {
    let mut g = c.benchmark_group("int8");
    for &(name, rows, cols) in INT8_SHAPES {
        let w = cases::int8_matrix(rows, cols, 3);
        let ns: &[usize] = if rows > 100_000 { &[1] } else { &[1, 8] };
        for &n in ns {
            let x = cases::activations(n * cols, 1.0, 4);
            let mut y = vec![0.0f32; n * rows];
            g.throughput(Throughput::Bytes(w.bytes() as u64));
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| int8::matmul(&w, black_box(&x), &mut y))
            });
        }
    }
    g.finish();
}

/// Attention decode at the `inkling` global layer (64 query heads in 8 groups, D = 128): one KV
/// head's group of eight query heads over N cached positions, single-threaded; FLOPs counted as
/// 4·D per (head, key) (scores and values).
fn attention_decode(c: &mut Criterion) {
    use moefleet_engine::kernels::attention::{attend_block, Partial, ScoreRule};
    let (heads, d) = (8usize, 128usize);
    let mut g = c.benchmark_group("attention-group");
    for &n in &[1024usize, 4096, 16_384, 65_536] {
        let keys = cases::activations(n * d, 1.0, 5);
        let values = cases::activations(n * d, 1.0, 6);
        let q = cases::activations(heads * d, 1.0, 7);
        let bias = vec![0.0f32; heads * 16];
        g.throughput(Throughput::Elements((4 * d * heads * n) as u64));
        g.bench_with_input(BenchmarkId::new("inkling-8-heads", n), &n, |b, _| {
            b.iter(|| {
                let mut parts = vec![Partial::empty(d); heads];
                let mut scratch = Vec::new();
                let rule = ScoreRule {
                    tau: 1.0,
                    inv_d: 1.0 / d as f32,
                    bias: &bias,
                    near: 16,
                    dist0: n - 1,
                };
                attend_block(&q, &keys, &values, &rule, &mut parts, &mut scratch);
                black_box(parts[0].l)
            })
        });
    }
    g.finish();
}

/// One `inkling` expert's full FP16 path (gate, up, SwiGLU, down with the f16 rounding points),
/// routing one row over 256 + 2 experts, and a whole MoE layer (the experts the rows select) for 1
/// and 8 rows.
fn expert_and_moe(c: &mut Criterion) {
    use moefleet_engine::kernels::router;
    use moefleet_engine::model::weights::MlpWeights;
    use moefleet_engine::model::{mlp, synth, ForwardOptions, ModelConfig};
    let cfg = ModelConfig::preset("inkling").expect("preset");
    let h = cfg.hidden;
    let mut g = c.benchmark_group("moe");
    let gate = cases::int4_matrix(3072, h, 11);
    let up = cases::int4_matrix(3072, h, 12);
    let down = cases::int4_matrix(h, 3072, 13);
    let views = [gate.view(), up.view(), down.view()];
    let x = cases::activations(h, 1.0, 14);
    let mut d = vec![0.0f32; h];
    g.throughput(Throughput::Bytes(
        (gate.bytes() + up.bytes() + down.bytes()) as u64,
    ));
    g.bench_function("inkling-expert-fp16/1", |b| {
        b.iter(|| mlp::expert(&views, true, black_box(&x), 1, &mut d))
    });
    let wg = cases::activations(cfg.n_experts_total() * h, 0.05, 15);
    let bias = vec![0.0f32; cfg.n_routed];
    g.throughput(Throughput::Bytes((wg.len() * 4) as u64));
    g.bench_function("inkling-routing/1", |b| {
        b.iter(|| router::route(&wg, &bias, black_box(&x), cfg.top_k, 1.0))
    });
    // a MoE layer holding the experts its rows select (rows routed by the real router)
    let layer = 30;
    let probe = synth::single_layer(&cfg, 7, layer, Some(&[])).expect("layer");
    let (router_w, router_b) = match &probe.mlp {
        MlpWeights::Moe { router, bias, .. } => (router.clone(), bias.clone()),
        MlpWeights::Dense(_) => panic!("layer {layer} is dense"),
    };
    for &n in &[1usize, 8] {
        let xs = cases::activations(n * h, 1.0, 16 + n as u64);
        let mut keep: Vec<usize> = (cfg.n_routed..cfg.n_experts_total()).collect();
        for row in xs.chunks_exact(h) {
            keep.extend(router::route(&router_w, &router_b, row, cfg.top_k, 1.0).ids);
        }
        keep.sort_unstable();
        keep.dedup();
        let w = synth::single_layer(&cfg, 7, layer, Some(&keep)).expect("layer");
        let bytes: usize = match &w.mlp {
            MlpWeights::Moe { experts, .. } => experts.iter().map(|e| e.bytes()).sum(),
            MlpWeights::Dense(e) => e.bytes(),
        };
        let mut y = vec![0.0f32; n * h];
        let opts = ForwardOptions::default();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_with_input(BenchmarkId::new("inkling-moe-layer", n), &n, |b, _| {
            b.iter(|| mlp::forward(&cfg, &w, &opts, black_box(&xs), &mut y))
        });
    }
    g.finish();
}

/// (format, outputs, inputs): ggml block-format products at the SmolLM2-135M shapes (hidden 576,
/// MLP 1536, vocabulary 49152; the K-quants at 768, a multiple of their 256), single-threaded;
/// throughput in weight bytes read.
const BLOCK_SHAPES: &[(BlockFormat, usize, usize)] = &[
    (BlockFormat::Q4_1, 1536, 576),
    (BlockFormat::Q4_1, 576, 1536),
    (BlockFormat::Q4_0, 1536, 576),
    (BlockFormat::Q8_0, 1536, 576),
    (BlockFormat::Q8_0, 49152, 576),
    (BlockFormat::Q4K, 1536, 768),
    (BlockFormat::Q6K, 1536, 768),
    (BlockFormat::F16, 1536, 576),
];

fn block_products(c: &mut Criterion) {
    use moefleet_engine::kernels::blocks::encode::random_matrix;
    let mut g = c.benchmark_group("blocks");
    // one thread: the kernels stay on the calling one
    moefleet_engine::kernels::with_width(1, || {
        for &(f, rows, cols) in BLOCK_SHAPES {
            let cols = cols / f.block() * f.block();
            let w = random_matrix(f, rows, cols, 21).expect("computable format");
            let ns: &[usize] = if rows > 10_000 { &[1] } else { &[1, 8] };
            for &n in ns {
                let x = cases::activations(n * cols, 1.0, 22);
                let mut y = vec![0.0f32; n * rows];
                g.throughput(Throughput::Bytes(w.bytes() as u64));
                let name = format!("{f}-{rows}x{cols}");
                g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                    b.iter(|| w.matmul(black_box(&x), &mut y))
                });
            }
        }
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = int4_products, int8_products, attention_decode, expert_and_moe, block_products
}
criterion_main!(benches);
