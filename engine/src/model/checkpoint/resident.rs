//! A role's matrices copied out of the GGUF file's map into memory of 2 MiB pages
//! (`blocks::bytes::resident_copies`). Through the file's map every 4 KiB page of a weight costs a
//! TLB entry; a one-row product streams the whole matrix, so decode walked page tables through
//! every layer and the head. Side by side on host D, SmolLM2 decode (tg128, `moefleet bench`) ran
//! faster from the copies (not a committed record; `MOEFLEET_MAP_WEIGHTS=1` gives the other side).
//! The embedding stays a view of the map (a token reads one row of it), and a byte range two
//! matrices share is copied once. The copies are anonymous memory: a role's resident size grows by
//! its weights, while the file's page cache can be dropped, and a role now reads all its weights at
//! start-up where the map read them on first use. `MOEFLEET_MAP_WEIGHTS=1` keeps every matrix a
//! view of the map, and so does a kernel with transparent huge pages off.

use std::collections::HashMap;

use super::{CheckpointMlp, CheckpointWeights};
use crate::error::{Error, Result};
use crate::kernels::blocks::bytes::resident_copies;
use crate::kernels::blocks::BlockMatrix;

/// Whether this process copies the weights (see the module header).
pub fn wanted() -> bool {
    if std::env::var_os("MOEFLEET_MAP_WEIGHTS").is_some_and(|v| v != "0") {
        return false;
    }
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| !s.contains("[never]"))
}

/// Every matrix of `w` but the embedding.
fn matrices(w: &mut CheckpointWeights) -> Vec<&mut BlockMatrix> {
    let mut out: Vec<&mut BlockMatrix> = w.head.iter_mut().collect();
    for l in &mut w.layers {
        out.extend([&mut l.q, &mut l.k, &mut l.v, &mut l.o]);
        match &mut l.mlp {
            CheckpointMlp::Dense { gate, up, down } => out.extend([gate, up, down]),
            CheckpointMlp::Moe { router, experts } => {
                out.push(router);
                out.extend(experts.iter_mut().flatten());
            }
        }
    }
    out
}

/// Copy `w`'s matrices (not the embedding) into one map of huge pages, when `wanted`.
pub fn make_resident(w: &mut CheckpointWeights) -> Result<()> {
    if !wanted() {
        return Ok(());
    }
    let mut ms = matrices(w);
    // one copy of each distinct (start, length) of bytes
    let key = |m: &BlockMatrix| {
        let b = m.weight_bytes();
        (b.as_ptr() as usize, b.len())
    };
    let mut index: HashMap<(usize, usize), usize> = HashMap::new();
    let mut views = Vec::new();
    for m in &ms {
        index.entry(key(m)).or_insert_with(|| {
            views.push(m.weight_bytes().clone());
            views.len() - 1
        });
    }
    let copies = resident_copies(&views.iter().collect::<Vec<_>>())
        .map_err(|e| Error::Weights(format!("copying the weights into memory: {e}")))?;
    for m in ms.iter_mut() {
        let copy = copies[index[&key(m)]].clone();
        **m = BlockMatrix::new(m.format, m.rows, m.cols, copy)?;
    }
    Ok(())
}
