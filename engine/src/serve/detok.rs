//! Incremental detokenisation: the text each new token adds, holding back bytes of a character a
//! byte-level token split (an incomplete UTF-8 sequence decodes as U+FFFD until completed).

use crate::tokenizer::TextTokenizer;

pub struct Detok {
    ids: Vec<u32>,
    emitted: usize,
}

impl Detok {
    pub fn new() -> Self {
        Detok {
            ids: Vec::new(),
            emitted: 0,
        }
    }

    /// Text added by `id` (may be empty while a character is incomplete).
    pub fn push(&mut self, tk: &TextTokenizer, id: u32) -> String {
        self.ids.push(id);
        let text = tk.decode(&self.ids).unwrap_or_default();
        if text.ends_with('\u{fffd}')
            || text.len() < self.emitted
            || !text.is_char_boundary(self.emitted)
        {
            return String::new();
        }
        let delta = text[self.emitted..].to_string();
        self.emitted = text.len();
        delta
    }

    /// Whatever is still held back.
    pub fn finish(&mut self, tk: &TextTokenizer) -> String {
        let text = tk.decode(&self.ids).unwrap_or_default();
        if text.len() <= self.emitted || !text.is_char_boundary(self.emitted) {
            return String::new();
        }
        let delta = text[self.emitted..].to_string();
        self.emitted = text.len();
        delta
    }
}

impl Default for Detok {
    fn default() -> Self {
        Self::new()
    }
}
