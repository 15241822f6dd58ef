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
}
