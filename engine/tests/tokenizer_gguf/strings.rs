//! The texts the GGUF tokenizer is compared on: hand-picked cases of each kind that splits text
//! differently (whitespace runs, digit runs, contractions, punctuation, code, scripts and emoji,
//! combining marks, right-to-left text, control characters, special-token text), then pairs and
//! triples of them joined by a space, nothing, a newline or two spaces; and texts of random
//! characters from all of Unicode (new and unassigned ones included), weighted towards ASCII
//! letters, digits, spaces and apostrophes so that runs and contractions form. A fixed generator
//! chooses them, so every run compares the same texts.

/// One text of each kind.
pub const CASES: &[&str] = &[
    // empty and whitespace runs
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\t\t",
    "\n",
    "\n\n",
    "\n\n\n",
    "\r\n",
    "\r\n\r\n",
    " \n",
    "\n ",
    " \t\n",
    "a  b",
    "a   b",
    "a    b",
    "a \t b",
    "a\tb",
    "a\n\n\nb",
    "  leading spaces",
    "trailing spaces  ",
    "trailing newline\n",
    "x\r\ny\r\n",
    "\u{a0}no-break space",
    "ideographic\u{3000}space",
    "em\u{2003}space",
    "next\u{85}line",
    "zero\u{200b}width",
    "    indented four",
    "\t\tindented tabs",
    // prose, case, contractions
    "Hello world",
    " Hello world",
    "hello World!",
    "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "I'm here, you're there, they've gone, it'll rain, we'd go, she's out.",
    "DON'T SHOUT, IT'S LOUD",
    "He'S mIxEd'Ll",
    "'s 't 're 've 'm 'll 'd",
    "rock 'n' roll",
    "''",
    "'",
    "o'clock",
    "the dog's bone",
    // digits
    "1",
    "12",
    "123",
    "1234",
    "12345",
    "123456789012",
    "3.14159",
    "1,000,000",
    "0x1F",
    "2024-12-03",
    "v1.2.3",
    "call 555-0100 now",
    "a1b2c3",
    "١٢٣ and ۴۵۶",
    "½ ² ⅷ Ⅻ",
    "१२३",
    // punctuation and symbols
    "!!!",
    "...",
    "?!?!",
    "---",
    "((()))",
    "a.b,c;d:e",
    "«quotes» “smart” ‘single’",
    "—dash— – en",
    "$100 + 5% = ~$105 ^_^",
    "<=> || && != == >= <=",
    "@user #tag &amp;",
    "© ® ™ § ¶ †",
    "→ ← ↑ ↓ ⇒",
    "∑ ∫ √ ∞ ≈ ≠",
    // code
    "fn main() {\n    println!(\"hi\");\n}",
    "def f(x):\n\treturn x**2\n",
    "<div class=\"a\">x</div>",
    "SELECT * FROM t WHERE a >= 10;",
    "#include <stdio.h>\nint main(void) { return 0; }",
    "{\"key\": [1, 2.5, null, true], \"s\": \"v\"}",
    "if (a && b) { c++; } else { d--; }",
    "    for i in range(10):\n        print(i)",
    "x = y / 2 # comment",
    "https://example.com/path?q=1&r=two#frag",
    "user@example.org",
    "C:\\Windows\\System32",
    "$ ls -la | grep foo > out.txt",
    // Latin with marks
    "café",
    "naïve résumé",
    "Zürich",
    "e\u{301}",
    "cafe\u{301} au lait",
    "Ångström",
    "Ça va? Ñandú. Øresund. Łódź. Şişli.",
    "straße STRASSE",
    "ﬁ ligature",
    "ǅ titlecase",
    // other scripts
    "中文分词测试",
    "你好，世界！",
    "日本語のテキストです。",
    "カタカナ ひらがな",
    "한국어 텍스트",
    "مرحبا بالعالم",
    "שלום עולם",
    "Привет, мир!",
    "Ελληνικά γράμματα",
    "हिन्दी पाठ",
    "ภาษาไทย",
    "ქართული",
    "Հայերեն",
    "አማርኛ",
    "mixed English и русский 和中文",
    "RTL \u{202e}override\u{202c} mark",
    // emoji
    "😀",
    "👍🏽",
    "👨‍👩‍👧",
    "🇫🇷🇯🇵",
    "I ❤️ Rust 🦀!",
    "🙂🙂🙂",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\u{fffd}",
    // control characters
    "\u{1}\u{7f}",
    "\u{1b}[31mred\u{1b}[0m",
    "bell\u{7}",
    "form\u{c}feed",
    "vertical\u{b}tab",
    // SmolLM2 has no token for the byte 0x06: the character is dropped, its neighbours unmerged
    "x \u{6}'y",
    "ab\u{6}cd",
    "\u{6}\u{6}",
    // special-token text
    "<|im_start|>user\nhi<|im_end|>",
    "<|endoftext|>",
    "a<|im_end|>b",
    "<|im_start|",
    "<reponame>x",
    "<|im_start|><|im_start|>",
    " <|im_end|> ",
    "<jupyter_code>print(1)",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "<|not_a_token|>",
];

/// Separators the combined texts are joined with.
const JOINS: &[&str] = &[" ", "", "\n", "  "];

/// xorshift64*: a number below `n`.
fn generator(seed: u64) -> impl FnMut(usize) -> usize {
    let mut state = seed;
    move |n| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

/// `CASES`, then `n_combined` pairs and triples of them.
pub fn texts(n_combined: usize) -> Vec<String> {
    let mut out: Vec<String> = CASES.iter().map(|s| s.to_string()).collect();
    let mut next = generator(0x9e37_79b9_7f4a_7c15);
    for i in 0..n_combined {
        let parts = 2 + i % 2;
        let mut s = String::new();
        for k in 0..parts {
            if k > 0 {
                s.push_str(JOINS[next(JOINS.len())]);
            }
            s.push_str(CASES[next(CASES.len())]);
        }
        out.push(s);
    }
    out
}

/// `n` texts of 1 to 12 random characters.
pub fn random(n: usize) -> Vec<String> {
    let mut next = generator(12345);
    let ascii = |k: usize| {
        [
            b' ',
            b'\n',
            b'\t',
            b'\'',
            b'0' + (k % 10) as u8,
            b'a' + (k % 26) as u8,
        ]
    };
    (0..n)
        .map(|_| {
            let len = 1 + next(12);
            (0..len)
                .filter_map(|_| {
                    let cp = match next(6) {
                        0 => next(0x80),
                        1 => next(0x800),
                        2 => next(0x10000),
                        3 => 0x1f000 + next(0x1000),
                        4 => ascii(next(260))[next(6)] as usize,
                        _ => next(0x30000),
                    };
                    char::from_u32(cp as u32)
                })
                .collect()
        })
        .collect()
}

/// The shared list of `workloads/gguf_parity/tokenizer_strings.json` (a JSON array of strings).
pub fn workload() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../workloads/gguf_parity/tokenizer_strings.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}
