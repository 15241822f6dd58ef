//! `WeightBytes`: the stored bytes of a tensor, either a range of a memory-mapped file (zero copies:
//! the kernels read the blocks where the file holds them) or an owned buffer (a repacked tensor,
//! tests). Cheap to clone; a sub-range (one expert of a stacked tensor) shares the same storage.

use std::ops::{Deref, Range};
use std::sync::Arc;

#[derive(Clone)]
enum Storage {
    Owned(Arc<[u8]>),
    Mapped(Arc<memmap2::Mmap>),
}

#[derive(Clone)]
pub struct WeightBytes {
    storage: Storage,
    start: usize,
    len: usize,
}

impl WeightBytes {
    pub fn owned(v: Vec<u8>) -> Self {
        let len = v.len();
        WeightBytes {
            storage: Storage::Owned(v.into()),
            start: 0,
            len,
        }
    }

    /// `range` of a mapped file; `None` when it does not lie inside the map.
    pub fn mapped(map: Arc<memmap2::Mmap>, range: Range<usize>) -> Option<Self> {
        if range.start > range.end || range.end > map.len() {
            return None;
        }
        Some(WeightBytes {
            storage: Storage::Mapped(map),
            start: range.start,
            len: range.end - range.start,
        })
    }

    /// A sub-range of these bytes sharing the storage; `None` when it does not lie inside them.
    pub fn slice(&self, range: Range<usize>) -> Option<Self> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        Some(WeightBytes {
            storage: self.storage.clone(),
            start: self.start + range.start,
            len: range.end - range.start,
        })
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped(_))
    }
}

/// Where a map's copies start: on a 2 MiB boundary, the size of an x86 huge page.
const HUGE_PAGE: usize = 2 << 20;

/// Copies of `parts`, in order, packed into one anonymous read-only map advised for transparent
/// huge pages (`MADV_HUGEPAGE`): where the kernel grants them, a product streaming a matrix walks
/// one page-table entry per 2 MiB instead of one per 4 KiB of the file's map. The copies start on
/// the map's first 2 MiB boundary, each on a 64-byte one. The advice is only advice: where it is
/// refused the copies sit in ordinary pages and read the same.
pub fn resident_copies(parts: &[&WeightBytes]) -> std::io::Result<Vec<WeightBytes>> {
    let mut offsets = Vec::with_capacity(parts.len());
    let mut total = 0usize;
    for p in parts {
        offsets.push(total);
        total = (total + p.len()).next_multiple_of(64);
    }
    // room to move the start up to the first boundary
    let len = total.next_multiple_of(HUGE_PAGE) + HUGE_PAGE;
    let mut anon = memmap2::MmapOptions::new().len(len).map_anon()?;
    let _ = anon.advise(memmap2::Advice::HugePage);
    let base = anon.as_ptr() as usize;
    let skip = base.next_multiple_of(HUGE_PAGE) - base;
    for (p, &o) in parts.iter().zip(&offsets) {
        anon[skip + o..skip + o + p.len()].copy_from_slice(p);
    }
    let map = Arc::new(anon.make_read_only()?);
    Ok(parts
        .iter()
        .zip(offsets)
        .map(|(p, o)| WeightBytes {
            storage: Storage::Mapped(map.clone()),
            start: skip + o,
            len: p.len(),
        })
        .collect())
}

impl Deref for WeightBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let all: &[u8] = match &self.storage {
            Storage::Owned(v) => v,
            Storage::Mapped(m) => m,
        };
        &all[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for WeightBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WeightBytes({} bytes, {})",
            self.len,
            if self.is_mapped() { "mapped" } else { "owned" }
        )
    }
}

impl PartialEq for WeightBytes {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::reversed_empty_ranges)] // a reversed range is what the test refuses
    fn slices_share_and_check_bounds() {
        let w = WeightBytes::owned((0u8..100).collect());
        let s = w.slice(10..20).unwrap();
        assert_eq!(&s[..], &(10u8..20).collect::<Vec<_>>()[..]);
        assert_eq!(&s.slice(5..10).unwrap()[..], &[15, 16, 17, 18, 19]);
        assert!(s.slice(5..11).is_none());
        assert!(w.slice(50..40).is_none());
    }

    #[test]
    fn resident_copies_hold_the_same_bytes_aligned() {
        let a = WeightBytes::owned((0..5000u32).map(|i| (i % 251) as u8).collect());
        let b = a.slice(7..4007).unwrap();
        let c = WeightBytes::owned(Vec::new());
        let copies = resident_copies(&[&a, &b, &c]).unwrap();
        assert_eq!(copies.len(), 3);
        for (orig, copy) in [&a, &b, &c].into_iter().zip(&copies) {
            assert_eq!(&orig[..], &copy[..]);
            assert_ne!(orig.as_ptr(), copy.as_ptr());
        }
        assert_eq!(copies[0].as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(copies[1].as_ptr() as usize % 64, 0);
    }
}
