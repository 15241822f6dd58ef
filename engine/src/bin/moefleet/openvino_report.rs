//! What OpenVINO executes for a model's graphs on a device: builds the OpenVINO backend with
//! per-node profiling, runs a short prompt through it, and writes (JSON) the library and version,
//! the devices, and for the first dense and first MoE layer and the head: the executed nodes
//! and kernels, the precision the device resolved, whether the MoE form ran fused (only the
//! selected experts' weights read), and reference-implementation fallbacks.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: WholeModel,
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    device: Device,
    #[arg(long, value_enum, default_value_t = OvPrecision::F32)]
    ov_precision: OvPrecision,
    /// Prompt tokens run through the graphs (rows of the frame).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=512))]
    rows: u64,
    /// Write the report here (printed either way).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let Args {
        model: source,
        device,
        ov_precision,
        rows,
        out,
    } = args;
    let w = source.load("the report")?;
    let backend = Backend {
        kind: BackendKind::Openvino,
        device,
        precision: ov_precision,
        profile: true,
    };
    let model = Model::new(
        w,
        ForwardOptions {
            backend,
            ..Default::default()
        },
    );
    let t0 = std::time::Instant::now();
    model.prepare()?;
    let compile_s = t0.elapsed().as_secs_f64();
    let c = model.config().clone();
    let toks: Vec<u32> = (0..rows as u32).map(|i| 1 + i * 7).collect();
    let mut st = model.new_stream(toks.len() + 1);
    let mut x = vec![0.0f32; toks.len() * c.hidden];
    model.embed(&toks, &mut x)?;
    model.forward(
        &mut [moefleet_engine::model::Segment {
            state: &mut st,
            rows: toks.len(),
        }],
        &mut x,
    )?;
    model.logits(&x)?;
    let ov = moefleet_engine::openvino::layers::of(model.backend()?)
        .context("the OpenVINO backend was not built")?;
    let graphs = ov.report()?;
    let rec = serde_json::json!({
        "record": "openvino_report",
        "model": c.name,
        "openvino_version": moefleet_engine::openvino::Runtime::version()?,
        "library": ov.runtime.library,
        "device": device.name(),
        "requested_precision": ov_precision,
        "rows": rows,
        "compile_all_layers_s": compile_s,
        // null when the range has no MoE layer (nothing to fuse)
        "moe_fused": graphs
            .iter()
            .any(|g| g.graph.ends_with(".moe"))
            .then(|| graphs.iter().filter(|g| g.graph.ends_with(".moe")).all(|g| g.moe_fused)),
        "fallback_nodes": graphs.iter().map(|g| g.reference_nodes).sum::<usize>(),
        "graphs": graphs,
        "host": bench::host_facts(),
        "engine_commit": env!("MOEFLEET_BUILD_COMMIT"),
    });
    let text = serde_json::to_string_pretty(&rec)? + "\n";
    if let Some(path) = out {
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    }
    print!("{text}");
    Ok(())
}
