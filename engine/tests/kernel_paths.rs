//! Every integer kernel path this CPU has (`kernels::IntPath`: AVX2, AVX-VNNI, AVX-512,
//! AVX-512 VNNI) against the AVX2 path, bit for bit; the AVX2 path is held to the reference by
//! `kernel_parity`. Each test prints which paths it ran (`make test` shows the lines); a path the
//! CPU lacks is not tested here, and the line says so.

#![allow(clippy::unwrap_used)]

use moefleet_engine::kernels::cases::{self, INT4_CASES, INT8_CASES};
use moefleet_engine::kernels::{int4, int8};

/// Every INT4 integer kernel this CPU has gives the AVX2 kernel's bits (the same exact i32 sums
/// per (row, group), then the same float operations in the same order: `int4::avx2`), on every
/// case, on views from a later tile and four (one ending in a partly used four), and on an output
/// range starting at a later tile; the AVX2 kernel is held to the reference by `kernel_parity`.
/// Prints which paths ran.
#[test]
fn every_int4_path_gives_the_avx2_bits() {
    use moefleet_engine::kernels::IntPath;
    let (ran, absent): (Vec<IntPath>, Vec<IntPath>) =
        IntPath::ALL.into_iter().partition(|p| p.on_cpu());
    println!(
        "INT4 paths run: {:?}; not on this CPU: {:?}",
        ran.iter().map(|p| p.name()).collect::<Vec<_>>(),
        absent.iter().map(|p| p.name()).collect::<Vec<_>>()
    );
    if !IntPath::Avx2.on_cpu() {
        return;
    }
    let wider: Vec<IntPath> = ran.into_iter().filter(|p| *p != IntPath::Avx2).collect();
    for (ci, c) in INT4_CASES.iter().filter(|c| c.quick).enumerate() {
        let w = cases::int4_matrix(c.rows, c.cols, 500 + ci as u64);
        let x = cases::activations(c.n * c.cols, 1.0, 600 + ci as u64);
        // the whole matrix, and (where it has them) rows from its second tile on
        let from = if c.rows > 8 { 4 } else { 0 };
        for o in [0..c.rows, from..c.rows] {
            let run = |path: IntPath| {
                let mut y = vec![0.0f32; c.n * o.len()];
                int4::matmul_on_path(path, &w.view(), &x, c.n, o.clone(), &mut y);
                y
            };
            let want = run(IntPath::Avx2);
            for &path in &wider {
                let got = run(path);
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{}: {} rows {o:?} differ from avx2",
                    c.name,
                    path.name()
                );
            }
        }
    }
    // views on the tile and four grid from a later tile and four: the matrix's last four in part
    // (1056 columns: 33 groups), and fours the view uses in part while the matrix stores them
    // whole (11 groups: a pair and a lone group after two fours; 6: a pair after one)
    let w = cases::int4_matrix(40, 1056, 7);
    for v in [
        w.view_part(4..36, 128..1056),
        w.view_part(8..40, 128..480),
        w.view_part(8..40, 256..448),
    ] {
        let x = cases::activations(3 * v.cols, 1.0, 8);
        let mut want = vec![0.0f32; 3 * v.rows];
        int4::matmul_on_path(IntPath::Avx2, &v, &x, 3, 0..v.rows, &mut want);
        for &path in &wider {
            let mut got = vec![0.0f32; 3 * v.rows];
            int4::matmul_on_path(path, &v, &x, 3, 0..v.rows, &mut got);
            assert_eq!(
                got.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                "{} on a view",
                path.name()
            );
        }
    }
}

/// Every INT8 integer kernel this CPU has gives the AVX2 kernel's bits (each lane the same exact
/// i32 sum, then the same float operations: `int8::avx2`), on every case and on widths whose
/// activation blocks are 16, 32 and 64 columns (on the 512-bit paths: 256 bits only, one 512-bit
/// step, two).
#[test]
fn every_int8_path_gives_the_avx2_bits() {
    use moefleet_engine::kernels::IntPath;
    let ran: Vec<IntPath> = IntPath::ALL.into_iter().filter(|p| p.on_cpu()).collect();
    println!(
        "INT8 paths run: {:?}",
        ran.iter().map(|p| p.name()).collect::<Vec<_>>()
    );
    if !IntPath::Avx2.on_cpu() {
        return;
    }
    let wider: Vec<IntPath> = ran.into_iter().filter(|p| *p != IntPath::Avx2).collect();
    let shapes = INT8_CASES
        .iter()
        .filter(|c| c.quick)
        .map(|c| (c.name, c.rows, c.cols, c.n))
        .chain([
            ("block-16", 9, 16, 3),
            ("block-32", 7, 96, 2),
            ("block-64", 5, 64, 1),
        ]);
    for (ci, (name, rows, cols, n)) in shapes.enumerate() {
        let w = cases::int8_matrix(rows, cols, 700 + ci as u64);
        let x = cases::activations(n * cols, 1.0, 800 + ci as u64);
        for o in [0..rows, rows / 3..rows] {
            let run = |path: IntPath| {
                let mut y = vec![0.0f32; n * o.len()];
                int8::matmul_on_path(path, &w, &x, n, o.clone(), &mut y);
                y.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
            };
            let want = run(IntPath::Avx2);
            for &path in &wider {
                assert_eq!(run(path), want, "{name}: {} rows {o:?}", path.name());
            }
        }
    }
}
