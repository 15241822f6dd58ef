#!/usr/bin/env python3
"""Write a random-weight llama.cpp model with a moefleet preset's shapes, for `make peer`.

The nearest architecture llama.cpp runs is `qwen3moe`: every layer a mixture of `n_routed` experts
of the preset's expert width with top_k + n_shared experts active (qwen3moe has no shared experts,
so the shared ones are counted as routed), `n_q_heads` query heads and the sliding layers' KV heads
of `head_dim`, and the preset's vocabulary with this project's tokenizer. Formats follow what the
engine reads per token: experts Q4_0 (4.5 bits per weight, as INT4 group-32 with an f16 scale),
attention and the head Q8_0 (as INT8 per row), the embedding f16, norms and the router f32.
Differences that remain (the preset's two dense layers, its one global KV head, relative-position
taps) are listed in the output and in PEER.md. Weights are seeded normal draws, not trained.

Usage: peer_gguf.py --config CONFIG_JSON --tokenizer workloads/tokenizer.json --out MODEL.gguf
(CONFIG_JSON: the "config" object of `moefleet inspect --json PRESET`).
"""

import argparse
import json
import sys

import numpy as np

try:
    import gguf
    from gguf import quants
except ImportError:
    sys.exit("peer_gguf: the gguf Python package is missing (pip install gguf)")

Q = gguf.GGMLQuantizationType


def tokenizer_parts(path):
    t = json.load(open(path))
    m = t["model"]
    if m.get("type") != "BPE":
        sys.exit(f"peer_gguf: {path} is not a BPE tokenizer")
    vocab = m["vocab"]
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    types = [1] * len(tokens)  # normal
    for a in t.get("added_tokens", []):
        if a["id"] < len(tokens):
            tokens[a["id"]] = a["content"]
            types[a["id"]] = 3 if a.get("special") else 4  # control / user-defined
    if any(x is None for x in tokens):
        sys.exit(f"peer_gguf: {path}: token ids are not contiguous")
    merges = [" ".join(p) if isinstance(p, list) else p for p in m["merges"]]
    specials = [a["id"] for a in t.get("added_tokens", []) if a.get("special")]
    return tokens, types, merges, (specials[0] if specials else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="moefleet inspect --json PRESET, its config object (file)")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--context", type=int, default=16384, help="context length written to the file")
    a = ap.parse_args()

    c = json.load(open(a.config))
    c = c.get("config", c)
    h, hd, nq = c["hidden"], c["head_dim"], c["n_q_heads"]
    nkv = c["n_kv_heads_sliding"]
    ne, ff = c["n_routed"], c["expert_width"]
    active = c["top_k"] + c["n_shared"]
    vocab = c["vocab_size"]
    layers = c["n_layers"]
    tokens, types, merges, eos = tokenizer_parts(a.tokenizer)
    if len(tokens) != vocab:
        sys.exit(f"peer_gguf: tokenizer has {len(tokens)} tokens, the preset {vocab}")

    rng = np.random.default_rng(a.seed)
    w = gguf.GGUFWriter(a.out, "qwen3moe")
    w.add_name(f"moefleet {c['name']} shapes (random weights, seed {a.seed})")
    w.add_block_count(layers)
    w.add_context_length(a.context)
    w.add_embedding_length(h)
    w.add_feed_forward_length(c["dense_width"])
    w.add_head_count(nq)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(1.0e6)
    w.add_layer_norm_rms_eps(c["rms_eps"])
    w.add_expert_count(ne)
    w.add_expert_used_count(active)
    w.add_expert_feed_forward_length(ff)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(eos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)

    def normal(*shape, scale):
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32)

    def put(name, x, kind):
        if kind == Q.F32:
            w.add_tensor(name, x.astype(np.float32))
        elif kind == Q.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, quants.quantize(x, kind), raw_dtype=kind)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731
    put("token_embd.weight", normal(vocab, h, scale=1.0), Q.F16)
    for i in range(layers):
        p = f"blk.{i}."
        put(p + "attn_norm.weight", ones(h), Q.F32)
        put(p + "attn_q.weight", normal(nq * hd, h, scale=h**-0.5), Q.Q8_0)
        put(p + "attn_k.weight", normal(nkv * hd, h, scale=h**-0.5), Q.Q8_0)
        put(p + "attn_v.weight", normal(nkv * hd, h, scale=h**-0.5), Q.Q8_0)
        put(p + "attn_output.weight", normal(h, nq * hd, scale=(nq * hd) ** -0.5), Q.Q8_0)
        put(p + "attn_q_norm.weight", ones(hd), Q.F32)
        put(p + "attn_k_norm.weight", ones(hd), Q.F32)
        put(p + "ffn_norm.weight", ones(h), Q.F32)
        put(p + "ffn_gate_inp.weight", normal(ne, h, scale=h**-0.5), Q.F32)
        put(p + "ffn_gate_exps.weight", normal(ne, ff, h, scale=h**-0.5), Q.Q4_0)
        put(p + "ffn_up_exps.weight", normal(ne, ff, h, scale=h**-0.5), Q.Q4_0)
        put(p + "ffn_down_exps.weight", normal(ne, h, ff, scale=ff**-0.5), Q.Q4_0)
    put("output_norm.weight", ones(h), Q.F32)
    put("output.weight", normal(vocab, h, scale=h**-0.5), Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(
        f"peer_gguf: wrote {a.out}: qwen3moe, {layers} layers, hidden {h}, {nq}/{nkv} heads of {hd}, "
        f"{ne} experts of {ff} with {active} active, vocabulary {vocab}; experts Q4_0, attention and "
        f"head Q8_0, embedding F16. Not matched: {c['n_dense_layers']} dense layers (all MoE here), "
        f"{c['n_kv_heads_global']} global KV head (all {nkv} here), the preset's relative-position taps.",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
