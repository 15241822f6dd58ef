#!/usr/bin/env python3
"""llama-server's reference outputs for the GGUF parity prompts (issue 30); run by
scripts/gguf_parity_llama.sh, which starts and stops the server.

  collect URL PROMPTS_JSONL OUT_DIR [--n-predict 128]
      For each prompt: /tokenize with add_special true (what /completion feeds the model) and
      false; then /completion, greedy (temperature 0), n_probs 2 with post_sampling_probs false,
      so completion_probabilities[j].top_logprobs holds the top 2 tokens of the full pre-sampling
      distribution at generated position j (tools/server: populate_token_probs ->
      get_token_probabilities, log of a float softmax; logprob1 - logprob2 is the logit margin),
      return_tokens true for the generated ids, cache_prompt false so every prompt is evaluated
      from an empty cache. Writes OUT_DIR/llama.jsonl, one record per prompt:
        id, prompt, prompt_ids, prompt_ids_no_special, generated_ids, top [[[id, logprob] x2] per
        generated position], top_refilled, stop_type, content, tokens_evaluated, timings (ms).
      llama-server drops a position's probabilities when the generated text then ends inside a
      UTF-8 character (a byte token of a CJK character or emoji): those positions are refilled by
      a one-token completion from the token ids prompt + generated[:j], its sampled token forced
      to "." by a logit bias (the bias is a sampler; top_logprobs read the raw logits), and listed
      in top_refilled with whether the refill's top-1 is the greedy token. Token byte pieces come
      from the GGUF's vocabulary (--model; gguf-py), as llama_token_to_piece renders them.
  meta OUT_DIR --bin BIN_DIR --model GGUF --args "SERVER ARGS" --log SERVER_LOG
      Writes OUT_DIR/meta.json: llama-server --version, the build-flags stamp, the model's
      sha256 and size, the server arguments, what the log says the context resolved to (flash
      attention, KV types, batch sizes, threads), the host (lscpu) and the date.
HTTP through urllib; gguf-py reads the vocabulary.
"""
import argparse, datetime, hashlib, json, os, platform, re, subprocess, sys, time, urllib.request


def post(url, path, body, timeout=600):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def tokenize(url, text, add_special):
    return post(url, "/tokenize", {"content": text, "add_special": add_special})["tokens"]


def byte_decoder():
    """GPT-2 byte-level BPE: the printable character standing for each byte -> the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes(model):
    """Each token's piece as llama.cpp renders it with special=false (llama_token_to_piece):
    normal tokens byte-decoded (gpt2) or with U+2581 as space and <0xHH> bytes (llama/spm),
    user-defined tokens as their text, control tokens empty."""
    from gguf import GGUFReader
    r = GGUFReader(model)
    kind = r.fields["tokenizer.ggml.model"].contents()
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    dec, out = byte_decoder(), []
    for t, ty in zip(toks, types):
        if ty == 3:  # control
            out.append(b"")
        elif ty == 4:  # user-defined
            out.append(t.encode())
        elif kind == "gpt2":
            out.append(bytes(dec[c] for c in t))
        elif kind == "llama":
            m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", t)
            out.append(bytes([int(m.group(1), 16)]) if ty == 6 and m else t.replace("\u2581", " ").encode())
        else:
            sys.exit(f"gguf_parity_llama: tokenizer model {kind!r} not handled")
    return out


def utf8_complete(b):
    """llama-server's validate_utf8(text) == len(text): no multi-byte sequence cut at the end."""
    for i in range(1, min(4, len(b)) + 1):
        c = b[-i]
        if (c & 0xE0) == 0xC0 and i < 2 or (c & 0xF0) == 0xE0 and i < 3 or (c & 0xF8) == 0xF0 and i < 4:
            return False
    return True


def completion(url, prompt, n_predict, **extra):
    return post(url, "/completion", {
        "prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "n_probs": 2,
        "post_sampling_probs": False, "return_tokens": True, "cache_prompt": False,
        "stream": False, "seed": 0, **extra})


def top2(entry):
    return [[t["id"], t["logprob"]] for t in entry["top_logprobs"]]


def collect(a):
    prompts = [json.loads(s) for s in open(a.prompts, encoding="utf-8") if s.strip()]
    pieces = token_bytes(a.model)
    dot = tokenize(a.url, ".", False)
    if len(dot) != 1:
        sys.exit("gguf_parity_llama: '.' is not one token; no filler token for the refill")
    os.makedirs(a.out_dir, exist_ok=True)
    t0 = time.time()
    with open(os.path.join(a.out_dir, "llama.jsonl"), "w", encoding="utf-8") as f:
        for p in prompts:
            ids = tokenize(a.url, p["prompt"], True)
            r = completion(a.url, p["prompt"], a.n_predict)
            gen, probs = r["tokens"], r.get("completion_probabilities", [])
            if r["tokens_evaluated"] != len(ids):
                sys.exit(f"gguf_parity_llama: {p['id']}: /completion evaluated {r['tokens_evaluated']} "
                         f"prompt tokens, /tokenize gave {len(ids)}")
            # llama-server keeps a position's probabilities only when the text so far ends on a
            # whole UTF-8 character (process_token); the others are refilled below
            text, kept = b"", []
            for j, g in enumerate(gen):
                text += pieces[g]
                if utf8_complete(text):
                    kept.append(j)
            if [gen[j] for j in kept] != [c["id"] for c in probs]:
                sys.exit(f"gguf_parity_llama: {p['id']}: completion_probabilities do not align with tokens")
            top, refilled = [None] * len(gen), []
            for j, c in zip(kept, probs):
                top[j] = top2(c)
            for j in range(len(gen)):
                if top[j] is None:
                    # one step from the token ids prompt + gen[:j] (evaluated as one batch), the
                    # sampled token forced to "." by a logit bias so that the generated text is
                    # whole; top_logprobs come from the unbiased logits (get_token_probabilities)
                    rr = completion(a.url, ids + gen[:j], 1, logit_bias=[[dot[0], 1000.0]])
                    top[j] = top2(rr["completion_probabilities"][0]) if rr.get("completion_probabilities") else None
                    refilled.append({"index": j, "top1_is_token": bool(top[j] and top[j][0][0] == gen[j])})
            if any(t is None or len(t) != 2 for t in top) or \
                    any(t[0][0] != g for j, (t, g) in enumerate(zip(top, gen)) if j in kept):
                sys.exit(f"gguf_parity_llama: {p['id']}: top-2 missing, or greedy token not top-1")
            rec = {"id": p["id"], "prompt": p["prompt"], "prompt_ids": ids,
                   "prompt_ids_no_special": tokenize(a.url, p["prompt"], False),
                   "generated_ids": gen, "top": top, "top_refilled": refilled,
                   "stop_type": r.get("stop_type"), "content": r.get("content"),
                   "tokens_evaluated": r["tokens_evaluated"], "timings": r.get("timings")}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            m = [t[0][1] - t[1][1] for t in top]
            print(f"{p['id']}: {len(ids)} prompt + {len(gen)} generated ({rec['stop_type']}), "
                  f"min margin {min(m) if m else float('nan'):.4f}"
                  + (f", {len(refilled)} positions refilled" if refilled else ""), file=sys.stderr)
    print(f"gguf_parity_llama: {len(prompts)} prompts in {time.time() - t0:.1f} s", file=sys.stderr)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def lscpu():
    out = {}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("Model name", "CPU family", "Model", "Stepping", "CPU(s)", "Vendor ID"):
                out[k.strip()] = v.strip()
    except OSError:
        pass
    return out


def log_facts(path):
    """The lines of llama-server's log that say how the context was resolved."""
    keys = ("system_info", "file type", "- type ", "model buffer size", "n_batch", "n_ubatch",
            "flash_attn", "Flash Attention", "llama_kv_cache: size", "causal_attn", "kv_unified",
            "initializing, n_slots", "freq_base", "freq_scale", "rope type", "n_rot")
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return []
    return [s.strip() for s in lines if any(k in s for k in keys)][:60]


def meta(a):
    ver = subprocess.run([os.path.join(a.bin, "llama-server"), "--version"], capture_output=True, text=True)
    version = (ver.stdout + ver.stderr).strip().splitlines()
    stamp = os.path.join(a.bin, "moefleet-build-flags")
    commit = next((m.group(1) for s in version for m in [re.search(r"commit ([0-9a-f]+)", s)] if m), None)
    doc = {
        "record": "gguf_parity_llama_meta",
        "llama_server_version": version,
        "llama_cpp_commit": commit,
        "llama_cpp_source": "vendor/llama.cpp of the PyPI llama-cpp-python sdist (scripts/peer_build.sh)",
        "build_flags": open(stamp).read().strip() if os.path.exists(stamp) else None,
        "model": os.path.basename(a.model), "model_bytes": os.path.getsize(a.model),
        "model_sha256": sha256(a.model),
        "server_args": a.args,
        "request": {"n_predict": a.n_predict, "temperature": 0.0, "n_probs": 2,
                    "post_sampling_probs": False, "return_tokens": True, "cache_prompt": False},
        "server_log_facts": log_facts(a.log),
        "host": {"lscpu": lscpu(), "kernel": platform.release(), "machine": platform.machine()},
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "moefleet_commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                          text=True).stdout.strip() or None,
        "seconds": a.seconds,
    }
    with open(os.path.join(a.out_dir, "meta.json"), "w") as f:
        json.dump(doc, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("url"); c.add_argument("prompts"); c.add_argument("out_dir")
    c.add_argument("--model", required=True, help="the served GGUF (its vocabulary's byte pieces)")
    c.add_argument("--n-predict", type=int, default=128)
    m = sub.add_parser("meta")
    m.add_argument("out_dir")
    m.add_argument("--bin", required=True); m.add_argument("--model", required=True)
    m.add_argument("--args", required=True); m.add_argument("--log", required=True)
    m.add_argument("--n-predict", type=int, default=128)
    m.add_argument("--seconds", type=float)
    a = ap.parse_args()
    collect(a) if a.cmd == "collect" else meta(a)


if __name__ == "__main__":
    main()
