//! `Source`: field values read from a fuzz input's bytes, for the structure-aware checks that
//! build a valid message (`wire`) or file (`gguf`) from them.

/// Field values read from a byte string (zeros past its end).
pub struct Source<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Source<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Source { data, at: 0 }
    }

    pub fn u8(&mut self) -> u8 {
        let v = self.data.get(self.at).copied().unwrap_or(0);
        self.at = self.at.saturating_add(1);
        v
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        let lo = self.u32() as u64;
        lo | ((self.u32() as u64) << 32)
    }

    /// A size in `0..=max`.
    pub fn size(&mut self, max: usize) -> usize {
        self.u8() as usize % (max + 1)
    }

    /// Valid UTF-8 of at most `max` bytes (one to four bytes a character).
    pub fn text(&mut self, max: usize) -> String {
        const WIDE: [char; 4] = ['é', '€', '𝄞', '\u{fffd}'];
        let target = self.size(max);
        let mut s = String::new();
        while s.len() < target {
            let b = self.u8();
            let c = if b < 0x80 {
                b as char
            } else {
                WIDE[b as usize % WIDE.len()]
            };
            if s.len() + c.len_utf8() > target {
                break;
            }
            s.push(c);
        }
        s
    }
}
