#!/usr/bin/env python3
"""Independent reference for harness/src/workload.rs (MEASUREMENTS.md section 2.1).

Standard library only. The templates below are Python f-strings typed from the spec, not read
from workloads/families.json, so the Rust renderer and this script agree only if both follow the
spec. Run:

    python3 harness/tests/workload_reference.py                 # prompts + hash fields
    python3 harness/tests/workload_reference.py --check workloads/families.json

The first form prints the first prompt of every family for prefix "mixed_a_c001"
(prompt_index 0) and a few wide fields of one key; the Rust test `reference_prompts` pins them.
The second form also checks that the word lists in the JSON equal the ones here.
"""
import hashlib
import json
import sys

TOPICS = [
    "tides", "a bicycle", "sourdough bread", "the stock market", "volcanoes", "a violin",
    "vaccines", "black holes", "the Roman empire", "coffee", "honey bees", "the internet",
    "glaciers", "a jet engine", "chess openings", "jazz", "the immune system", "rainbows",
    "compound interest", "the printing press", "coral reefs", "a lighthouse", "electric cars",
    "the moon", "sleep", "rice farming", "earthquakes", "a submarine", "origami", "the Silk Road",
]
LANGS = ["Python", "JavaScript", "Rust", "Go", "C"]
CODE = [
    "reverses a linked list",
    "checks whether a string is a palindrome",
    "computes the nth Fibonacci number iteratively",
    "merges two sorted lists",
    "counts word frequencies in a text file",
    "finds the largest element of a binary tree",
    "parses a CSV line with quoted fields",
    "implements binary search",
    "removes duplicates from a list while keeping order",
    "validates an email address with a regular expression",
    "computes the greatest common divisor of two integers",
    "flattens a nested list",
]
CLAIM = [
    "lightning never strikes the same place twice",
    "humans use only ten percent of their brains",
    "the Great Wall of China is visible from space",
    "glass is a slow-moving liquid",
    "bats are blind",
    "goldfish have a three-second memory",
    "sugar makes children hyperactive",
    "water conducts electricity",
]
NAMES = ["explanation", "code", "arithmetic", "story", "tips", "table", "rewrite", "facts",
         "poem", "instructions", "translation", "true_false"]


def key_hash(key):
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest(), "big") >> 4


def prompt(prefix, family_index, prompt_index):
    h = key_hash(f"{prefix}/{family_index}/{prompt_index}")
    T = TOPICS[h % 30]
    T2 = TOPICS[(h >> 8) % 30]
    templates = [
        f"Explain {T} to a curious ten-year-old in one short paragraph.",
        f"Write a {LANGS[h % 5]} function that {CODE[(h >> 8) % 12]}. Include a short comment.",
        f"A shop sells pencils at {15 + h % 40} cents each and notebooks at "
        f"{120 + (h >> 8) % 200} cents each. How much do {3 + (h >> 16) % 9} pencils and "
        f"{2 + (h >> 20) % 5} notebooks cost? Show the steps.",
        f"Write the opening paragraph of a short story that takes place near {T}.",
        f"List five practical tips about {T}, one line each.",
        f"Compare {T} and {T2} in a short table, then give a one-sentence conclusion.",
        f"Rewrite this sentence to sound more formal: 'So basically {T} is kind of a big deal "
        f"and people should really care more about it.'",
        f"What are the three most important facts about {T}? Answer briefly.",
        f"Write a four-line poem about {T}.",
        f"Give step-by-step instructions for a beginner who wants to learn about {T} this weekend.",
        f"Translate into French and then into Spanish: 'The history of {T} is longer than most "
        f"people think.'",
        f"Is it true that {CLAIM[h % 8]}? Answer yes or no, then justify in two sentences.",
    ]
    return templates[family_index]


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2], encoding="utf-8") as f:
            doc = json.load(f)
        ours = {"TOPICS": TOPICS, "LANGS": LANGS, "CODE": CODE, "CLAIM": CLAIM}
        assert doc["lists"] == ours, "word lists differ from the spec copy in this script"
        assert [fam["name"] for fam in doc["families"]] == NAMES, "family names differ"
        print("families.json word lists and names match")
    for i, name in enumerate(NAMES):
        print(f"{i:2} {name:12} {json.dumps(prompt('mixed_a_c001', i, 0))}")
    h = key_hash("mixed_b_c176/5/14")
    for shift, m in [(0, (1 << 64) - 59), (60, 1_000_000_007), (130, (1 << 61) - 1), (200, 97), (248, 16)]:
        print(f"mixed_b_c176/5/14 (h >> {shift}) % {m} = {(h >> shift) % m}")


if __name__ == "__main__":
    main()
