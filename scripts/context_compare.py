#!/usr/bin/env python3
"""The needle scan on two servers side by side (`make smollm2`): reads DIR/context/context.jsonl
(llama-server) and DIR/context-moefleet/context.jsonl (our fleet on the same file) and writes
DIR/needle_compare.csv, one row per prompt: its size and repeat, prompt tokens on each side,
whether each side gave the code back, whether the two answers are the same text, and the first
character where they part. Prints the totals.

Usage: scripts/context_compare.py DIR
"""
import csv
import json
import sys
from pathlib import Path


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if d.get("record") == "context_request":
                rows[(d["size"], d["repeat"])] = d
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = Path(sys.argv[1])
    theirs = load(root / "context" / "context.jsonl")
    ours = load(root / "context-moefleet" / "context.jsonl")
    if set(theirs) != set(ours):
        sys.exit(f"the two scans asked different prompts: {sorted(set(theirs) ^ set(ours))}")
    out = root / "needle_compare.csv"
    same = found_same = 0
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["size", "repeat", "prompt_tokens_llama", "prompt_tokens_moefleet",
                    "code_found_llama", "code_found_moefleet", "same_text", "first_difference_at"])
        for key in sorted(theirs):
            a, b = theirs[key]["trace"]["text"], ours[key]["trace"]["text"]
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
            if at is None and len(a) != len(b):
                at = min(len(a), len(b))
            same += at is None
            fa, fb = theirs[key]["code_found"], ours[key]["code_found"]
            found_same += fa == fb
            w.writerow([*key, theirs[key]["prompt_tokens"], ours[key]["prompt_tokens"],
                        int(fa), int(fb), int(at is None), "" if at is None else at])
    n = len(theirs)
    print(f"{out}: {n} prompts; same answer text {same} of {n}; code found alike {found_same} of {n}")


if __name__ == "__main__":
    main()
