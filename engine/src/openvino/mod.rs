//! The OpenVINO backend: a layer's products run as graphs the engine builds from its stored
//! weights and OpenVINO compiles (docs/FORMAT.md "OpenVINO graphs"). The host keeps routing,
//! attention over the caches, norms, convolutions and the FP32 restoration, exactly as the native
//! path; only the products move.
//!
//! - `locate`: finding and loading the C library (the PyPI wheel's, without user-set paths).
//! - `ffi`: owned handles over the C calls used.
//! - `ir`: the IR (XML + weights) writer.
//! - `graphs`: the graphs of a layer.
//! - `layers`: a model's compiled graphs and running them.

pub mod ffi;
pub mod graphs;
pub mod ir;
pub mod layers;
pub mod locate;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::config::{Backend, OvPrecision};
use ffi::{Compiled, Core, Elem, ExecutedNode, Request};
use ir::Graph;

/// One Core configured for one backend choice (properties set on a Core hold for every later
/// compilation on it, so each configuration gets its own).
pub struct Runtime {
    core: Core,
    pub backend: Backend,
    /// Per-node profiling on (costs a little per call; for reports, not for timing).
    pub profiling: bool,
    pub library: String,
}

impl Runtime {
    pub fn new(backend: Backend, profiling: bool) -> Result<Runtime> {
        let lib = locate::load()?;
        let core = Core::new()?;
        let device = backend.device.name();
        let devices = core.available_devices()?;
        if backend.device != crate::model::config::Device::Auto
            && !devices.iter().any(|d| d.starts_with(device))
        {
            return Err(Error::Config(format!(
                "OpenVINO device {device} is not available here (available: {})",
                devices.join(", ")
            )));
        }
        // on the device named (for AUTO: its choice); a device that refuses one of these fails
        // here with OpenVINO's message rather than running with settings silently ignored
        if backend.precision == OvPrecision::F32 {
            if backend.device == crate::model::config::Device::Auto {
                return Err(Error::Config(
                    "OpenVINO's AUTO device takes no precision hint: give --device CPU (or GPU, \
                     NPU) for f32, or --ov-precision device-default with AUTO"
                        .into(),
                ));
            }
            core.set_property(device, "INFERENCE_PRECISION_HINT", "f32")?;
            if backend.device == crate::model::config::Device::Cpu {
                core.set_property(device, "DYNAMIC_QUANTIZATION_GROUP_SIZE", "0")?;
            }
        }
        // one request at a time on the caller's behalf: latency
        core.set_property(device, "PERFORMANCE_HINT", "LATENCY")?;
        if backend.device == crate::model::config::Device::Cpu {
            core.set_property(device, "NUM_STREAMS", "1")?;
            // roles sharing the cores compute on one thread each (pipeline::share_cores)
            let threads = if crate::pipeline::sharing_cores() {
                1
            } else {
                crate::kernels::threads()
            };
            core.set_property(device, "INFERENCE_NUM_THREADS", &threads.to_string())?;
        }
        if profiling {
            core.set_property(device, "PERF_COUNT", "YES")?;
        }
        Ok(Runtime {
            core,
            backend,
            profiling,
            library: lib.display().to_string(),
        })
    }

    /// Read and compile `g`.
    pub fn compile(&self, g: &Graph, name: &str) -> Result<Program> {
        let t0 = Instant::now();
        let model = self.core.read_model(&g.xml(name), g.weights())?;
        let compiled = self.core.compile(&model, self.backend.device.name())?;
        let request = compiled.request()?;
        Ok(Program {
            name: name.into(),
            request: Mutex::new(request),
            compiled,
            parameters: g.parameters(),
            compile_time: t0.elapsed(),
        })
    }

    /// OpenVINO's version string.
    pub fn version() -> Result<String> {
        locate::load()?;
        Ok(ffi::version())
    }
}

/// A compiled graph and its one infer request (declared first: dropped before the model).
pub struct Program {
    pub name: String,
    request: Mutex<Request>,
    compiled: Compiled,
    /// Element types of the graph's parameters, in order.
    parameters: Vec<String>,
    pub compile_time: Duration,
}

/// An input of a program: f32 values or i32 ids, with their shape.
pub enum Input<'a> {
    F32(&'a [f32], &'a [usize]),
    I32(&'a [i32], &'a [usize]),
}

impl Program {
    /// Run with `inputs` (in parameter order) and return `outputs` f32 outputs.
    /// Every parameter must be bound, with its element type and as many values as its shape.
    pub fn run(&self, inputs: &[Input<'_>], outputs: usize) -> Result<Vec<Vec<f32>>> {
        if inputs.len() != self.parameters.len() {
            return Err(Error::Input(format!(
                "OpenVINO graph {} takes {} inputs, {} given",
                self.name,
                self.parameters.len(),
                inputs.len()
            )));
        }
        let mut raw: Vec<(Elem, &[usize], *const std::ffi::c_void)> =
            Vec::with_capacity(inputs.len());
        for (i, (input, want)) in inputs.iter().zip(&self.parameters).enumerate() {
            let (elem, name, len, dims, ptr) = match input {
                Input::F32(v, d) => (Elem::F32, "f32", v.len(), *d, v.as_ptr().cast()),
                Input::I32(v, d) => (Elem::I32, "i32", v.len(), *d, v.as_ptr().cast()),
            };
            if name != want || len != dims.iter().product::<usize>() {
                return Err(Error::Input(format!(
                    "OpenVINO graph {} input {i}: {len} {name} values for shape {dims:?}, the \
                     graph takes {want}",
                    self.name
                )));
            }
            raw.push((elem, dims, ptr));
        }
        let mut r = self
            .request
            .lock()
            .map_err(|_| Error::State(format!("OpenVINO request {} poisoned", self.name)))?;
        // SAFETY: every parameter is bound, each to a live slice of exactly its shape's length
        // and element type, borrowed for the whole call.
        unsafe { r.run(&raw, outputs) }
    }

    /// The executed nodes of the last run (profiling runtimes only).
    pub fn executed(&self) -> Result<Vec<ExecutedNode>> {
        let r = self
            .request
            .lock()
            .map_err(|_| Error::State(format!("OpenVINO request {} poisoned", self.name)))?;
        r.profile()
    }

    /// A property as the compiled model resolved it (e.g. `INFERENCE_PRECISION_HINT`).
    pub fn property(&self, key: &str) -> Result<String> {
        self.compiled.property(key)
    }
}

/// What OpenVINO did with one graph: the nodes it executed, and how.
#[derive(Clone, Debug, Serialize)]
pub struct GraphReport {
    pub graph: String,
    pub compile_ms: f64,
    pub inference_precision: String,
    pub dynamic_quantization_group_size: String,
    /// Executed nodes as `type:exec_type` with their count, in first-seen order.
    pub executed: Vec<(String, usize)>,
    /// Nodes that ran a reference (non-optimised) implementation: fallbacks.
    pub reference_nodes: usize,
    /// Whether the MoE form ran fused: the plugin's `GatherMatmul` nodes (only the selected
    /// experts' weights read) instead of a product over every expert.
    pub moe_fused: bool,
}

impl GraphReport {
    pub fn of(p: &Program) -> Result<GraphReport> {
        let nodes = p.executed()?;
        let mut executed: Vec<(String, usize)> = Vec::new();
        for n in nodes.iter().filter(|n| n.executed) {
            let key = format!("{}:{}", n.node_type, n.exec_type);
            match executed.iter_mut().find(|(k, _)| *k == key) {
                Some((_, c)) => *c += 1,
                None => executed.push((key, 1)),
            }
        }
        let reference_nodes = nodes
            .iter()
            .filter(|n| n.executed && n.exec_type.to_ascii_lowercase().contains("ref"))
            .count();
        let moe_fused = nodes
            .iter()
            .any(|n| n.executed && n.node_type.starts_with("GatherMatmul"));
        Ok(GraphReport {
            graph: p.name.clone(),
            compile_ms: p.compile_time.as_secs_f64() * 1e3,
            inference_precision: p.property("INFERENCE_PRECISION_HINT")?,
            dynamic_quantization_group_size: p
                .property("DYNAMIC_QUANTIZATION_GROUP_SIZE")
                .unwrap_or_else(|e| format!("unreadable: {e}")),
            executed,
            reference_nodes,
            moe_fused,
        })
    }
}
