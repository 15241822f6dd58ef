#!/usr/bin/env python3
"""Independent float64 reference ("oracle") of a GGUF checkpoint's forward pass, numpy + gguf-py.

Written from the architectures' definitions (and llama.cpp's choices where a definition leaves
room, each named below), not from moefleet's engine. Every tensor is dequantised once to float64
and kept in memory (experts one at a time, on first use); all arithmetic is float64.

  * x = embed[token] (no scaling). Per layer l:
      h = RMSNorm(x) * attn_norm                      RMSNorm(v) = v / sqrt(mean(v^2) + eps)
      q, k, v = W_q h (+ b_q), W_k h (+ b_k), W_v h (+ b_v)          (biases: qwen2; fused
                attn_qkv is split q | k | v)
      q, k = RMSNorm_head(q) * attn_q_norm, RMSNorm_head(k) * attn_k_norm   (when present: qwen3)
      RoPE on the first rope.dimension_count dims of each head, theta_i = p * s * base^(-2i/n_rot)
        / f_i (f_i: rope_freqs.weight when present, llama3; s = 1/rope.scaling.factor for
        "linear" scaling); "norm" pairs (2i, 2i+1) for arch llama (its converter permutes W_q,
        W_k for that), "neox" pairs (i, i + n_rot/2) for qwen2/qwen3/qwen3moe
        (llama.cpp src/llama-model.cpp llama_model_rope_type).
      attn_h = softmax(q_h k_g^T / sqrt(head_dim) + causal) v_g, g = h // (n_q_heads/n_kv_heads)
      x += W_o attn (+ b_o)
      h = RMSNorm(x) * ffn_norm
      dense:  x += W_down(silu(W_gate h) * W_up h)
      MoE:    p = softmax(W_router h); S = top_k of p (lower expert id wins a tie);
              w_e = p_e / sum_S p (llama.cpp normalises for qwen3moe and llama-MoE whatever
              the metadata says: build_moe_ffn(..., norm_w = true, ...), and reads no
              expert_weights_scale for them); x += sum_S w_e W_down,e(silu(W_gate,e h) * W_up,e h)
  * logits = (output or, tied, token_embd) . (RMSNorm(x) * output_norm) (+ output.bias)
Refused: rope scaling other than none/linear (yarn, longrope), rope_freqs on a neox arch,
attention soft-capping, sliding windows, and any arch not listed.
Dequantisation: Q4_1 is decoded here in float64 (d*q + m exactly); every other type goes through
gguf-py's float32 decoder (exact for F32, F16, BF16, Q8_0, Q4_0, Q5_0: d*q fits float32's
mantissa; K-quants may round at 2^-24); the output's "dequant" names the path per type.
Two switches, off by default, emulate llama.cpp's CPU arithmetic, to tell its rounding from a
modelling mistake (they are not the reference): --qact rounds each quantised product's input rows
as ggml does (Q8_0 blocks for Q4_0/Q5_0/Q8_0 weights, Q8_1 with its f16 block sum for Q4_1/Q5_1,
f16 for F16); --fa16 runs attention as ggml's CPU flash attention with an F16 KV cache (q, k, v
in f16, the V accumulator an f16 vector rounded at every step).

CLI:  gguf_oracle.py MODEL.gguf --tokens 1,2,3 [--positions all|last|i,j] --out out.json
                     [--hidden-after-layer L]
        JSON {"arch", "n_layers", "positions", "logits": [[vocab floats] per position],
              "hidden": [[hidden floats] per position] (residual after layer L, 0-based), ...}
      gguf_oracle.py MODEL.gguf --compare-llama OUT_DIR/llama.jsonl [--limit N] [--max-gen N]
                     [--out report.json]        (either form takes --qact, --fa16)
        teacher-forced check against scripts/gguf_parity_llama.sh's records: at each generated
        position, is the oracle's argmax llama-server's token, and how far is the oracle's
        logit difference between llama's top-2 tokens from llama's logprob1 - logprob2.
Python use: m = Gguf(path); forward(m, tokens, positions, hidden_after=None) -> (logits, hidden).
"""
import argparse, json, math, sys, time
import numpy as np

try:
    from gguf import GGUFReader, GGMLQuantizationType as Q, quants
except ImportError:
    sys.exit("gguf_oracle: the gguf Python package is missing (pip install gguf)")

ROPE_KIND = {"llama": "norm", "qwen2": "neox", "qwen3": "neox", "qwen3moe": "neox"}


class OracleError(Exception):
    pass


def _dequant_q4_1(raw):
    """[rows, nb*20] u8 -> [rows, nb*32] f64: block = d f16, m f16, 16 bytes of nibbles
    (low nibbles are elements 0..15, high 16..31); y = d*q + m, in float64."""
    b = np.ascontiguousarray(raw).reshape(raw.shape[0], -1, 20)
    d = b[:, :, 0:2].copy().view(np.float16).astype(np.float64)
    m = b[:, :, 2:4].copy().view(np.float16).astype(np.float64)
    qs = b[:, :, 4:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=2).astype(np.float64)  # [rows, nb, 32]
    return (d * q + m).reshape(raw.shape[0], -1)


def dequantize(raw, qtype):
    """Raw tensor data (numpy order, quantised rows as bytes) -> float64 of the logical shape."""
    if qtype == Q.Q4_1:
        lead = raw.shape[:-1]
        return _dequant_q4_1(raw.reshape(-1, raw.shape[-1])).reshape(*lead, -1)
    return quants.dequantize(raw, qtype).astype(np.float64)


class Gguf:
    """A GGUF file's config (frozen at open) and its weights, dequantised lazily and cached."""

    def __init__(self, path):
        self.path = path
        self.r = GGUFReader(path)
        self.t = {t.name: t for t in self.r.tensors}
        self.cache, self.dequant = {}, {}
        a = self.arch = self.meta("general.architecture")
        if a not in ROPE_KIND:
            raise OracleError(f"{path}: arch {a!r} not supported (have {sorted(ROPE_KIND)})")
        self.n_layers = int(self.meta(f"{a}.block_count"))
        self.hidden = int(self.meta(f"{a}.embedding_length"))
        self.n_q_heads = int(self.meta(f"{a}.attention.head_count"))
        self.n_kv_heads = int(self.meta(f"{a}.attention.head_count_kv", self.n_q_heads))
        self.head_dim = int(self.meta(f"{a}.attention.key_length", self.hidden // self.n_q_heads))
        self.v_head_dim = int(self.meta(f"{a}.attention.value_length", self.head_dim))
        self.n_rot = int(self.meta(f"{a}.rope.dimension_count", self.head_dim))
        self.rope_base = float(self.meta(f"{a}.rope.freq_base", 10000.0))
        self.rope_kind = ROPE_KIND[a]
        self.eps = float(self.meta(f"{a}.attention.layer_norm_rms_epsilon"))
        self.n_experts = int(self.meta(f"{a}.expert_count", 0))
        self.top_k = int(self.meta(f"{a}.expert_used_count", 0))
        self.notes = []
        scaling = self.meta(f"{a}.rope.scaling.type", "linear")
        factor = float(self.meta(f"{a}.rope.scaling.factor", self.meta(f"{a}.rope.scale_linear", 0.0)))
        if scaling not in ("none", "linear"):
            raise OracleError(f"{path}: rope scaling {scaling!r} not supported (none, linear only)")
        self.freq_scale = 1.0 if scaling == "none" or factor == 0.0 else 1.0 / factor
        for k in (f"{a}.attn_logit_softcapping", f"{a}.final_logit_softcapping",
                  f"{a}.attention.sliding_window"):
            if k in self.r.fields:
                raise OracleError(f"{path}: {k} is set; not supported")
        if self.n_experts and self.meta(f"{a}.expert_weights_norm", True) is False:
            self.notes.append("expert_weights_norm is false in the file; normalised anyway, as llama.cpp does")
        if "rope_freqs.weight" in self.t and self.rope_kind != "norm":
            raise OracleError(f"{path}: rope_freqs on a neox arch not supported")
        self.tied = "output.weight" not in self.t
        self.qact = self.fa16 = False  # llama.cpp emulation switches (--qact, --fa16), off by default
        self.vocab = self.t["token_embd.weight"].shape[1]

    def meta(self, key, default=None):
        f = self.r.fields.get(key)
        if f is None:
            if default is None:
                raise OracleError(f"{self.path}: metadata {key} missing")
            return default
        return f.contents()

    def has(self, name):
        return name in self.t

    def w(self, name, e=None):
        """float64 [rows, cols] (or [n] for vectors) in numpy order: ggml ne = (cols, rows);
        with e, expert e of a 3-D tensor [n_experts, rows, cols]."""
        return self.entry(name, e)[0]

    def entry(self, name, e=None):
        """(float64 weights, ggml type, block mins [rows, blocks] for Q4_1/Q5_1 else None)."""
        key = name if e is None else (name, e)
        if key not in self.cache:
            t = self.t[name]
            raw = t.data if e is None else t.data[e]
            mins = None
            if t.tensor_type in (Q.Q4_1, Q.Q5_1):  # both blocks start d f16, m f16
                size = 20 if t.tensor_type == Q.Q4_1 else 24
                b = np.ascontiguousarray(raw).reshape(raw.shape[0], -1, size)
                mins = b[:, :, 2:4].copy().view(np.float16)[:, :, 0].astype(np.float64)
            self.cache[key] = (dequantize(raw, t.tensor_type), t.tensor_type, mins)
            self.dequant[t.tensor_type.name] = "float64" if t.tensor_type == Q.Q4_1 else "gguf-py float32"
        return self.cache[key]


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, m):
    """x [n, heads, head_dim]; rotates the first n_rot dims of each head by pos * theta_i."""
    n_rot = m.n_rot
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv = m.freq_scale * m.rope_base ** (-2.0 * i / n_rot)
    if m.has("rope_freqs.weight"):
        inv = inv / m.w("rope_freqs.weight")
    ang = pos[:, None].astype(np.float64) * inv[None, :]  # [n, n_rot/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = x.copy()
    if m.rope_kind == "norm":
        a, b = x[:, :, 0:n_rot:2], x[:, :, 1:n_rot:2]
        y[:, :, 0:n_rot:2], y[:, :, 1:n_rot:2] = a * c - b * s, a * s + b * c
    else:
        h = n_rot // 2
        a, b = x[:, :, :h], x[:, :, h:n_rot]
        y[:, :, :h], y[:, :, h:n_rot] = a * c - b * s, a * s + b * c
    return y


def f16(x):
    return np.asarray(x).astype(np.float16).astype(np.float64)


def quantize_q8(x):
    """ggml's quantize_row_q8_0/q8_1 (x86): per block of 32, in float32: d = amax/127,
    q = round-half-even(x * 127/amax); the product sees q * f16(d); q8_1 also carries
    s = f16(d * sum q). -> (q * f16(d) [n, k], s [n, k/32])."""
    b = np.asarray(x, dtype=np.float32).reshape(x.shape[0], -1, 32)
    amax = np.abs(b).max(axis=2, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0))
    q = np.rint(b * inv).astype(np.float64)
    return (q * f16(d)).reshape(x.shape), f16(d[:, :, 0].astype(np.float64) * q.sum(axis=2))


def matmul(m, x, name, e=None):
    """x [n, cols] . W^T. With m.qact the activations are first converted to the weight type's
    ggml vec_dot_type (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, F16 for F16; F32 as is) and
    for Q8_1 the block-min term uses the carried s: y = sum_b d_w (q_w . x^) + m_w s."""
    w, qt, mins = m.entry(name, e)
    if not m.qact or qt == Q.F32:
        return x @ w.T
    if qt in (Q.Q4_0, Q.Q5_0, Q.Q8_0):
        return quantize_q8(x)[0] @ w.T
    if qt in (Q.Q4_1, Q.Q5_1):
        xq, s = quantize_q8(x)
        blocksum = xq.reshape(x.shape[0], -1, 32).sum(axis=2)
        return xq @ w.T + (s - blocksum) @ mins.T
    if qt == Q.F16:
        return f16(x) @ w.T
    raise OracleError(f"--qact: no activation emulation for {qt.name} weights ({name})")


def linear(m, x, name):
    y = matmul(m, x, name + ".weight")
    return y + m.w(name + ".bias") if m.has(name + ".bias") else y


def attention(m, l, h, pos):
    """h [n, hidden] -> W_o attn [n, hidden], causal over the n rows (row i at position pos[i])."""
    p, n = f"blk.{l}.", h.shape[0]
    nq, nkv, hd, vd = m.n_q_heads, m.n_kv_heads, m.head_dim, m.v_head_dim
    if m.has(p + "attn_qkv.weight"):
        qkv = linear(m, h, p + "attn_qkv")
        q, k, v = np.split(qkv, [nq * hd, nq * hd + nkv * hd], axis=1)
    else:
        q, k, v = (linear(m, h, p + f"attn_{x}") for x in "qkv")
    q, k, v = q.reshape(n, nq, hd), k.reshape(n, nkv, hd), v.reshape(n, nkv, vd)
    if m.has(p + "attn_q_norm.weight"):
        q = rms_norm(q, m.w(p + "attn_q_norm.weight"), m.eps)
    if m.has(p + "attn_k_norm.weight"):
        k = rms_norm(k, m.w(p + "attn_k_norm.weight"), m.eps)
    q, k = rope(q, pos, m), rope(k, pos, m)
    group = nq // nkv
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # head h uses kv head h // group
    if m.fa16:
        return linear(m, attend_fa16(q, kk, vv, pos, 1.0 / math.sqrt(hd)).reshape(n, nq * vd), p + "attn_output")
    s = np.einsum("ihd,jhd->hij", q, kk) / math.sqrt(hd)  # [nq, n, n]
    s = np.where(pos[None, None, :] <= pos[None, :, None], s, -np.inf)
    s = np.exp(s - s.max(axis=2, keepdims=True))
    s /= s.sum(axis=2, keepdims=True)
    o = np.einsum("hij,jhd->ihd", s, vv).reshape(n, nq * vd)
    return linear(m, o, p + "attn_output")


def attend_fa16(q, k, v, pos, scale):
    """ggml's CPU flash attention with an F16 KV cache, one query row at a time
    (ggml_compute_forward_flash_attn_ext_f16_one_chunk: decode steps, and prompts under 64 rows):
    q, k, v rounded to f16; keys visited in order with an online softmax whose V accumulator is
    an f16 vector, rounded after every rescale and every multiply-add. q, k, v [n, heads, d]."""
    qh, kh, vh = f16(q), f16(k), f16(v)
    s = np.einsum("ihd,jhd->hij", qh, kh) * scale  # [heads, n, n]
    heads, n = s.shape[0], s.shape[1]
    big_m = np.full((heads, n), -np.inf)
    total = np.zeros((heads, n))
    acc = np.zeros((heads, n, vh.shape[2]))
    for j in range(n):
        live = (pos[j] <= pos)[None, :]  # query rows that see key j
        sj = s[:, :, j]
        new = live & (sj > big_m)
        with np.errstate(invalid="ignore", over="ignore"):
            ms = np.where(new, np.exp(big_m - sj), 1.0)
            vs = np.where(new, 1.0, np.where(live, np.exp(sj - big_m), 0.0))
        big_m = np.where(new, sj, big_m)
        acc = np.where(new[:, :, None], f16(acc * ms[:, :, None]), acc)
        acc = np.where(live[:, :, None], f16(acc + vh[j][:, None, :] * vs[:, :, None]), acc)
        total = np.where(live, total * ms + vs, total)
    return (acc / total[:, :, None]).transpose(1, 0, 2)  # [n, heads, d]


def swiglu(m, h, gate, up, down, e=None):
    g = matmul(m, h, gate, e)
    return matmul(m, g / (1.0 + np.exp(-g)) * matmul(m, h, up, e), down, e)


def ffn(m, l, h):
    p = f"blk.{l}."
    if not m.has(p + "ffn_gate_inp.weight"):
        return swiglu(m, h, p + "ffn_gate.weight", p + "ffn_up.weight", p + "ffn_down.weight")
    z = matmul(m, h, p + "ffn_gate_inp.weight")  # [n, n_experts]
    pr = np.exp(z - z.max(axis=1, keepdims=True))
    pr /= pr.sum(axis=1, keepdims=True)
    out = np.zeros_like(h)
    for i in range(h.shape[0]):
        sel = np.argsort(-pr[i], kind="stable")[:m.top_k]
        wts = pr[i, sel] / pr[i, sel].sum()
        for e, we in zip(sel, wts):
            out[i] += we * swiglu(m, h[i:i + 1], p + "ffn_gate_exps.weight", p + "ffn_up_exps.weight",
                                  p + "ffn_down_exps.weight", e)[0]
    return out


def forward(m, tokens, positions, hidden_after=None):
    """tokens: ids at positions 0..n-1; positions: row indices whose logits are returned.
    -> (logits [len(positions), vocab], residual after layer hidden_after at those rows or None)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size == 0 or tokens.min() < 0 or tokens.max() >= m.vocab:
        raise OracleError(f"token ids must be in 0..{m.vocab - 1}")
    pos = np.arange(tokens.size)
    x = m.w("token_embd.weight")[tokens]
    hidden = None
    for l in range(m.n_layers):
        p = f"blk.{l}."
        x = x + attention(m, l, rms_norm(x, m.w(p + "attn_norm.weight"), m.eps), pos)
        x = x + ffn(m, l, rms_norm(x, m.w(p + "ffn_norm.weight"), m.eps))
        if l == hidden_after:
            hidden = x[positions].copy()
    h = rms_norm(x[positions], m.w("output_norm.weight"), m.eps)
    head = "token_embd" if m.tied else "output"
    return linear(m, h, head), hidden


def parse_positions(spec, n):
    if spec == "all":
        return list(range(n))
    if spec == "last":
        return [n - 1]
    out = [int(s) for s in spec.split(",")]
    if any(not 0 <= i < n for i in out):
        raise OracleError(f"--positions {spec}: outside 0..{n - 1}")
    return out


def compare_llama(m, path, limit, max_gen):
    """Teacher-forced comparison with llama-server records (scripts/gguf_parity_llama.py)."""
    recs = [json.loads(s) for s in open(path) if s.strip()][:limit]
    per, diffs = [], []
    for r in recs:
        gen = r["generated_ids"][:max_gen]
        tops = r["top"][:len(gen)]
        seq = r["prompt_ids"] + gen
        n0 = len(r["prompt_ids"])
        rows = list(range(n0 - 1, n0 - 1 + len(gen)))  # the row whose logits chose gen[j]
        logits, _ = forward(m, seq[:n0 - 1 + len(gen)], rows)
        agree, first_bad, worst = 0, None, 0.0
        for j, (lg, tp) in enumerate(zip(logits, tops)):
            (a, lpa), (b, lpb) = tp[0], tp[1]
            d = abs((lg[a] - lg[b]) - (lpa - lpb))
            diffs.append(d)
            worst = max(worst, d)
            o = int(np.argmax(lg))
            if o == gen[j]:
                agree += 1
            elif first_bad is None:
                srt = np.sort(lg)
                first_bad = {"index": j, "llama": gen[j], "oracle": o, "llama_margin": lpa - lpb,
                             "oracle_margin": float(srt[-1] - srt[-2])}
        per.append({"id": r["id"], "n_prompt": n0, "n_gen": len(gen), "agree": agree,
                    "first_disagreement": first_bad, "max_abs_margin_diff": worst})
        print(f"{r['id']}: {agree}/{len(gen)} argmax agree, first disagreement "
              f"{first_bad['index'] if first_bad else None}, max |margin diff| {worst:.4f}", file=sys.stderr)
    d = np.array(diffs)
    return {"records": per, "positions": int(d.size),
            "argmax_agree": int(sum(p["agree"] for p in per)),
            "free_running_prefix": [p["first_disagreement"]["index"] if p["first_disagreement"] else p["n_gen"]
                                    for p in per],
            "abs_margin_diff": {"median": float(np.median(d)), "p90": float(np.quantile(d, 0.9)),
                                "p99": float(np.quantile(d, 0.99)), "max": float(d.max())}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", help="comma-separated token ids (no BOS added)")
    ap.add_argument("--positions", default="all", help="all | last | i,j,... (0-based rows)")
    ap.add_argument("--hidden-after-layer", type=int, help="also dump the residual after layer L")
    ap.add_argument("--compare-llama", help="llama.jsonl of scripts/gguf_parity_llama.sh")
    ap.add_argument("--limit", type=int, default=1 << 30, help="records to compare")
    ap.add_argument("--max-gen", type=int, default=1 << 30, help="generated positions per record")
    ap.add_argument("--qact", action="store_true", help="emulate ggml's Q8_0/Q8_1 activation quantisation")
    ap.add_argument("--fa16", action="store_true", help="emulate ggml's CPU flash attention, F16 KV")
    ap.add_argument("--out")
    a = ap.parse_args()
    try:
        t0 = time.time()
        m = Gguf(a.model)
        m.qact, m.fa16 = a.qact, a.fa16
        if a.compare_llama:
            res = compare_llama(m, a.compare_llama, a.limit, a.max_gen)
        else:
            if not a.tokens or not a.out:
                ap.error("--tokens and --out are required (or --compare-llama)")
            toks = [int(s) for s in a.tokens.split(",")]
            rows = parse_positions(a.positions, len(toks))
            if a.hidden_after_layer is not None and not 0 <= a.hidden_after_layer < m.n_layers:
                raise OracleError(f"--hidden-after-layer: outside 0..{m.n_layers - 1}")
            logits, hidden = forward(m, toks, rows, a.hidden_after_layer)
            res = {"logits": logits.tolist(), "positions": rows}
            if hidden is not None:
                res["hidden"], res["hidden_after_layer"] = hidden.tolist(), a.hidden_after_layer
        res.update({"arch": m.arch, "n_layers": m.n_layers, "qact": m.qact, "fa16": m.fa16, "rope": m.rope_kind, "tied_output": m.tied,
                    "dequant": m.dequant, "notes": m.notes, "seconds": round(time.time() - t0, 2)})
    except OracleError as e:
        sys.exit(f"gguf_oracle: {e}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f)
    else:
        json.dump({k: v for k, v in res.items() if k != "records"}, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
