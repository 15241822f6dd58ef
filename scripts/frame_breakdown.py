#!/usr/bin/env python3
"""Where a stream's token time goes, per level of a sweep with frame records (scripts/frame_breakdown.sh).

For every one-row frame that crossed all roles (decode), from the frame records' start time, compute
wall time (compute_ns) and compute-thread CPU time (cpu_ns): the chain's span (role 0's start to
the last role's end), the sum of the roles' compute wall and CPU times, and the gaps between one
role's end and the next role's start (transfer, wake-up, waiting for a core); then per stream
(group) the cycle from one of its decode frames to its next at role 0. Medians per phase.
Usage: frame_breakdown.py RUN_DIR  (reads RUN_DIR/phases.jsonl and RUN_DIR/frames.jsonl.gz;
writes RUN_DIR/breakdown.md and prints it)
"""
import collections
import gzip
import json
import statistics as st
import sys

run = sys.argv[1]
phases = [json.loads(line) for line in open(f"{run}/phases.jsonl")]
frames = collections.defaultdict(dict)
with gzip.open(f"{run}/frames.jsonl.gz", "rt") as f:
    for line in f:
        r = json.loads(line)
        frames[(r["group"], r["seq"])][r["role"]] = r
roles = 1 + max(role for fr in frames.values() for role in fr)


def end(r):
    return r["start_s"] + r["compute_ns"] * 1e-9


rows = []
for p in phases:
    lo, hi = p["start"], p["end"]
    mine = [fr for fr in frames.values() if 0 in fr and lo <= fr[0]["start_s"] <= hi]
    chains = [fr for fr in mine if len(fr) == roles and fr[0]["rows"] == 1]
    if not chains:
        continue
    span = [1e3 * (end(fr[roles - 1]) - fr[0]["start_s"]) for fr in chains]
    wall = [sum(fr[k]["compute_ns"] for k in range(roles)) / 1e6 for fr in chains]
    cpu = [sum(fr[k]["cpu_ns"] for k in range(roles)) / 1e6 for fr in chains]
    gaps = [1e3 * sum(fr[k]["start_s"] - end(fr[k - 1]) for k in range(1, roles)) for fr in chains]
    alone = sum(fr[0]["alone"] for fr in chains) / len(chains)
    by_group = collections.defaultdict(list)
    for fr in sorted(mine, key=lambda fr: fr[0]["start_s"]):
        by_group[fr[0]["group"]].append(fr)
    cycle = [
        1e3 * (b[0]["start_s"] - a[0]["start_s"])
        for v in by_group.values()
        for a, b in zip(v, v[1:])
        if a[0]["rows"] == 1 and b[0]["rows"] == 1 and len(a) == roles
    ]
    rows.append(
        (p["phase"], p["concurrency"], len(chains), alone, st.median(cycle), st.median(span),
         st.median(wall), st.median(cpu), st.median(gaps))
    )

out = [
    "| phase | C | decode frames | launched alone | cycle per stream (ms) | chain span (ms) "
    "| compute wall over the roles (ms) | compute CPU (ms) | gaps between roles (ms) |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for r in rows:
    out.append("| %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % r)
text = "\n".join(out) + "\n"
open(f"{run}/breakdown.md", "w").write(text)
print(text, end="")
