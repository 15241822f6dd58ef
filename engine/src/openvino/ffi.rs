//! The few OpenVINO C calls the backend makes, behind owned handles that free themselves.
//!
//! Through `openvino-sys` (runtime linking) rather than the `openvino` crate's safe types: those
//! keep the infer request's handle private, and the per-node profile (which operations the plugin
//! actually executed, and in which precision) is reachable only through it.

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;

use openvino_sys as sys;

use crate::error::{Error, Result};

/// A failed C call as an engine error, with OpenVINO's own message.
fn check(what: &str, status: sys::ov_status_e) -> Result<()> {
    if status == sys::ov_status_e::OK {
        return Ok(());
    }
    // SAFETY: ov_get_last_err_msg returns a fresh NUL-terminated copy (or null) that the caller
    // frees with ov_free, which take_string does. The message is the library's last error of any
    // thread: under concurrent failures it may belong to another call (the status above is ours).
    let msg = take_string(unsafe { sys::ov_get_last_err_msg() }.cast_mut());
    Err(Error::Config(format!(
        "OpenVINO {what} failed ({status:?}): {}",
        msg.trim()
    )))
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Config(format!("NUL byte in OpenVINO argument {s:?}")))
}

/// Element types the backend's graphs use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    F32,
    I32,
    U8,
}

impl Elem {
    fn sys(self) -> sys::ov_element_type_e {
        match self {
            Elem::F32 => sys::ov_element_type_e::F32,
            Elem::I32 => sys::ov_element_type_e::I32,
            Elem::U8 => sys::ov_element_type_e::U8,
        }
    }
}

pub struct Core(*mut sys::ov_core_t);

// SAFETY: OpenVINO documents `ov::Core` and `ov::CompiledModel` as safe to use from several
// threads at once (their methods lock internally), so sharing the handles is sound; an infer
// request is not, so `Request` is only `Send` and the backend keeps each one behind a Mutex.
unsafe impl Send for Core {}
unsafe impl Sync for Core {}

impl Core {
    pub fn new() -> Result<Core> {
        let mut p = ptr::null_mut();
        // SAFETY: out-pointer call; p is written on success.
        check("core creation", unsafe { sys::ov_core_create(&mut p) })?;
        Ok(Core(p))
    }

    /// Set a property of `device` on this Core (it holds for every later compilation here).
    /// Through the non-variadic `ov_core_set_properties` (the variadic `ov_core_set_property`
    /// cannot be called soundly through a plain function pointer).
    pub fn set_property(&self, device: &str, key: &str, value: &str) -> Result<()> {
        let (d, k, v) = (cstring(device)?, cstring(key)?, cstring(value)?);
        let prop = sys::ov_property_t {
            key: k.as_ptr(),
            value: v.as_ptr().cast::<c_void>(),
        };
        // SAFETY: one key/value pair of valid C strings that outlive the call; OpenVINO copies them.
        check(&format!("setting {key}={value} on {device}"), unsafe {
            sys::ov_core_set_properties(self.0, d.as_ptr(), 1, &prop)
        })
    }

    /// Devices this Core can compile for (e.g. `["CPU"]`).
    pub fn available_devices(&self) -> Result<Vec<String>> {
        let mut list = sys::ov_available_devices_t {
            devices: ptr::null_mut(),
            size: 0,
        };
        // SAFETY: out-struct call; freed below with its own free function.
        check("listing devices", unsafe {
            sys::ov_core_get_available_devices(self.0, &mut list)
        })?;
        let out = (0..list.size)
            .map(|i| {
                // SAFETY: `size` valid C strings.
                unsafe { CStr::from_ptr(*list.devices.add(i)) }
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        // SAFETY: frees what the call above allocated.
        unsafe { sys::ov_available_devices_free(&mut list) };
        Ok(out)
    }

    /// Read an IR (XML text and its weights buffer) from memory.
    pub fn read_model(&self, xml: &str, weights: &[u8]) -> Result<Model> {
        let w = Tensor::from_bytes(weights)?;
        let mut p = ptr::null_mut();
        // SAFETY: xml is valid for its length; the weights tensor outlives the call (OpenVINO
        // copies or references-counts it: constants are materialised during the read).
        check("reading the IR", unsafe {
            sys::ov_core_read_model_from_memory_buffer(
                self.0,
                xml.as_ptr().cast::<c_char>(),
                xml.len(),
                w.0,
                &mut p,
            )
        })?;
        Ok(Model(p))
    }

    pub fn compile(&self, model: &Model, device: &str) -> Result<Compiled> {
        let d = cstring(device)?;
        let mut p = ptr::null_mut();
        // SAFETY: the non-variadic form with no properties; out-pointer written on success.
        check(&format!("compiling for {device}"), unsafe {
            sys::ov_core_compile_model_props(self.0, model.0, d.as_ptr(), 0, ptr::null(), &mut p)
        })?;
        Ok(Compiled(p))
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { sys::ov_core_free(self.0) }
    }
}

fn take_string(p: *mut c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated string allocated by OpenVINO, freed with ov_free.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    unsafe { sys::ov_free(p) };
    s
}

pub struct Model(*mut sys::ov_model_t);

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { sys::ov_model_free(self.0) }
    }
}

pub struct Compiled(*mut sys::ov_compiled_model_t);

unsafe impl Send for Compiled {}
unsafe impl Sync for Compiled {}

impl Compiled {
    pub fn property(&self, key: &str) -> Result<String> {
        let k = cstring(key)?;
        let mut out: *mut c_char = ptr::null_mut();
        // SAFETY: out-pointer call; the string is freed by take_string.
        check(&format!("reading compiled property {key}"), unsafe {
            sys::ov_compiled_model_get_property(self.0, k.as_ptr(), &mut out)
        })?;
        Ok(take_string(out))
    }

    pub fn request(&self) -> Result<Request> {
        let mut p = ptr::null_mut();
        // SAFETY: out-pointer call.
        check("creating an infer request", unsafe {
            sys::ov_compiled_model_create_infer_request(self.0, &mut p)
        })?;
        Ok(Request(p))
    }
}

impl Drop for Compiled {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { sys::ov_compiled_model_free(self.0) }
    }
}

/// One node of the executed graph, from the plugin's per-node profile.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ExecutedNode {
    pub name: String,
    /// The plugin's node type (e.g. `FullyConnected`, `MOE`, `Reference` for a fallback).
    pub node_type: String,
    /// The kernel and precision it ran (e.g. `brgemm_avx2_FP32`).
    pub exec_type: String,
    pub executed: bool,
    pub real_time_us: i64,
}

pub struct Request(*mut sys::ov_infer_request_t);

unsafe impl Send for Request {}

impl Request {
    /// Bind input i to `inputs[i]` (element type, shape, data) without copying, run, and return the
    /// first `outputs` outputs' values.
    ///
    /// # Safety
    /// Each data pointer must point to at least the shape's element count of its element type,
    /// alive for the duration of the call, and `inputs` must bind every parameter of the graph
    /// (a parameter left bound from an earlier call would read memory that may be gone).
    pub(super) unsafe fn run(
        &mut self,
        inputs: &[(Elem, &[usize], *const c_void)],
        outputs: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let mut held = Vec::with_capacity(inputs.len());
        for (i, &(elem, dims, data)) in inputs.iter().enumerate() {
            let t = Tensor::wrap(elem, dims, data)?;
            // SAFETY: the tensor wraps memory the caller keeps alive for this call.
            check("binding an input", unsafe {
                sys::ov_infer_request_set_input_tensor_by_index(self.0, i, t.0)
            })?;
            held.push(t);
        }
        // SAFETY: all inputs are bound.
        check("inference", unsafe { sys::ov_infer_request_infer(self.0) })?;
        let mut out = Vec::with_capacity(outputs);
        for i in 0..outputs {
            let mut t = ptr::null_mut();
            // SAFETY: out-pointer call; the tensor is freed by its owner below.
            check("reading an output", unsafe {
                sys::ov_infer_request_get_output_tensor_by_index(self.0, i, &mut t)
            })?;
            let t = Tensor(t);
            out.push(t.to_f32()?);
        }
        drop(held);
        Ok(out)
    }

    /// The per-node profile of the last inference (needs `PERF_COUNT` set on the Core).
    pub fn profile(&self) -> Result<Vec<ExecutedNode>> {
        let mut list = sys::ov_profiling_info_list_t {
            profiling_infos: ptr::null_mut(),
            size: 0,
        };
        // SAFETY: out-struct call, freed below with its own free function.
        check("reading the profile", unsafe {
            sys::ov_infer_request_get_profiling_info(self.0, &mut list)
        })?;
        let s = |p: *const c_char| {
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: NUL-terminated strings owned by the list.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        let out = (0..list.size)
            .map(|i| {
                // SAFETY: `size` entries.
                let e = unsafe { &*list.profiling_infos.add(i) };
                ExecutedNode {
                    name: s(e.node_name),
                    node_type: s(e.node_type),
                    exec_type: s(e.exec_type),
                    executed: e.status == sys::ov_profiling_info_t_Status::EXECUTED,
                    real_time_us: e.real_time,
                }
            })
            .collect();
        // SAFETY: frees what the call above allocated.
        unsafe { sys::ov_profiling_info_list_free(&mut list) };
        Ok(out)
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { sys::ov_infer_request_free(self.0) }
    }
}

struct Tensor(*mut sys::ov_tensor_t);

impl Tensor {
    fn shape(dims: &[usize]) -> Result<sys::ov_shape_t> {
        let d: Vec<i64> = dims.iter().map(|&v| v as i64).collect();
        let mut s = sys::ov_shape_t {
            rank: 0,
            dims: ptr::null_mut(),
        };
        // SAFETY: d is valid for its length; the shape copies it.
        check("making a shape", unsafe {
            sys::ov_shape_create(d.len() as i64, d.as_ptr(), &mut s)
        })?;
        Ok(s)
    }

    /// A tensor over memory the caller owns (no copy).
    fn wrap(elem: Elem, dims: &[usize], data: *const c_void) -> Result<Tensor> {
        let mut s = Self::shape(dims)?;
        let mut p = ptr::null_mut();
        // SAFETY: OpenVINO reads (inputs only) from data for the tensor's lifetime.
        let r = check("wrapping an input", unsafe {
            sys::ov_tensor_create_from_host_ptr(elem.sys(), s, data as *mut c_void, &mut p)
        });
        // SAFETY: the tensor copied the shape.
        unsafe { sys::ov_shape_free(&mut s) };
        r?;
        Ok(Tensor(p))
    }

    /// A U8 tensor holding a copy of `bytes` (the IR's weights buffer).
    fn from_bytes(bytes: &[u8]) -> Result<Tensor> {
        let mut s = Self::shape(&[bytes.len().max(1)])?;
        let mut p = ptr::null_mut();
        // SAFETY: out-pointer call; the tensor owns its storage.
        let r = check("allocating the weights buffer", unsafe {
            sys::ov_tensor_create(Elem::U8.sys(), s, &mut p)
        });
        unsafe { sys::ov_shape_free(&mut s) };
        r?;
        let t = Tensor(p);
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: the tensor's storage is at least bytes.len() bytes.
        check("mapping the weights buffer", unsafe {
            sys::ov_tensor_data(t.0, &mut data)
        })?;
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), data.cast::<u8>(), bytes.len()) };
        Ok(t)
    }

    fn to_f32(&self) -> Result<Vec<f32>> {
        let mut n = 0usize;
        // SAFETY: out-pointer calls on a live tensor.
        check("output size", unsafe {
            sys::ov_tensor_get_size(self.0, &mut n)
        })?;
        let mut et = sys::ov_element_type_e::DYNAMIC;
        check("output type", unsafe {
            sys::ov_tensor_get_element_type(self.0, &mut et)
        })?;
        if et != sys::ov_element_type_e::F32 {
            return Err(Error::Config(format!(
                "OpenVINO output is {et:?}, the backend reads f32"
            )));
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut data: *mut c_void = ptr::null_mut();
        check("mapping an output", unsafe {
            sys::ov_tensor_data(self.0, &mut data)
        })?;
        // SAFETY: n f32 values at data.
        Ok(unsafe { std::slice::from_raw_parts(data.cast::<f32>(), n) }.to_vec())
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { sys::ov_tensor_free(self.0) }
    }
}

/// OpenVINO's build number (e.g. `2026.4.1-22982-...`).
pub fn version() -> String {
    let mut v = sys::ov_version_t {
        buildNumber: ptr::null(),
        description: ptr::null(),
    };
    // SAFETY: out-struct call; freed with its own free function.
    if unsafe { sys::ov_get_openvino_version(&mut v) } != sys::ov_status_e::OK {
        return "unknown".into();
    }
    let s = if v.buildNumber.is_null() {
        "unknown".into()
    } else {
        unsafe { CStr::from_ptr(v.buildNumber) }
            .to_string_lossy()
            .into_owned()
    };
    unsafe { sys::ov_version_free(&mut v) };
    s
}
