#!/usr/bin/env python3
"""The engine's sides of the GGUF parity run (issue 30, item 6); run by scripts/gguf_parity.sh,
which starts and stops the fleet.

  ids LLAMA_JSONL OUT_JSONL
      The prompt ids llama-server tokenised (id, prompt_ids per line): what `moefleet continue`
      and the fleet are given, so that the comparison is of the models, not of the tokenizers.
  fleet URL LLAMA_JSONL OUT_JSONL [--max-tokens 128] [--concurrency 4]
      Each prompt's ids through the fleet's /v1/completions: greedy (temperature 0), max_tokens,
      not streamed, moefleet_debug true so that the reply carries the generated token ids
      (moefleet.token_ids; the end-of-sequence token included where it came, as in the other
      records). CONCURRENCY requests in flight, so that prompts share the fleet's frames as
      served streams do. Writes id, prompt_ids, generated_ids, finish_reason per line, in the
      prompts' order.
  meta OUT_DIR --host HOST_JSON --stats STATS_JSON --stage NAME=SECONDS ... --load NAME=START/END ...
           --continue-cmd CMD --fleet-cmd CMD --roles N --concurrency N --binary-sha256 HEX
      Adds the engine's side to OUT_DIR/meta.json (written by scripts/gguf_parity_llama.py):
      engine_commit (the fleet's /api/stats), the host facts of `moefleet-harness host` merged
      into `host`, each stage's seconds and load averages, the commands, the binary's sha256.
HTTP through urllib.
"""
import argparse, concurrent.futures, json, os, sys, time, urllib.request


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(s) for s in f if s.strip()]


def ids(a):
    with open(a.out, "w", encoding="utf-8") as f:
        for r in read_jsonl(a.llama):
            f.write(json.dumps({"id": r["id"], "prompt_ids": r["prompt_ids"]}) + "\n")


def complete(url, prompt_ids, max_tokens):
    body = {"prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0, "stream": False,
            "moefleet_debug": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:
        v = json.loads(r.read())
    return v["moefleet"]["token_ids"], v["choices"][0]["finish_reason"]


def fleet(a):
    prompts = read_jsonl(a.llama)
    t0 = time.time()
    out = [None] * len(prompts)
    with concurrent.futures.ThreadPoolExecutor(a.concurrency) as pool:
        futs = {pool.submit(complete, a.url, p["prompt_ids"], a.max_tokens): i
                for i, p in enumerate(prompts)}
        for done, fut in enumerate(concurrent.futures.as_completed(futs), 1):
            i = futs[fut]
            gen, finish = fut.result()
            p = prompts[i]
            out[i] = {"id": p["id"], "prompt_ids": p["prompt_ids"], "generated_ids": gen,
                      "finish_reason": finish}
            print(f"fleet {done}/{len(prompts)}: {p['id']}: {len(gen)} tokens ({finish})",
                  file=sys.stderr)
    with open(a.out, "w", encoding="utf-8") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")
    print(f"gguf_parity fleet: {len(prompts)} prompts in {time.time() - t0:.1f} s", file=sys.stderr)


def pairs(items, conv):
    out = {}
    for s in items or []:
        k, _, v = s.partition("=")
        out[k] = conv(v)
    return out


def loads(v):
    start, _, end = v.partition("/")
    return {"start": [float(x) for x in start.split()], "end": [float(x) for x in end.split()]}


def meta(a):
    path = os.path.join(a.out_dir, "meta.json")
    with open(path) as f:
        doc = json.load(f)
    with open(a.host) as f:
        host = json.load(f)
    with open(a.stats) as f:
        stats = json.load(f)
    doc["host"] = {**doc.get("host", {}), **host}
    doc["engine_commit"] = stats.get("engine_commit")
    doc["engine_binary_sha256"] = a.binary_sha256
    doc["moefleet_continue"] = {"command": a.continue_cmd}
    doc["moefleet_fleet"] = {"command": a.fleet_cmd, "roles": a.roles, "concurrency": a.concurrency,
                             "api_stats_after": stats}
    doc["stage_seconds"] = {**doc.get("stage_seconds", {}), **pairs(a.stage, float)}
    doc["load_average"] = {**doc.get("load_average", {}), **pairs(a.load, loads)}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("ids")
    i.add_argument("llama"); i.add_argument("out")
    fl = sub.add_parser("fleet")
    fl.add_argument("url"); fl.add_argument("llama"); fl.add_argument("out")
    fl.add_argument("--max-tokens", type=int, default=128)
    fl.add_argument("--concurrency", type=int, default=4)
    m = sub.add_parser("meta")
    m.add_argument("out_dir")
    m.add_argument("--host", required=True); m.add_argument("--stats", required=True)
    m.add_argument("--stage", action="append"); m.add_argument("--load", action="append")
    m.add_argument("--continue-cmd", required=True); m.add_argument("--fleet-cmd", required=True)
    m.add_argument("--roles", type=int, required=True)
    m.add_argument("--concurrency", type=int, required=True)
    m.add_argument("--binary-sha256", required=True)
    a = ap.parse_args()
    {"ids": ids, "fleet": fleet, "meta": meta}[a.cmd](a)


if __name__ == "__main__":
    main()
