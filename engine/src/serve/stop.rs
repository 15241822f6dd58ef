//! Stop sequences: text after the completion's first stop sequence is never sent, and text that
//! might be the start of one is held back until it is known not to be (as OpenAI trims them).

/// A stream's stop sequences and the text held back.
#[derive(Debug, Default)]
pub struct StopText {
    stops: Vec<String>,
    held: String,
    /// A stop sequence completed: the completion is over.
    pub hit: bool,
}

impl StopText {
    pub fn new(stops: Vec<String>) -> Self {
        StopText {
            stops,
            ..Default::default()
        }
    }

    /// The text that can be sent after `piece` arrived.
    pub fn push(&mut self, piece: &str) -> String {
        if self.hit {
            return String::new();
        }
        if self.stops.is_empty() {
            return piece.to_string();
        }
        self.held.push_str(piece);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.hit = true;
            let out = self.held[..at].to_string();
            self.held.clear();
            return out;
        }
        // hold back the longest tail that begins some stop sequence
        let cut = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len());
        let out = self.held[..cut].to_string();
        self.held.replace_range(..cut, "");
        out
    }

    /// The end of the completion: whatever was held back (no stop sequence completed).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut s = StopText::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            out.push_str(&s.push(p));
        }
        if !s.hit {
            out.push_str(&s.finish());
        }
        (out, s.hit)
    }

    #[test]
    fn text_before_the_first_stop_is_kept_and_the_rest_dropped() {
        assert_eq!(
            run(&["END"], &["a b", " E", "N", "D c"]),
            ("a b ".into(), true)
        );
        assert_eq!(
            run(&["\n\n", "x"], &["one\n", "\ntwo x"]),
            ("one".into(), true)
        );
        assert_eq!(run(&["zz"], &["abc", "z", "y"]), ("abczy".into(), false));
        assert_eq!(run(&[], &["as", "is"]), ("asis".into(), false));
        assert_eq!(run(&["é!"], &["café", "!"]), ("caf".into(), true));
    }

    #[test]
    fn a_possible_start_is_held_back_until_decided() {
        let mut s = StopText::new(vec!["STOP".into()]);
        assert_eq!(s.push("go ST"), "go ");
        assert_eq!(s.push("O"), "");
        assert_eq!(s.push("W"), "STOW");
        assert_eq!(s.push("S"), "");
        assert_eq!(s.finish(), "S");
        assert!(!s.hit);
    }
}
