#!/usr/bin/env python3
"""llama-server's tokenization of a list of strings, as the reference a GGUF tokenizer must match.

For every string of STRINGS (a JSON array, e.g. workloads/gguf_parity/tokenizer_strings.json)
posts /tokenize three ways and records the token ids:
  add_special_false   {"add_special": false}   special-token text parsed (llama-server's default)
  add_special_true    {"add_special": true}    what /completion feeds the model (BOS/EOS as the
                                               vocabulary's add_bos_token / add_eos_token say)
  parse_special_false {"add_special": false, "parse_special": false}   special text as plain text
plus the pieces of the first ({"with_pieces": true}: a string, or a list of bytes where the piece
is not whole UTF-8). Writes OUT as {"meta": {...}, "results": [{"text", ...}, ...]} in the
strings' order. The server must be running (scripts/llama_server.sh's llama_start, say).
Usage: gguf_tokenize_ref.py --url http://127.0.0.1:PORT --strings STRINGS.json --out OUT.json
"""
import argparse, datetime, json, sys, time, urllib.request


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def get(url, path):
    with urllib.request.urlopen(url + path, timeout=30) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--strings", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    strings = json.load(open(a.strings, encoding="utf-8"))
    if not isinstance(strings, list) or not all(isinstance(s, str) for s in strings):
        sys.exit("gguf_tokenize_ref: --strings must be a JSON array of strings")
    t0 = time.time()
    results = []
    for s in strings:
        with_pieces = post(a.url, "/tokenize", {"content": s, "add_special": False, "with_pieces": True})["tokens"]
        rec = {
            "text": s,
            "add_special_false": [t["id"] for t in with_pieces],
            "add_special_true": post(a.url, "/tokenize", {"content": s, "add_special": True})["tokens"],
            "parse_special_false": post(a.url, "/tokenize", {"content": s, "add_special": False,
                                                             "parse_special": False})["tokens"],
            "pieces": [t["piece"] for t in with_pieces],
        }
        results.append(rec)
    props = get(a.url, "/props")
    meta = {
        "record": "gguf_tokenize_ref",
        "model": (props.get("model_path") or "").rsplit("/", 1)[-1],
        "build_info": props.get("build_info"),
        "bos_token": props.get("bos_token"), "eos_token": props.get("eos_token"),
        "strings_file": a.strings, "n_strings": len(strings),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": round(time.time() - t0, 1),
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "results": results}, f, ensure_ascii=True, indent=0)
        f.write("\n")
    print(f"gguf_tokenize_ref: {len(strings)} strings in {meta['seconds']} s -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
