#!/usr/bin/env python3
"""Write tokenizer_strings.json: the strings whose token ids llama-server records as the tokenizer
reference (scripts/gguf_tokenize_ref.py). Hand-written cases per difficulty (whitespace runs,
digit runs, contractions, punctuation runs, code, Unicode: accents both composed and combining,
CJK, emoji sequences, right-to-left scripts; special-token text), then seeded combinations of
them. Deterministic: the same file on every run (seed 30, the issue number).
Usage: python3 make_tokenizer_strings.py [OUT]   (default: tokenizer_strings.json beside this file)
"""
import json, os, random, sys

WORDS = ["the", "quick", "brown", "fox", "Hello", "world", "HELLO", "tokenizer", "running",
         "unbelievable", "internationalization", "a", "I", "don", "x", "model", "Serve", "engine"]

CASES = [
    "", " ", "  ", "\n", "\t", "a", "A", "Hello", " Hello", "Hello ", "Hello world",
    "Hello, world!", "hello\nworld", "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX", "tHe QuIcK bRoWn", "internationalization", "antidisestablishmentarianism",
    "supercalifragilisticexpialidocious" * 3,
    # contractions
    "it's", "It's", "IT'S", "don't", "DON'T", "we're", "they've", "I'm", "you'll", "she'd",
    "it 's", "don 't", "rock'n'roll", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''", "'",
    "the dog's bone", "o'clock", "y'all'd've", "’s curly apostrophe’s",
    # digits
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789",
    "1234567890", "12345678901234567890", "3.14159", "-273.15", "1,000,000", "1e-5", "0x1F",
    "2024-03-15", "12:30:45", "v1.2.3", "abc123def", "123abc", "a1b2c3", "99 bottles", "٣٤٥",
    "１２３", "½ ¾", "10%", "$9.99", "€5,00",
    # whitespace runs
    "a  b", "a   b", "a    b", "a        b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a\n\n\nb",
    "a\r\nb", "a\r\n\r\nb", "a \nb", "a\n b", " \n ", "\t\n\t", "    indented", "trailing    ",
    "\n\n\n\n", "  \t  \n", "line1\r\nline2\r\n", "a\u00a0b", "a\u2003b", "a\u200bb",
    # punctuation runs
    "!", "!!", "!!!", "?!?!", "...", "....", "…", "---", "--", "—", "___", "***", "###",
    "((()))", "[[]]", "{{}}", "<<>>", "=>", "->", "::", ";;", "@@", "~~~", "``` ", "`code`",
    "\"quoted\"", "“curly”", "«guillemets»", "a,b,c", "a.b.c", "a/b\\c", "|||", "^_^", ":-)",
    # code
    "def f(x):\n    return x + 1\n", "for (int i = 0; i < n; ++i) {", "fn main() { println!(\"hi\"); }",
    "let v: Vec<u8> = Vec::new();", "#include <stdio.h>", "if x == 1 and y != 2:",
    "x = [1, 2, 3]\nprint(x[::-1])", "SELECT * FROM t WHERE id = 1;", "<div class=\"a\">b</div>",
    "{\"key\": \"value\", \"n\": 1}", "https://example.com/path?q=1&r=2", "/usr/local/bin/python3",
    "user@example.com", "C:\\Windows\\System32", "snake_case_name", "camelCaseName", "PascalCase",
    "SCREAMING_SNAKE", "kebab-case-name", "__init__", "self.x += 1", "a->b", "&mut self",
    "    if (p != NULL) {\n        free(p);\n    }", "\tindented_with_tab()",
    # Unicode: accents composed and decomposed (combining marks)
    "café", "cafe\u0301", "naïve", "nai\u0308ve", "résumé", "Ångström", "Zoë", "ñandú", "Straße",
    "ÀÉÎÕÜ", "A\u030a", "o\u0308\u0304", "z\u0335a\u0336l\u0337g\u0338o", "ﬁ ligature",
    # CJK
    "你好", "你好，世界", "今天天气很好。", "中文分词测试", "日本語", "こんにちは", "カタカナ",
    "東京タワー", "한국어", "안녕하세요", "漢字とかなの混在テキスト", "中a文b混c合",
    # emoji
    "😀", "😀😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "❤️", "✨ sparkle", "🚀 launch 🚀",
    "emoji😀inline", "1️⃣", "🤖🤖🤖",
    # right-to-left and other scripts
    "مرحبا بالعالم", "שלום עולם", "abc שלום def", "السلام عليكم 123", "\u202eRTL override",
    "Привет, мир", "Γειά σου κόσμε", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới",
    "ᚠᚢᚦᚨᚱᚲ", "∑∫∂√∞≠≤", "αβγ δεζ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ＡＢＣ full width",
    # special-token text (SmolLM2's, and others')
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>",
    "<|im_start|>assistant\n", "<|im_start", "im_start|>", "< |im_start| >", "<repo_name>",
    "<filename>", "<gh_stars>", "<|endoftext|><|endoftext|>", "text<|im_end|>more", "<s>", "</s>",
    "<unk>", "<|begin_of_text|>", "[INST]", "<think>",
]


def combos(rng, n):
    pool = [c for c in CASES if c]
    seps = ["", " ", "  ", "\n", "\t", " \n", "\r\n", ", ", "'s ", "... "]
    out = []
    while len(out) < n:
        k = rng.randint(2, 4)
        parts = [rng.choice(pool + WORDS) for _ in range(k)]
        s = parts[0]
        for p in parts[1:]:
            s += rng.choice(seps) + p
        if s not in out and s not in CASES:
            out.append(s)
    return out


def runs(rng):
    """Runs of one kind, lengths 1..16, so merges of every length are exercised."""
    out = []
    for unit in [" ", "\n", "\t", "0", "9", "a", "!", ".", "-", "=", "你", "😀", "é"]:
        for n in (1, 2, 3, 4, 5, 7, 8, 9, 15, 16):
            out.append(unit * n)
    for n in (1, 2, 3, 6, 10):
        out.append("x" + " " * n + "y")
        out.append(str(rng.randrange(10 ** (n - 1), 10 ** n)))
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__) or ".", "tokenizer_strings.json")
    rng = random.Random(30)
    strings = []
    for s in CASES + runs(rng) + combos(rng, 150):
        if s not in strings:
            strings.append(s)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(strings, f, ensure_ascii=True, indent=0)
        f.write("\n")
    print(f"make_tokenizer_strings: {len(strings)} strings -> {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
