//! A tensor's entry in a GGUF file (name, ggml-order dims, block format, where its bytes are) and
//! the checks of one entry (dims, format, whole blocks) and of the table (alignment, bounds,
//! overlaps). The bytes themselves are `Gguf::bytes`.

use std::path::Path;

use super::cursor::{shown, Cursor};
use crate::error::Error;
use crate::kernels::blocks::BlockFormat;
use crate::Result;

/// ggml's most dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// The least bytes of one tensor entry: name length, n_dims, one dim, type id, offset.
pub(super) const MIN_ENTRY_BYTES: usize = 8 + 4 + 8 + 4 + 8;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (a row's elements, the columns); 1 to 4 of them.
    pub dims: Vec<u64>,
    pub format: BlockFormat,
    /// Absolute offset of the first byte in the file (a multiple of the file's alignment from the
    /// data section's start).
    pub offset: u64,
    /// Bytes of the tensor: whole blocks of `format`.
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// (rows, cols) of the tensor as a matrix: cols = `dims[0]`, rows = the product of the rest
    /// (a stacked expert tensor [cols, rows, n_experts] is n_experts * rows rows).
    pub fn rows_cols(&self) -> (usize, usize) {
        let cols = self.dims.first().copied().unwrap_or(1);
        let rows: u64 = self.dims.iter().skip(1).product();
        (rows as usize, cols as usize)
    }
}

/// One entry as read: the info with its offset still relative to the data section, and where it
/// was (for the table's errors).
pub(super) struct Entry {
    pub(super) info: TensorInfo,
    /// Its place in the table.
    pub(super) j: usize,
    /// Byte offset of the entry's name.
    pub(super) at: usize,
    /// Byte offset of its offset field.
    pub(super) offset_at: usize,
}

/// Read tensor entry `j`.
pub(super) fn read_entry(c: &mut Cursor, j: usize) -> Result<Entry> {
    let at = c.at();
    let name = c.string(&|| format!("tensor {j} name"))?;
    let shown_name = &name;
    let field = |what: &'static str| move || format!("tensor {} {what}", label(j, shown_name));

    let n_dims_at = c.at();
    let n_dims = c.u32(&field("n_dims"))? as usize;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(c.fail(
            n_dims_at,
            &field("n_dims"),
            format!("{n_dims} dims; a tensor has 1 to {MAX_DIMS}"),
        ));
    }
    let dims_at = c.at();
    let mut dims = Vec::with_capacity(n_dims);
    for _ in 0..n_dims {
        dims.push(c.u64(&field("dims"))?);
    }
    // ggml counts elements in an i64
    let n = dims
        .iter()
        .try_fold(1u64, |p, &d| p.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64);
    let n = match n {
        Some(0) => {
            return Err(c.fail(
                dims_at,
                &field("dims"),
                format!("{dims:?} hold no elements"),
            ));
        }
        Some(n) => n,
        None => {
            return Err(c.fail(
                dims_at,
                &field("dims"),
                format!("{dims:?}: the element count overflows"),
            ));
        }
    };

    let type_at = c.at();
    let id = c.u32(&field("type"))?;
    let Some(format) = BlockFormat::from_id(id) else {
        return Err(c.fail(
            type_at,
            &field("type"),
            format!("unknown ggml type id {id}"),
        ));
    };
    // a row is whole blocks (ggml's rule), so the tensor is too
    let block = format.block() as u64;
    if !dims[0].is_multiple_of(block) {
        return Err(c.fail(
            dims_at,
            &field("dims"),
            format!(
                "a row of {} elements is not a whole number of {format} blocks ({block} elements each)",
                dims[0]
            ),
        ));
    }
    let Some(n_bytes) = format.bytes_of(n) else {
        return Err(c.fail(
            dims_at,
            &field("dims"),
            format!("{dims:?}: the byte size of {n} {format} elements overflows"),
        ));
    };
    let offset_at = c.at();
    let offset = c.u64(&field("offset"))?;
    Ok(Entry {
        info: TensorInfo {
            name,
            dims,
            format,
            offset,
            n_bytes,
        },
        j,
        at,
        offset_at,
    })
}

/// `17 (blk.2.ffn_up.weight)`: a tensor's place and name, for an error's field.
pub(super) fn label(j: usize, name: &str) -> String {
    format!("{j} ({})", shown(name))
}

/// Place the entries in the data section at `data_start` of a `file_len`-byte file: each offset a
/// multiple of `alignment`, the bytes inside the file, no two tensors overlapping. Makes offsets
/// absolute.
pub(super) fn place(
    entries: &mut [Entry],
    data_start: u64,
    alignment: usize,
    file_len: usize,
    path: &Path,
) -> Result<()> {
    let fail = |e: &Entry, msg: String| Error::Gguf {
        path: path.to_path_buf(),
        offset: Some(e.offset_at as u64),
        field: format!("tensor {} offset", label(e.j, &e.info.name)),
        msg,
    };
    for e in entries.iter_mut() {
        let rel = e.info.offset;
        if !rel.is_multiple_of(alignment as u64) {
            return Err(fail(
                e,
                format!("{rel} is not a multiple of the alignment {alignment}"),
            ));
        }
        let end = data_start
            .checked_add(rel)
            .and_then(|s| s.checked_add(e.info.n_bytes));
        match end {
            Some(end) if end <= file_len as u64 => e.info.offset = data_start + rel,
            _ => {
                return Err(fail(
                    e,
                    format!(
                        "{} bytes at {rel} from the data section at {data_start} extend past the \
                         end of the {file_len}-byte file",
                        e.info.n_bytes
                    ),
                ));
            }
        }
    }
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_unstable_by_key(|&i| (entries[i].info.offset, i));
    for w in order.windows(2) {
        let (a, b) = (&entries[w[0]], &entries[w[1]]);
        if a.info.offset + a.info.n_bytes > b.info.offset {
            return Err(fail(
                b,
                format!(
                    "bytes {}..{} overlap tensor {} at {}..{}",
                    b.info.offset,
                    b.info.offset + b.info.n_bytes,
                    label(w[0], &a.info.name),
                    a.info.offset,
                    a.info.offset + a.info.n_bytes
                ),
            ));
        }
    }
    Ok(())
}
