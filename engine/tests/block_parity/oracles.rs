//! The block products against outside implementations: llama.cpp's own ggml library (activation
//! conversion, dot products, dequantisation, reference quantisers) and python's `gguf` package
//! (dequantisation); each test skips, saying so, when its oracle is not installed.

use moefleet_engine::kernels::blocks::encode::{quantize, random_matrix};
use moefleet_engine::kernels::blocks::{BlockFormat, BlockMatrix, QuantizedActs, WeightBytes};
use moefleet_engine::kernels::cases;
use BlockFormat::*;

use super::{acts, bits, ALL};

/// llama.cpp's CPU library, called through its C ABI (the functions ggml's type tables name).
mod ggml {
    use std::ffi::{c_void, CString};

    pub type FromFloat = unsafe extern "C" fn(*const f32, *mut c_void, i64);
    pub type VecDot =
        unsafe extern "C" fn(i32, *mut f32, usize, *const c_void, usize, *const c_void, usize, i32);
    pub type ToFloat = unsafe extern "C" fn(*const c_void, *mut f32, i64);
    pub type Quantize =
        unsafe extern "C" fn(*const f32, *mut c_void, i64, i64, *const f32) -> usize;

    pub struct Lib {
        cpu: *mut c_void,
        base: *mut c_void,
    }

    /// `MOEFLEET_GGML_LIB_DIR`, else the peer build under ~/.cache/moefleet; `None` when absent.
    pub fn open() -> Option<Lib> {
        let dir = std::env::var("MOEFLEET_GGML_LIB_DIR").ok().filter(|d| !d.is_empty()).or_else(|| {
            std::env::var("HOME").ok().map(|h| {
                format!("{h}/.cache/moefleet/peer/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin")
            })
        })?;
        let load = |name: &str| {
            let p = CString::new(format!("{dir}/{name}")).ok()?;
            // SAFETY: dlopen of a path; a null handle is checked.
            let h = unsafe { libc::dlopen(p.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            (!h.is_null()).then_some(h)
        };
        let lib = Lib {
            base: load("libggml-base.so")?,
            cpu: load("libggml-cpu.so")?,
        };
        let init: unsafe extern "C" fn() = lib.sym(true, "ggml_cpu_init")?;
        // SAFETY: ggml_cpu_init takes no arguments and fills ggml's conversion tables.
        unsafe { init() };
        Some(lib)
    }

    impl Lib {
        /// The function `name` of the CPU library (`cpu`) or the base one, typed as `T` (a fn
        /// pointer of the C signature the caller states).
        pub fn sym<T: Copy>(&self, cpu: bool, name: &str) -> Option<T> {
            let c = CString::new(name).ok()?;
            // SAFETY: dlsym on a live handle; the pointer is checked and reinterpreted as the fn
            // type the caller names, which must match ggml's declaration.
            unsafe {
                let p = libc::dlsym(if cpu { self.cpu } else { self.base }, c.as_ptr());
                (!p.is_null()).then(|| std::mem::transmute_copy::<*mut c_void, T>(&p))
            }
        }
    }
}

/// With llama.cpp's build of ggml at hand (the peer's, or any named by `MOEFLEET_GGML_LIB_DIR`):
/// its activation conversion, dot products, dequantisation and reference quantisers against the
/// engine's, bit for bit. An AVX-512 build (`GGML_NATIVE` on such a CPU) runs the float dots over
/// 16 lanes, so those are compared only against AVX2 builds (e.g. cmake `-DGGML_NATIVE=OFF
/// -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_OPENMP=OFF`, target `ggml-cpu`, GCC 12).
#[test]
fn ggml_library_agrees_bit_for_bit() {
    let Some(lib) = ggml::open() else {
        eprintln!("libggml-cpu.so not found: skipped (set MOEFLEET_GGML_LIB_DIR)");
        return;
    };
    let has_avx512: unsafe extern "C" fn() -> i32 = lib.sym(true, "ggml_cpu_has_avx512").unwrap();
    // SAFETY: no arguments.
    let avx512 = unsafe { has_avx512() } != 0;
    let table = ggml_functions();
    let runs = table.iter().flat_map(|&t| {
        let cols: &[usize] = match t.0.block() {
            256 => &[1536],
            32 => &[672],
            // the float dots' tails: 17 = 16 + 1, 13 = 8 + 4 + 1, 7 = 4 + 3, 6 = 4 + 2, 3
            _ => &[689, 45, 7, 70, 3],
        };
        cols.iter().map(move |&c| (t, c))
    });
    let mut dots = 0;
    for ((f, from, dot, to, quant), cols) in runs {
        let (rows, n) = (11, 3);
        let s = Shape { f, rows, cols, n };
        let x = acts(n, cols, 60);
        let mut ms = vec![random_matrix(f, rows, cols, 61).unwrap()];
        // ggml's own quantiser on f32 weights (its reference quantisers; K-quants without imatrix)
        if !quant.is_empty() {
            ms.push(ggml_quantised(&lib, s, quant));
        }
        let xq = QuantizedActs::for_weights(f, &x, cols);
        let ours = xq.to_ggml_bytes();
        if !from.is_empty() {
            check_activations(&lib, s, from, &x, &ours);
        }
        for m in &ms {
            let mut y = vec![0.0; n * rows];
            m.matmul(&x, &mut y);
            if !to.is_empty() {
                check_dequantised(&lib, s, to, m);
            }
            // ggml's AVX-512 builds reduce the float dots over 16 lanes (not mirrored)
            if avx512 && matches!(f, F32 | F16 | Bf16) {
                continue;
            }
            dots += check_dots(&lib, s, dot, m, &y, &ours);
        }
    }
    eprintln!(
        "ggml ({}): {dots} dot products equal",
        if avx512 {
            "AVX-512 build"
        } else {
            "AVX2 build"
        }
    );
    assert!(dots >= 6 * 2 * 11 * 3, "every quantised format compared");
}

/// ggml's functions for each format: (format, from_float, vec_dot, to_float, quantize).
fn ggml_functions() -> [(
    BlockFormat,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
); 9] {
    [
        (
            Q4_0,
            "quantize_row_q8_0",
            "ggml_vec_dot_q4_0_q8_0",
            "dequantize_row_q4_0",
            "quantize_q4_0",
        ),
        (
            Q4_1,
            "quantize_row_q8_1",
            "ggml_vec_dot_q4_1_q8_1",
            "dequantize_row_q4_1",
            "quantize_q4_1",
        ),
        (
            Q8_0,
            "quantize_row_q8_0",
            "ggml_vec_dot_q8_0_q8_0",
            "dequantize_row_q8_0",
            "quantize_q8_0",
        ),
        (
            Q4K,
            "quantize_row_q8_K",
            "ggml_vec_dot_q4_K_q8_K",
            "dequantize_row_q4_K",
            "quantize_q4_K",
        ),
        (
            Q5K,
            "quantize_row_q8_K",
            "ggml_vec_dot_q5_K_q8_K",
            "dequantize_row_q5_K",
            "quantize_q5_K",
        ),
        (
            Q6K,
            "quantize_row_q8_K",
            "ggml_vec_dot_q6_K_q8_K",
            "dequantize_row_q6_K",
            "quantize_q6_K",
        ),
        (
            F16,
            "ggml_cpu_fp32_to_fp16",
            "ggml_vec_dot_f16",
            "ggml_fp16_to_fp32_row",
            "",
        ),
        (
            Bf16,
            "ggml_cpu_fp32_to_bf16",
            "ggml_vec_dot_bf16",
            "ggml_bf16_to_fp32_row",
            "",
        ),
        (F32, "", "ggml_vec_dot_f32", "", ""),
    ]
}

/// One comparison's shape: `n` activation rows against a `rows` × `cols` matrix of format `f`.
#[derive(Clone, Copy)]
struct Shape {
    f: BlockFormat,
    rows: usize,
    cols: usize,
    n: usize,
}

/// A matrix quantised by ggml's `quant`, checked against the engine's quantiser where it has one.
fn ggml_quantised(lib: &ggml::Lib, s: Shape, quant: &str) -> BlockMatrix {
    let Shape { f, rows, cols, .. } = s;
    let wf = cases::activations(rows * cols, 0.1, 62);
    let q: ggml::Quantize = lib.sym(false, quant).unwrap();
    let mut buf = vec![0u8; f.bytes_of((rows * cols) as u64).unwrap() as usize];
    // SAFETY: wf holds rows · cols floats and buf the bytes of that many elements.
    let len = unsafe {
        q(
            wf.as_ptr(),
            buf.as_mut_ptr().cast(),
            rows as i64,
            cols as i64,
            std::ptr::null(),
        )
    };
    assert_eq!(len, buf.len(), "{f}");
    if let Some(ours) = quantize(f, &wf) {
        assert_eq!(ours, buf, "{f}: the engine's quantiser writes ggml's bytes");
    }
    BlockMatrix::new(f, rows, cols, WeightBytes::owned(buf)).unwrap()
}

/// ggml's `from` conversion of the activations `x` writes the engine's bytes `ours`.
fn check_activations(lib: &ggml::Lib, s: Shape, from: &str, x: &[f32], ours: &[u8]) {
    let Shape { f, cols, n, .. } = s;
    let row_bytes = ours.len() / n;
    let ff: ggml::FromFloat = lib.sym(true, from).unwrap();
    let mut theirs = vec![0u8; ours.len()];
    for r in 0..n {
        // SAFETY: a row of cols floats into row_bytes bytes of the vec_dot type.
        unsafe {
            ff(
                x[r * cols..].as_ptr(),
                theirs[r * row_bytes..].as_mut_ptr().cast(),
                cols as i64,
            )
        };
    }
    assert_eq!(ours, theirs, "{f}: activations");
}

/// ggml's `to` dequantisation of each row of `m` gives the engine's floats.
fn check_dequantised(lib: &ggml::Lib, s: Shape, to: &str, m: &BlockMatrix) {
    let Shape { f, rows, cols, .. } = s;
    let tf: ggml::ToFloat = lib.sym(false, to).unwrap();
    for o in 0..rows {
        let (mut a, mut b) = (vec![0.0; cols], vec![0.0; cols]);
        m.dequantize_row(o, &mut a);
        // SAFETY: one row's blocks into cols floats.
        unsafe { tf(m.row(o).as_ptr().cast(), b.as_mut_ptr(), cols as i64) };
        assert_eq!(bits(&a), bits(&b), "{f}: dequantised row {o}");
    }
}

/// ggml's `dot` of every row pair equals the engine's product `y`; returns how many were compared.
fn check_dots(
    lib: &ggml::Lib,
    s: Shape,
    dot: &str,
    m: &BlockMatrix,
    y: &[f32],
    ours: &[u8],
) -> usize {
    let Shape { f, rows, cols, n } = s;
    let row_bytes = ours.len() / n;
    let vd: ggml::VecDot = lib.sym(true, dot).unwrap();
    let mut dots = 0;
    for o in 0..rows {
        for r in 0..n {
            let mut s = 0.0f32;
            // SAFETY: one weight row and one activation row of cols elements each.
            unsafe {
                vd(
                    cols as i32,
                    &mut s,
                    0,
                    m.row(o).as_ptr().cast(),
                    0,
                    ours[r * row_bytes..].as_ptr().cast(),
                    0,
                    1,
                )
            };
            assert_eq!(
                y[r * rows + o].to_bits(),
                s.to_bits(),
                "{f}: out {o} row {r}: {} vs ggml {s}",
                y[r * rows + o]
            );
            dots += 1;
        }
    }
    dots
}

#[test]
fn dequantisation_agrees_with_python_gguf() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import gguf, numpy"])
        .output();
    if !probe.map(|o| o.status.success()).unwrap_or(false) {
        eprintln!("python3 with gguf not found: skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for f in ALL {
        let (rows, cols) = (5, if f.block() == 256 { 512 } else { 96 });
        let m = random_matrix(f, rows, cols, 70).unwrap();
        let src = dir.path().join(format!("{f}.bin"));
        let dst = dir.path().join(format!("{f}.f32"));
        std::fs::write(&src, &m.weight_bytes()[..]).unwrap();
        let script = format!(
            "import numpy as np; from gguf import quants, GGMLQuantizationType as T\n\
             b = np.fromfile('{}', dtype=np.uint8).reshape({rows}, -1)\n\
             quants.dequantize(b, T.{}).astype(np.float32).tofile('{}')",
            src.display(),
            f.name(),
            dst.display()
        );
        let out = std::process::Command::new("python3")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs: Vec<f32> = std::fs::read(&dst)
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let mut ours = vec![0.0; rows * cols];
        for o in 0..rows {
            m.dequantize_row(o, &mut ours[o * cols..(o + 1) * cols]);
        }
        assert_eq!(bits(&ours), bits(&theirs), "{f}");
    }
}
