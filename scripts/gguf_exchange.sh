#!/usr/bin/env bash
# A real exchange with a real model through our own fleet: SmolLM2-135M-Instruct's GGUF (fetched by
# scripts/smollm2_model.sh, never committed) served by moefleet with ROLES role processes (default 5),
# asked a few chat questions greedily and one seeded sampled completion. Writes OUT/exchange.jsonl
# (each request and the server's whole response) and OUT/meta.json (engine commit, host, model sha256).
# Usage: scripts/gguf_exchange.sh OUT_DIR [MOEFLEET_BIN]
set -euo pipefail
out=${1:?usage: scripts/gguf_exchange.sh OUT_DIR [MOEFLEET_BIN]}
bin=${2:-${CARGO_TARGET_DIR:-target}/release/moefleet}
roles=${ROLES:-5}
here=$(cd "$(dirname "$0")" && pwd)
model=${MODEL:-$("$here/smollm2_model.sh")}
mkdir -p "$out"
# shellcheck source=scripts/fleet.sh
source "$here/fleet.sh"
trap fleet_stop EXIT
fleet_start "$out/serve.log" "$bin" --model "$model" --roles "$roles" --context 2048
ask() { # body
  local resp
  resp=$(curl -sf "$FLEET_URL$1" -H 'content-type: application/json' -d "$2")
  python3 -c 'import json,sys; print(json.dumps({"path": sys.argv[1], "request": json.loads(sys.argv[2]), "response": json.loads(sys.argv[3])}))' "$1" "$2" "$resp" >>"$out/exchange.jsonl"
}
: >"$out/exchange.jsonl"
for q in "What is 2+2?" "Say hello in French." "Write a haiku about the sea." "What is the opposite of hot?"; do
  ask /v1/chat/completions "$(python3 -c 'import json,sys; print(json.dumps({"messages": [{"role": "user", "content": sys.argv[1]}], "max_tokens": 96, "temperature": 0}))' "$q")"
done
ask /v1/completions '{"prompt": "Once upon a time, in a small village by the sea,", "max_tokens": 64, "temperature": 0.8, "top_p": 0.95, "seed": 7}'
fleet_stop
python3 - "$out" "$model" "$bin" "$roles" <<'PY'
import hashlib, json, os, subprocess, sys, time
out, model, bin_, roles = sys.argv[1:]
h = hashlib.sha256()
with open(model, "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
cpu = {k.strip(): v.strip() for k, v in (l.split(":", 1) for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines() if ":" in l)}
meta = {"record": "gguf_exchange", "model_file": os.path.basename(model), "model_sha256": h.hexdigest(),
        "roles": int(roles), "engine": subprocess.run([bin_, "--version"], capture_output=True, text=True).stdout.strip(),
        "engine_commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "host": {"cpu": cpu.get("Model name"), "family": cpu.get("CPU family"), "model": cpu.get("Model")},
        "load_average": os.getloadavg(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
json.dump(meta, open(os.path.join(out, "meta.json"), "w"), indent=1)
PY
rm -f "$out/serve.log"
python3 - "$out/exchange.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    c = r["response"]["choices"][0]
    q = r["request"].get("messages", [{}])[-1].get("content") or r["request"].get("prompt")
    a = c.get("message", {}).get("content") if "message" in c else c.get("text")
    print(f"> {q}\n{a}\n  [{c['finish_reason']}, {r['response']['usage']['completion_tokens']} tokens]\n")
PY
