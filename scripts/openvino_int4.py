#!/usr/bin/env python3
"""OpenVINO's CPU plugin on the same compressed product as our INT4 kernel, for a side-by-side
timing (issue 6): y = x · Wᵀ with x [1, 6144] f32 and W [3072, 6144] u4, groups of 32 along the
input, f16 scale per group, zero point 8 — the decompression pattern OpenVINO's weight compression
emits (Convert u4 -> f16, Subtract zp, Multiply scale, Reshape, MatMul), which the CPU plugin runs
as a compressed fully-connected layer. Prints and writes a JSON record: median ms per call and GB/s
of weights, with the plugin's default dynamic activation quantisation and with it off.

Usage: python3 scripts/openvino_int4.py OUT.json [--rows 3072] [--cols 6144] [--calls 300]
Needs `pip install openvino` (not part of make test).
"""
import argparse, json, platform, statistics, sys, time

import numpy as np
import openvino as ov
import openvino.opset13 as ops


def model(rows, cols, rng):
    g = cols // 32
    q = ov.Tensor(ov.Type.u4, ov.Shape([rows, g, 32]))
    nib = rng.integers(1, 16, size=rows * cols, dtype=np.uint8)
    q.data[:] = (nib[0::2] | (nib[1::2] << 4)).reshape(q.data.shape)
    w = ov.op.Constant(q)
    zp = ops.constant(np.array(8, dtype=np.uint8), dtype=ov.Type.u4)
    sc = ops.constant((0.01 + 0.02 * rng.random((rows, g, 1))).astype(np.float16))
    deq = ops.multiply(ops.subtract(ops.convert(w, "f16"), ops.convert(zp, "f16")), sc)
    wf = ops.convert(ops.reshape(deq, [rows, cols], special_zero=False), "f32")
    x = ops.parameter([1, cols], ov.Type.f32, name="x")
    y = ops.matmul(x, wf, transpose_a=False, transpose_b=True)
    weight_bytes = rows * cols // 2 + 2 * rows * g
    return ov.Model([y], [x], "int4_product"), weight_bytes


def time_it(compiled, cols, calls, rng):
    req = compiled.create_infer_request()
    x = rng.standard_normal((1, cols)).astype(np.float32)
    for _ in range(20):
        req.infer({0: x})
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        req.infer({0: x})
        ts.append(time.perf_counter() - t0)
    return ts


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=3072)
    ap.add_argument("--cols", type=int, default=6144)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(7)
    m, wb = model(a.rows, a.cols, rng)
    core = ov.Core()
    out = {"record": "openvino_int4_product", "openvino": ov.__version__, "rows": a.rows,
           "cols": a.cols, "weight_bytes": wb, "calls": a.calls,
           "host": {"machine": platform.machine(), "processor": platform.processor()},
           "note": "the matrix (10.6 MB) may sit in L3 between calls; compare with the criterion "
                   "int4/inkling-expert-gate/1 benchmark, which also reuses one matrix"}
    for name, cfg in [("default", {}), ("no_dynamic_quantization", {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"})]:
        compiled = core.compile_model(m, "CPU", cfg)
        ts = time_it(compiled, a.cols, a.calls, rng)
        med = statistics.median(ts)
        out[name] = {"median_ms": med * 1e3, "gb_s": wb / med / 1e9,
                     "p10_ms": sorted(ts)[len(ts) // 10] * 1e3, "p90_ms": sorted(ts)[9 * len(ts) // 10] * 1e3}
        print(f"OpenVINO CPU ({name}): {med * 1e3:.3f} ms per call, {wb / med / 1e9:.2f} GB/s of weights")
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
