#!/usr/bin/env python3
"""Independent float64 reference ("oracle") of the Inkling model, numpy only.

Implements ARCHITECTURE.md sections 1.1-1.6 over an export laid out as in docs/FORMAT.md
(manifest.json + model.safetensors + experts/layer_LL.bin), written from the documents alone:

  * x = RMSNorm_embed(embed[token]); per layer
    x += ConvOut_attn(Attn(RMSNorm_attn(x))); x += ConvOut_mlp(MLP(RMSNorm_mlp(x)));
    logits = (RMSNorm_final(x) / mup_width_multiplier) . head^T, sliced to vocab_size.
  * Attention: q,k,v,r = INT8 projections; k, v through causal short convolutions
    (y_t = u_t + sum_j w[c,j] u_{t-j}); per-head RMSNorm on q and on (convolved) k; GQA
    h -> h // (n_q/n_kv); score = tau_p (q.k)/D + tau_p r_{h,p}.P[:, p-j] (p-j < extent);
    tau_p = 1 + alpha ln(max((p+1)/floor, 1)) on global layers (l % global_every ==
    global_offset), 1 on sliding layers which only see p-j < window.
  * MLP: dense SwiGLU (global_scale . W_down(silu(W_gate x) * W_up x)) or MoE with sigmoid gate,
    top_k by sigma+bias (lower id wins ties), plus shared experts, weights sigma/Z . route_scale .
    global_scale. Experts/dense weights are INT4 group-32, up scales stored divided by A_l.
  * Default mode: float64 throughout with the TRUE weights (up scales times A_l).
    --f16 mode: the FP16 expert path of FORMAT.md (x16, g, u, h, d, t, acc rounded to float16,
    F_i and A_l restoration) for MoE layers and the three-matmul FP16 path for dense layers;
    everything else float64.
    --qact: the integer kernels' activation quantisation (FORMAT.md): before every INT8 and INT4
    product the input rows are rounded per block to q * m / Q, q = round-half-even(x * Q / m),
    m = max|x| of the block: for INT4, blocks of 32 and Q = 127 (8-bit); for INT8, the largest of
    256, 128, 64, 32, 16 dividing the width and Q = 32767 (16-bit). A non-finite block gives NaN.
    The router stays unquantised.

CLI:  python3 inkling_oracle.py --export DIR --tokens 1,2,3 --out FILE [--upto-layer K] [--f16] [--qact]
      python3 inkling_oracle.py --export DIR --mtp HEAD_DIR --capture FILE --modules 2 --out FILE
        (draft head teacher replay over a capture: logits at every anchor of modules 0..1)
      python3 inkling_oracle.py --selftest
Output: u32 rows, u32 cols (little-endian), then rows*cols little-endian float64, row-major;
[n, vocab_size] logits, or [n, hidden] residual after layers 0..K-1 with --upto-layer K.
Python use: forward(load_export(dir), tokens, upto_layer=None, f16=False) -> np.ndarray.
Choices where the documents leave room: token ids are accepted up to vocab_padded; the layer kind
comes from global_every/global_offset (a manifest "attention" field must agree), the MLP kind from
the manifest's "mlp" field; shared experts have width expert_width; a layer's global_scale and
attenuation_exp default to 1.0 and 0 if absent; MoE routing is float64 in both modes.
"""
import json, math, os, struct, sys
import numpy as np


class OracleError(Exception):
    pass


def _need(ok, msg):
    if not ok:
        raise OracleError(msg)


_DT = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "I8": "i1", "U8": "u1", "I32": "<i4"}
_CFG_KEYS = ("hidden n_layers n_q_heads head_dim n_kv_heads_global n_kv_heads_sliding window "
             "rel_extent_global rel_extent_sliding d_rel dense_width n_routed top_k n_shared "
             "expert_width vocab_size vocab_padded rms_eps conv_kernel tau_alpha tau_floor "
             "route_scale mup_width_multiplier global_every global_offset").split()


def read_safetensors(path):
    """Map of name -> read-only numpy view (memory-mapped) of a safetensors file."""
    _need(os.path.isfile(path), f"missing file {path}")
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    _need(mm.size >= 8, f"{path}: truncated")
    hlen = struct.unpack("<Q", bytes(mm[:8]))[0]
    _need(8 + hlen <= mm.size, f"{path}: header length {hlen} beyond file")
    try:
        header = json.loads(bytes(mm[8:8 + hlen]).decode("utf-8"))
    except ValueError as e:
        raise OracleError(f"{path}: bad header json: {e}")
    base, out = 8 + hlen, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        _need(info.get("dtype") in _DT, f"{path}: tensor {name}: unsupported dtype {info.get('dtype')}")
        dt = np.dtype(_DT[info["dtype"]])
        shape, (a, b) = tuple(info["shape"]), info["data_offsets"]
        _need(b - a == dt.itemsize * int(np.prod(shape, dtype=np.int64)) and base + b <= mm.size,
              f"{path}: tensor {name}: bad data_offsets {a},{b}")
        out[name] = mm[base + a:base + b].view(dt).reshape(shape)
    return out


def deq_int8(q, s):
    return q.astype(np.float64) * s.astype(np.float64)[:, None]


def deq_int4(q, s, cols):
    """INT4 group-32: byte j of group g -> low nibble col 32g+j, high nibble col 32g+j+16."""
    rows = q.shape[0]
    g = np.asarray(q, dtype=np.uint8).reshape(rows, cols // 32, 16)
    nib = np.concatenate([g & 15, g >> 4], axis=2).astype(np.float64) - 8.0
    return (nib * np.asarray(s, dtype=np.float64).reshape(rows, cols // 32, 1)).reshape(rows, cols)


def load_export(d):
    """Parse manifest + tensors (lazily, memory-mapped). Returns a model dict."""
    mpath = os.path.join(d, "manifest.json")
    _need(os.path.isfile(mpath), f"missing file {mpath}")
    try:
        with open(mpath) as f:
            man = json.load(f)
    except ValueError as e:
        raise OracleError(f"bad manifest {mpath}: {e}")
    _need(isinstance(man, dict) and man.get("format") == "moefleet-export" and man.get("version") == 1,
          f"bad manifest {mpath}: format/version is not moefleet-export v1")
    cfg = man.get("config")
    _need(isinstance(cfg, dict), f"bad manifest {mpath}: no config object")
    miss = [k for k in _CFG_KEYS if k not in cfg]
    _need(not miss, f"bad manifest {mpath}: config lacks {','.join(miss)}")
    try:
        ls, le = int(man["layer_start"]), int(man["layer_end"])
        layers = {int(e["index"]): e for e in man["layers"]}
    except (KeyError, TypeError, ValueError) as e:
        raise OracleError(f"bad manifest {mpath}: layer table: {e!r}")
    _need(0 <= ls <= le <= cfg["n_layers"], f"bad manifest {mpath}: layer range [{ls},{le})")
    for l in range(ls, le):
        e = layers.get(l)
        _need(isinstance(e, dict), f"bad manifest {mpath}: no entry for layer {l}")
        kind = "global" if l % cfg["global_every"] == cfg["global_offset"] else "sliding"
        _need(e.get("attention", kind) == kind, f"bad manifest {mpath}: layer {l} attention is not {kind}")
        _need(e.get("mlp") in ("dense", "moe"), f"bad manifest {mpath}: layer {l} mlp {e.get('mlp')!r}")
        _need(e["mlp"] == "dense" or "experts_file" in e, f"bad manifest {mpath}: layer {l} lacks experts_file")
    return {"dir": d, "cfg": cfg, "manifest": man, "layer_start": ls, "layer_end": le,
            "layers": layers, "t": read_safetensors(os.path.join(d, "model.safetensors")), "_cache": {}}


def _tensor(m, name, shape=None):
    t = m["t"].get(name)
    _need(t is not None, f"model.safetensors lacks tensor {name}")
    _need(shape is None or tuple(t.shape) == tuple(shape),
          f"tensor {name}: shape {list(t.shape)} != {list(shape or [])}")
    return t


def _layer(m, l):
    """Dequantised non-expert weights of layer l (cached)."""
    key = ("layer", l)
    if key in m["_cache"]:
        return m["_cache"][key]
    c, e = m["cfg"], m["layers"][l]
    H, nq, D, dr = c["hidden"], c["n_q_heads"], c["head_dim"], c["d_rel"]
    glob = l % c["global_every"] == c["global_offset"]
    nkv = c["n_kv_heads_global"] if glob else c["n_kv_heads_sliding"]
    ext = c["rel_extent_global"] if glob else c["rel_extent_sliding"]
    p, K = f"layers.{l}.", c["conv_kernel"]
    f64 = lambda n, s: np.asarray(_tensor(m, p + n, s), dtype=np.float64)
    L = {"glob": glob, "nkv": nkv, "ext": ext, "mlp": e["mlp"],
         "gs": float(e.get("global_scale", 1.0)), "A": 2.0 ** int(e.get("attenuation_exp", 0)),
         "attn_norm": f64("attn_norm.weight", [H]), "mlp_norm": f64("mlp_norm.weight", [H]),
         "q_norm": f64("attn.q_norm.weight", [D]), "k_norm": f64("attn.k_norm.weight", [D]),
         "P": f64("attn.rel_pos", [dr, ext]), "conv_k": f64("attn.conv_k", [nkv * D, K]),
         "conv_v": f64("attn.conv_v", [nkv * D, K]), "conv_attn": f64("conv_attn_out", [H, K]),
         "conv_mlp": f64("conv_mlp_out", [H, K])}
    for n, r, cc in (("q", nq * D, H), ("k", nkv * D, H), ("v", nkv * D, H), ("r", nq * dr, H), ("o", H, nq * D)):
        L[n] = deq_int8(_tensor(m, f"{p}attn.{n}.qweight", [r, cc]), _tensor(m, f"{p}attn.{n}.scale", [r]))
    if e["mlp"] == "dense":
        W = c["dense_width"]
        for n, r, cc in (("gate", W, H), ("up", W, H), ("down", H, W)):
            L["d_" + n] = deq_int4(_tensor(m, f"{p}mlp.{n}.qweight", [r, cc // 2]),
                                   _tensor(m, f"{p}mlp.{n}.scale", [r, cc // 32]), cc)
    else:
        nt = c["n_routed"] + c["n_shared"]
        L["router_w"] = f64("router.weight", [nt, H])
        L["router_b"] = f64("router.bias", [c["n_routed"]])
        path = os.path.join(m["dir"], e["experts_file"])
        _need(os.path.isfile(path), f"missing file {path}")
        H2, W = H, c["expert_width"]
        sizes = [W * H2 // 2, W * H2 // 16, W * H2 // 2, W * H2 // 16, H2 * W // 2, H2 * W // 16]
        rb = sum(sizes)
        _need(int(e.get("expert_record_bytes", rb)) == rb, f"layer {l}: expert_record_bytes != {rb}")
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        _need(mm.size == nt * rb, f"{path}: size {mm.size} != {nt} records of {rb} bytes")
        L["experts"], L["rec_sizes"], L["rec_bytes"] = mm, sizes, rb
    m["_cache"][key] = L
    return L


def _expert(m, L, e):
    """Stored INT4 weights of expert e as float64: gate, up (still divided by A_l), down."""
    H, W = m["cfg"]["hidden"], m["cfg"]["expert_width"]
    rec, o, parts = L["experts"][e * L["rec_bytes"]:(e + 1) * L["rec_bytes"]], 0, []
    for s in L["rec_sizes"]:
        parts.append(rec[o:o + s]); o += s
    sc = lambda b, r, g: b.view("<f2").reshape(r, g)
    return (deq_int4(parts[0].reshape(W, H // 2), sc(parts[1], W, H // 32), H),
            deq_int4(parts[2].reshape(W, H // 2), sc(parts[3], W, H // 32), H),
            deq_int4(parts[4].reshape(H, W // 2), sc(parts[5], H, W // 32), W))


QACT = False


def _qa(x, block, qmax):
    """Activation rows as the integer kernels see them (identity unless --qact)."""
    if not QACT:
        return x
    n, cols = x.shape
    b = np.asarray(x, dtype=np.float64).reshape(n, cols // block, block)
    m = np.abs(b).max(axis=2, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        q = np.clip(np.rint(b * (qmax / m)), -qmax, qmax) * (m / qmax)
    q = np.where(m == 0, 0.0, q)
    q = np.where(np.isfinite(m), q, np.nan)
    return q.reshape(n, cols)


def _q4(x):
    """INT4 products: 8-bit activations in blocks of 32."""
    return _qa(x, 32, 127.0)


def _q8(x):
    cols = x.shape[1]
    return _qa(x, next((b for b in (256, 128, 64, 32, 16) if cols % b == 0), cols), 32767.0)


def _f16(a):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(a, dtype=np.float64).astype(np.float16).astype(np.float64)


def _silu(g):
    with np.errstate(over="ignore", invalid="ignore"):  # silu(-inf) -> nan, like g/(1+e^-g) in f32
        return g / (1.0 + np.exp(-g))


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def short_conv(u, w):
    """y_t = u_t + sum_j w[c, j] u_{t-j}, zero history; u [n, C], w [C, K]."""
    y, n = u.copy(), u.shape[0]
    for j in range(min(w.shape[1], n)):
        y[j:] += u[:n - j] * w[:, j]
    return y


def attention(c, L, x):
    n, nq, D, nkv = x.shape[0], c["n_q_heads"], c["head_dim"], L["nkv"]
    eps = c["rms_eps"]
    x = _q8(x)
    q = _rms((x @ L["q"].T).reshape(n, nq, D), L["q_norm"], eps)
    k = _rms(short_conv(x @ L["k"].T, L["conv_k"]).reshape(n, nkv, D), L["k_norm"], eps)
    v = short_conv(x @ L["v"].T, L["conv_v"]).reshape(n, nkv, D)
    r = (x @ L["r"].T).reshape(n, nq, c["d_rel"])
    grp = np.arange(nq) // (nq // nkv)
    kh, vh = k[:, grp], v[:, grp]                                   # [n, nq, D]
    s = np.einsum("phd,jhd->hpj", q, kh) / D
    rb = np.einsum("phr,re->hpe", r, L["P"])                          # [nq, n, extent]
    dist = np.arange(n)[:, None] - np.arange(n)[None, :]              # p - j
    ext = L["ext"]
    bias = np.take_along_axis(rb, np.clip(dist, 0, ext - 1)[None].repeat(nq, 0), axis=2)
    bias = np.where(((dist >= 0) & (dist < ext))[None], bias, 0.0)
    if L["glob"]:
        pos = np.arange(1, n + 1, dtype=np.float64)
        tau = 1.0 + c["tau_alpha"] * np.log(np.maximum(pos / c["tau_floor"], 1.0))
        mask = dist >= 0
    else:
        tau = np.ones(n)
        mask = (dist >= 0) & (dist < c["window"])
    s = tau[None, :, None] * s + tau[None, :, None] * bias
    s = np.where(mask[None], s, -np.inf)
    s = np.exp(s - s.max(axis=2, keepdims=True))
    a = s / s.sum(axis=2, keepdims=True)
    o = np.einsum("hpj,jhd->phd", a, vh).reshape(n, nq * D)
    return _q8(o) @ L["o"].T


def mlp_dense(c, L, x, f16):
    A, gs = L["A"], L["gs"]
    if not f16:
        x = _q4(x)
        return gs * (_q4(_silu(x @ L["d_gate"].T) * (x @ (L["d_up"] * A).T)) @ L["d_down"].T)
    x16 = _q4(_f16(x))
    g, u = _f16(x16 @ L["d_gate"].T), _f16(x16 @ L["d_up"].T)
    d = _f16(_q4(_f16(_silu(g) * u)) @ L["d_down"].T)
    return gs * A * d


def route(c, L, x):
    """Selections [n, top_k + n_shared] (ids) and weights [n, top_k + n_shared]."""
    R, S, k = c["n_routed"], c["n_shared"], c["top_k"]
    with np.errstate(over="ignore"):
        sig = 1.0 / (1.0 + np.exp(-(x @ L["router_w"].T)))
    order = np.argsort(-(sig[:, :R] + L["router_b"]), axis=1, kind="stable")[:, :k]
    sel = np.concatenate([order, np.broadcast_to(np.arange(R, R + S), (x.shape[0], S))], axis=1)
    sg = np.take_along_axis(sig, sel, axis=1)
    return sel, sg / sg.sum(axis=1, keepdims=True) * c["route_scale"] * L["gs"]


def mlp_moe(m, L, x, f16):
    c = m["cfg"]
    n, H, A = x.shape[0], c["hidden"], L["A"]
    sel, w = route(c, L, x)
    out = np.zeros((n, sel.shape[1], H))
    xin = _f16(x) if f16 else x
    for e in np.unique(sel):
        rows, slots = np.nonzero(sel == e)
        Wg, Wu, Wd = _expert(m, L, int(e))
        xe = _q4(xin[rows])
        if f16:
            g, u = _f16(xe @ Wg.T), _f16(xe @ Wu.T)
            out[rows, slots] = _f16(_q4(_f16(_silu(g) * u)) @ Wd.T)
        else:
            out[rows, slots] = _q4(_silu(xe @ Wg.T) * (xe @ (Wu * A).T)) @ Wd.T
    if not f16:
        return np.einsum("ns,nsh->nh", w, out)
    tot = np.maximum(1.0, np.abs(w).sum(axis=1))
    mant, ex = np.frexp(tot)                                          # tot = mant * 2^ex
    F = np.ldexp(1.0, np.where(mant == 0.5, ex - 1, ex))              # 2^ceil(log2 tot)
    acc = np.zeros((n, H))
    for s in range(sel.shape[1]):
        acc = _f16(acc + _f16((w[:, s] / F)[:, None] * out[:, s]))
    return A * F[:, None] * acc


def forward(m, tokens, upto_layer=None, f16=False):
    c = m["cfg"]
    toks = np.asarray(tokens, dtype=np.int64)
    _need(toks.ndim == 1 and toks.size > 0, "need a non-empty 1-D token sequence")
    _need(toks.min() >= 0 and toks.max() < c["vocab_padded"], f"token id out of range [0, {c['vocab_padded']})")
    nl = c["n_layers"] if upto_layer is None else int(upto_layer)
    _need(0 <= nl <= c["n_layers"], f"--upto-layer {nl} outside [0, {c['n_layers']}]")
    _need(m["layer_start"] == 0 and m["layer_end"] >= nl,
          f"export holds layers [{m['layer_start']},{m['layer_end']}), need [0,{nl})")
    H, eps = c["hidden"], c["rms_eps"]
    emb = _tensor(m, "embed.weight", [c["vocab_padded"], H])
    x = _rms(np.asarray(emb[toks], dtype=np.float64),
             np.asarray(_tensor(m, "embed_norm.weight", [H]), dtype=np.float64), eps)
    for l in range(nl):
        L = _layer(m, l)
        x = x + short_conv(attention(c, L, _rms(x, L["attn_norm"], eps)), L["conv_attn"])
        xn = _rms(x, L["mlp_norm"], eps)
        y = mlp_dense(c, L, xn, f16) if L["mlp"] == "dense" else mlp_moe(m, L, xn, f16)
        x = x + short_conv(y, L["conv_mlp"])
    if upto_layer is not None:
        return x
    V = c["vocab_padded"]
    head = deq_int8(_tensor(m, "head.qweight", [V, H]), _tensor(m, "head.scale", [V]))
    xf = _rms(x, np.asarray(_tensor(m, "final_norm.weight", [H]), dtype=np.float64), eps)
    return (_q8(xf / c["mup_width_multiplier"]) @ head.T)[:, :c["vocab_size"]]


# ----------------------------------------------------------------------------- draft head replay

def read_capture(path):
    """A capture file (FORMAT.md "Capture files"): (tokens [T], prompt_rows P, residuals [T-1, H])."""
    with open(path, "rb") as f:
        b = f.read()
    _need(len(b) >= 64 and b[:8] == b"MFCAPT\0\0", f"{path}: not a capture file")
    ver, hb, H, role, slot, P = struct.unpack_from("<6I", b, 8)
    seq, rb, n = struct.unpack_from("<QII", b, 32)
    _need(ver == 1 and hb == 64 and rb == 16 + 4 * H, f"{path}: unsupported header")
    _need(len(b) == 64 + n * rb and 1 <= P <= n, f"{path}: size or prompt rows do not match")
    rec = np.frombuffer(b, dtype=np.uint8, offset=64).reshape(n, rb)
    ids = rec[:, :16].copy().view("<u4").reshape(n, 4)
    _need(np.array_equal(ids[:, 0], np.arange(n)), f"{path}: positions are not 0..{n - 1}")
    res = rec[:, 16:].copy().view("<f4").reshape(n, H).astype(np.float64)
    toks = list(ids[:P, 1]) + list(ids[P - 1:, 2])
    _need(all(ids[i, 1] == toks[i] for i in range(P, n)),
          f"{path}: an input token is not the token emitted one position earlier")
    return np.asarray(toks, dtype=np.int64), int(P), res


def load_mtp(d):
    """A draft head export (FORMAT.md "Draft head exports"): (manifest, tensors)."""
    mpath = os.path.join(d, "manifest.json")
    _need(os.path.isfile(mpath), f"missing file {mpath}")
    with open(mpath) as f:
        man = json.load(f)
    _need(man.get("format") == "moefleet-mtp" and man.get("version") == 1,
          f"{mpath}: format/version is not moefleet-mtp v1")
    return man, read_safetensors(os.path.join(d, "mtp.safetensors"))


def mtp_replay(m, mtp_dir, capture, n_modules):
    """Teacher replay of modules 0..n_modules-1 over one capture: logits [sum of anchors, vocab]
    (module 0's anchors t = P-1..T-3, then module 1's t = P-1..T-4, ...). Module k at t:
    z = [rms(prev)*hidden_norm ; rms(embed[x_{t+k+1}])*embed_norm], x = z W_in^T, one decoder block
    (attention of the module's kind: modules 1 and 3 global, the others sliding; dense SwiGLU),
    logits = (x / mup) head^T; prev of module 0 = RMSNorm_final(residual_t), of module k the
    block output of module k-1."""
    c = m["cfg"]
    man, t = load_mtp(mtp_dir)
    mc = man["config"]
    _need(mc["hidden"] == c["hidden"] and mc["vocab_size"] == c["vocab_size"],
          "the draft head and the model disagree on hidden width or vocabulary")
    toks, P, res = read_capture(capture)
    T, H, eps, V = len(toks), c["hidden"], c["rms_eps"], c["vocab_size"]
    _need(res.shape == (T - 1, H), f"{capture}: residual width {res.shape} != hidden {H}")
    emb = np.asarray(_tensor(m, "embed.weight", [c["vocab_padded"], H]), dtype=np.float64)
    head = deq_int8(_tensor(m, "head.qweight", [c["vocab_padded"], H]),
                    _tensor(m, "head.scale", [c["vocab_padded"]]))[:V]
    fnorm = np.asarray(_tensor(m, "final_norm.weight", [H]), dtype=np.float64)
    prev, out = _rms(res[:T - 2], fnorm, eps), []
    for k in range(n_modules):
        g = lambda n: np.asarray(t[f"mtp.{k}.{n}"], dtype=np.float64)
        glob = k in (1, 3)
        L = {"glob": glob, "nkv": c["n_kv_heads_global" if glob else "n_kv_heads_sliding"],
             "ext": c["rel_extent_global" if glob else "rel_extent_sliding"],
             "q_norm": g("attn.q_norm"), "k_norm": g("attn.k_norm"), "P": g("attn.rel_pos"),
             "conv_k": g("attn.conv_k"), "conv_v": g("attn.conv_v")}
        for n in "qkvro":
            L[n] = g(f"attn.{n}")
        n = T - 2 - k
        e = emb[toks[k + 1:k + 1 + n]]
        z = np.concatenate([_rms(prev[:n], g("hidden_norm"), eps), _rms(e, g("embed_norm"), eps)], axis=1)
        x = z @ g("input_proj").T
        x = x + short_conv(attention(c, L, _rms(x, g("attn_norm"), eps)), g("conv_attn_out"))
        xn = _rms(x, g("mlp_norm"), eps)
        x = x + short_conv((_silu(xn @ g("mlp.gate").T) * (xn @ g("mlp.up").T)) @ g("mlp.down").T,
                           g("conv_mlp_out"))
        out.append(((x / c["mup_width_multiplier"]) @ head.T)[P - 1:n])
        prev = x
    return np.concatenate(out, axis=0)


def write_matrix(path, a):
    a = np.ascontiguousarray(a, dtype="<f8")
    with open(path, "wb") as f:
        f.write(struct.pack("<II", a.shape[0], a.shape[1]))
        f.write(a.tobytes())


def read_matrix(path):
    with open(path, "rb") as f:
        b = f.read()
    r, cc = struct.unpack("<II", b[:8])
    if len(b) != 8 + 8 * r * cc:
        raise OracleError(f"{path}: size does not match {r}x{cc}")
    return np.frombuffer(b[8:], dtype="<f8").reshape(r, cc).astype(np.float64)


# ----------------------------------------------------------------------------- self-test

def _pack_int4(nib):
    """nib [rows, cols] in 0..15 -> packed bytes [rows, cols/2] (FORMAT.md layout)."""
    r, cc = nib.shape
    g = nib.reshape(r, cc // 32, 32).astype(np.uint8)
    return (g[:, :, :16] | (g[:, :, 16:] << 4)).reshape(r, cc // 2)


def _write_safetensors(path, tensors):
    hdr, blobs, off = {}, [], 0
    names = {np.dtype(v): k for k, v in _DT.items()}
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        hdr[name] = {"dtype": names[np.dtype(a.dtype)], "shape": list(a.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def _build_export(d, cfg, layer_end, rng, gscale, att):
    H, nq, D, dr, K = cfg["hidden"], cfg["n_q_heads"], cfg["head_dim"], cfg["d_rel"], cfg["conv_kernel"]
    t, ents = {}, []
    i4 = lambda r, cc, A=1.0: (_pack_int4(rng.integers(0, 16, (r, cc))),
                               (rng.uniform(0.5, 1.5, (r, cc // 32)) / (4.6 * math.sqrt(cc) * A)).astype("<f2"))
    i8 = lambda r, cc: (rng.integers(-127, 128, (r, cc)).astype("i1"),
                        (rng.uniform(0.5, 1.5, r) / (73.0 * math.sqrt(cc))).astype("<f2"))
    f32 = lambda *s, sc=1.0, base=0.0: (base + sc * rng.standard_normal(s)).astype("<f4")
    t["embed.weight"] = rng.standard_normal((cfg["vocab_padded"], H)).astype("<f2")
    t["embed_norm.weight"] = f32(H, sc=0.1, base=1.0)
    os.makedirs(os.path.join(d, "experts"), exist_ok=True)
    for l in range(layer_end):
        glob = l % cfg["global_every"] == cfg["global_offset"]
        nkv = cfg["n_kv_heads_global" if glob else "n_kv_heads_sliding"]
        ext = cfg["rel_extent_global" if glob else "rel_extent_sliding"]
        p, A = f"layers.{l}.", 2.0 ** att[l]
        for n in ("attn_norm", "mlp_norm"):
            t[p + n + ".weight"] = f32(H, sc=0.1, base=1.0)
        for n, r, cc in (("q", nq * D, H), ("k", nkv * D, H), ("v", nkv * D, H), ("r", nq * dr, H), ("o", H, nq * D)):
            t[f"{p}attn.{n}.qweight"], t[f"{p}attn.{n}.scale"] = i8(r, cc)
        t[p + "attn.q_norm.weight"], t[p + "attn.k_norm.weight"] = f32(D, sc=0.1, base=1.0), f32(D, sc=0.1, base=1.0)
        t[p + "attn.rel_pos"] = f32(dr, ext, sc=0.5)
        t[p + "attn.conv_k"], t[p + "attn.conv_v"] = f32(nkv * D, K, sc=0.3), f32(nkv * D, K, sc=0.3)
        t[p + "conv_attn_out"], t[p + "conv_mlp_out"] = f32(H, K, sc=0.3), f32(H, K, sc=0.3)
        e = {"index": l, "attention": "global" if glob else "sliding", "global_scale": gscale[l],
             "attenuation_exp": att[l]}
        if l < cfg["n_dense_layers"]:
            e["mlp"], W = "dense", cfg["dense_width"]
            for n, r, cc, a in (("gate", W, H, 1.0), ("up", W, H, A), ("down", H, W, 1.0)):
                t[f"{p}mlp.{n}.qweight"], t[f"{p}mlp.{n}.scale"] = i4(r, cc, a)
        else:
            nt, W = cfg["n_routed"] + cfg["n_shared"], cfg["expert_width"]
            t[p + "router.weight"], t[p + "router.bias"] = f32(nt, H, sc=0.2), f32(cfg["n_routed"], sc=0.1)
            recs = []
            for _ in range(nt):
                for r, cc, a in ((W, H, 1.0), (W, H, A), (H, W, 1.0)):
                    q, s = i4(r, cc, a); recs += [q.tobytes(), s.tobytes()]
            fn = f"experts/layer_{l:02d}.bin"
            with open(os.path.join(d, fn), "wb") as f:
                f.write(b"".join(recs))
            e.update(mlp="moe", experts_file=fn, expert_record_bytes=len(b"".join(recs)) // nt)
        ents.append(e)
    if layer_end == cfg["n_layers"]:
        t["final_norm.weight"] = f32(H, sc=0.1, base=1.0)
        t["head.qweight"], t["head.scale"] = i8(cfg["vocab_padded"], H)
    _write_safetensors(os.path.join(d, "model.safetensors"), t)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump({"format": "moefleet-export", "version": 1, "seed": 1, "config": cfg,
                   "layer_start": 0, "layer_end": layer_end, "layers": ents}, f, indent=1)


def _selftest():
    import tempfile, subprocess
    cfg = dict(hidden=64, n_layers=4, n_q_heads=4, head_dim=16, n_kv_heads_global=1, n_kv_heads_sliding=2,
               window=5, rel_extent_global=12, rel_extent_sliding=4, d_rel=4, dense_width=256,
               n_dense_layers=1, n_routed=8, top_k=2, n_shared=1, expert_width=32, vocab_size=90,
               vocab_padded=96, rms_eps=1e-5, conv_kernel=4, tau_alpha=0.1, tau_floor=4,
               route_scale=1.5, mup_width_multiplier=2.0, global_every=3, global_offset=2)
    gscale, att = [0.7, 1.0, 1.3, 0.9], [2, 0, 3, 1]
    rng = np.random.default_rng(1234)
    with tempfile.TemporaryDirectory() as tmp:
        full, part = os.path.join(tmp, "full"), os.path.join(tmp, "part")
        _build_export(full, cfg, 4, np.random.default_rng(5), gscale, att)
        _build_export(part, cfg, 2, np.random.default_rng(5), gscale, att)
        m = load_export(full)                                          # (a) loads
        toks = rng.integers(0, cfg["vocab_size"], 24)
        a, b = forward(m, toks), forward(m, toks, f16=True)
        assert a.shape == (24, 90) and np.all(np.isfinite(a)), a.shape
        rel = np.abs(a - b).max() / np.abs(a).max()                    # (b) f64 vs f16
        assert 0 < rel < 1e-2, f"f64 vs f16 rel diff {rel}"
        toks2 = toks.copy(); toks2[12:] = rng.integers(0, 90, 12)      # (c) causality
        a2 = forward(m, toks2)
        assert np.allclose(a[:12], a2[:12], rtol=1e-12, atol=1e-12 * np.abs(a).max())
        assert not np.allclose(a[12:], a2[12:])
        mp = load_export(part)                                         # partial export, upto-layer
        r_full, r_part = forward(m, toks, upto_layer=2), forward(mp, toks, upto_layer=2)
        assert r_part.shape == (24, 64) and np.array_equal(r_full, r_part)
        try:
            forward(mp, toks); assert False, "partial export produced logits"
        except OracleError: pass
        L0, xn = _layer(m, 0), _rms(rng.standard_normal((5, 64)), 1.0, 1e-5)   # dense, A_0 = 4
        d64, d16 = mlp_dense(cfg, L0, xn, False), mlp_dense(cfg, L0, xn, True)
        assert np.abs(d64 - d16).max() < 1e-2 * np.abs(d64).max()
        out = os.path.join(tmp, "o.bin")                               # (d) CLI + round trip
        me = os.path.abspath(__file__)
        subprocess.run([sys.executable, me, "--export", full, "--tokens", ",".join(map(str, toks)),
                        "--out", out, "--f16"], check=True)
        assert np.array_equal(read_matrix(out), b)
        write_matrix(out, a); assert np.array_equal(read_matrix(out), a)
        p = subprocess.run([sys.executable, me, "--export", os.path.join(tmp, "nope"), "--tokens", "1",
                            "--out", out], capture_output=True, text=True)
        assert p.returncode != 0 and p.stderr.count("\n") == 1, p.stderr
    print(f"selftest ok (f64 vs f16 logits rel diff {rel:.2e})")


def main(argv):
    import argparse
    class P(argparse.ArgumentParser):
        def error(self, msg): raise OracleError(msg)
    ap = P(description="float64 Inkling oracle")
    ap.add_argument("--export"); ap.add_argument("--tokens"); ap.add_argument("--out")
    ap.add_argument("--upto-layer", type=int); ap.add_argument("--f16", action="store_true")
    ap.add_argument("--selftest", action="store_true"); ap.add_argument("--qact", action="store_true")
    ap.add_argument("--mtp"); ap.add_argument("--capture"); ap.add_argument("--modules", type=int, default=2)
    a = ap.parse_args(argv)
    global QACT
    QACT = a.qact
    if a.selftest:
        return _selftest()
    if a.mtp:
        _need(a.export and a.capture and a.out, "--mtp needs --export, --capture and --out")
        return write_matrix(a.out, mtp_replay(load_export(a.export), a.mtp, a.capture, a.modules))
    _need(a.export and a.tokens and a.out, "--export, --tokens and --out are required")
    try:
        toks = [int(s) for s in a.tokens.split(",") if s.strip() != ""]
    except ValueError:
        raise OracleError(f"bad --tokens {a.tokens!r}")
    write_matrix(a.out, forward(load_export(a.export), toks, a.upto_layer, a.f16))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Exception as e:  # one-line message, non-zero exit
        sys.stderr.write(f"inkling_oracle: error: {' '.join(str(e).split())}\n")
        sys.exit(1)
