#!/usr/bin/env python3
"""CUDA MatMulNBits against HBM bandwidth: the gemv route (decode) and the gemm route.

The Qwen2.5-0.5B projections, K x N: 896 x 4864 (up / gate), 4864 x 896 (down), 896 x 1152
(q, k, v: 896 + 2 * 128) and 896 x 151936 (lm_head), and a 7B-class model's 4096 x 4096,
4096 x 11008 and 11008 x 4096 (--shapes picks some); weights int4 in blocks of 32,
symmetric (no zero points), float16 scales and activations; M = 1 (a decode step: the
gemv) and M = 128 (a prefill chunk: dequantize + cuBLASLt), or --rows.

Each case builds a one-node Session (``KernelStep`` of cuda_kernels.py: placement, plan,
arena, weight upload, one run), checks that run against cpu_reference under the kernel's
promise (--no-check skips it), then times the kernel step alone: the median over --iters
of a CUDA event pair around one call. Before each timed call --flush-mib (128 MiB) evicts
L2, so the weights come from HBM as in a model whose weights do not fit L2 (--warm keeps
L2: the small shapes then read from it). The flush reads that many bytes (--flush read, a
kernel of this file, the default): in a model the weights before a projection are evicted
by the other weights' reads, so L2 holds clean lines. --flush copy copies them instead, as
earlier runs did: L2 is then full of the copy's dirty lines, and the timed kernel also
pays for writing them back to HBM (on the H200, 1.3 us of the LM head's 31). Printed per case: µs,
effective GB/s of the packed weight bytes (B; the scales, 1/8 of that, are not counted),
the share of --peak-gbs (4800: H200 HBM3e), and for M > 1 TFLOP/s.

Target: M = 1 (the gemv or the tensor-core route, whichever the shape takes) reaches >= 60 %
of peak on the weight bytes. The three small shapes move 0.5-2.2 MB, which HBM delivers in
under half a microsecond: there launch latency and the ramp of one wave dominate and the
share stays far below the target; the lm_head (68 MB) and the 7B-class shapes (8-23 MB)
show the kernels' streaming rate.

Usage::

    python benchmarks/nbits.py [--rows 1,128] [--iters 50] [--flush read|copy] [--warm]
                               [--route auto|gemv|mma] [--no-check] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
try:
    import onnx_ep  # noqa: F401
except ImportError:     # run from a checkout without installing: use the repository's copy
    sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT))                                 # tests.helpers (the node builder)
sys.path.insert(0, str(Path(__file__).resolve().parent))   # cuda_kernels (KernelStep, Bench)

MIB = 1 << 20
#: the Qwen2.5-0.5B projections, (name, K, N)
SHAPES = (("up/gate", 896, 4864), ("down", 4864, 896), ("qkv", 896, 1152),
          ("lm_head", 896, 151936),
          # a 7B-class model's projections (hidden 4096, intermediate 11008): 8-23 MB each
          ("4096sq", 4096, 4096), ("7b-up", 4096, 11008), ("7b-down", 11008, 4096))
TARGET = 0.60


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


#: the read flush: every 16 bytes of a buffer read (an xor the compiler cannot drop)
READ_SOURCE = r"""
extern "C" __global__ void l2_read(const uint4* p, long long n16, unsigned* out) {
    unsigned acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
}
"""


class Flush:
    """Evicts L2 on a stream before each timed call: reads (or copies) the bench's scratch."""

    def __init__(self, bench: Any, nbytes: int, mode: str) -> None:
        self.bench, self.nbytes = bench, nbytes
        self.fn: Any = None
        if mode == "read" and nbytes:
            import ctypes

            from onnx_ep.providers.cuda import launch, nvrtc

            arch = bench.device.arch
            cubin = nvrtc.compile_cubin(READ_SOURCE, "l2_read.cu", ["--std=c++17"], arch)
            self.fn = launch.load_module(cubin).function("l2_read")
            src, dst = bench.scratch
            self.args = [(src.ptr, ctypes.c_void_p), (nbytes // 16, ctypes.c_int64),
                         (dst.ptr, ctypes.c_void_p)]
            self.grid = (bench.device.multiprocessors * 8, 1, 1)

    def __call__(self, stream: Any) -> None:
        if not self.nbytes:
            return
        if self.fn is not None:
            from onnx_ep.providers.cuda import launch

            launch.launch(self.fn, self.grid, (256, 1, 1), self.args, stream)
        else:
            src, dst = self.bench.scratch
            self.bench.copies.copy_dtod(dst.ptr, src.ptr, self.nbytes, stream)


def gpu_us(bench: Any, step: Any, iters: int, flush: Flush, warmup: int = 3) -> list[float]:
    """Microseconds of each of ``iters`` calls of ``step`` (event pairs), each after
    ``flush``."""
    device, stream = bench.device, step.stream
    events = [(device.new_event(timing=True), device.new_event(timing=True))
              for _ in range(iters)]
    try:
        for _ in range(warmup):
            step()
        for start, end in events:
            flush(stream)
            start.record(stream)
            step()
            end.record(stream)
        events[-1][1].synchronize()
        return [1e3 * s.elapsed_ms(e) for s, e in events]
    finally:
        for s, e in events:
            s.close()
            e.close()


def check_output(case: Any, got: np.ndarray) -> str:
    """'' when the session's first run keeps the kernel's promise against cpu_reference."""
    from onnx_ep import Session
    from onnx_ep.providers.cuda.kernels import quant_contrib
    from onnx_ep.testing.ulp import judge

    sess = Session(case.model, providers=["cpu_reference"])
    try:
        ref = np.asarray(sess.run(None, case.feeds)[0])
    finally:
        sess.close()
    promise = quant_contrib.KERNELS[0].parity_for(case.dtype)
    d = judge(np.asarray(got), ref, promise)
    return "" if d.kept else f"PARITY FAILED: {d.reason} (max abs {d.max_abs:.3g})"


def bench_case(bench: Any, name: str, k: int, n: int, m: int, args: argparse.Namespace
               ) -> dict[str, Any]:
    from cuda_kernels import KernelStep

    from onnx_ep.providers.cuda.kernels import nbits
    from tests.helpers.nbits_cases import NBitsCase

    case = NBitsCase(k=k, n=n, block=32, bits=4, a_shape=(1, m, k), dtype=np.float16,
                     seed=k + n + m)
    meta = _meta(k, n)
    plan = nbits.nbits_plan(meta)
    # the tensor-core route needs sm_80 or later, which every GPU this is timed on has
    route = ("mma" if nbits.mma_geometry(plan, m, np.float16, 0, 80) is not None else
             "gemv" if nbits.gemv_geometry(plan, m) is not None else "gemm")
    t0 = time.perf_counter()
    step = KernelStep(case.model, case.feeds)
    try:
        progress(f"  {name} M={m}: session + first run {time.perf_counter() - t0:.1f} s")
        note = check_output(case, step.first[0]) if args.check else "not checked"
        step.first = None
        us = statistics.median(gpu_us(bench, step, args.iters, args.flusher))
    finally:
        step.close()
    weight_bytes = case.b.nbytes
    gbs = weight_bytes / (us * 1e-6) / 1e9
    row = {"case": name, "K": k, "N": n, "M": m, "route": route, "us": round(us, 2),
           "weight_MB": round(weight_bytes / 1e6, 2), "GB/s": round(gbs, 1),
           "peak_%": round(100 * gbs / args.peak_gbs, 1), "note": note}
    if m > 1:
        row["TFLOP/s"] = round(2 * m * n * k / (us * 1e-6) / 1e12, 2)
    if m == 1 and route in ("gemv", "mma"):
        row["target"] = "ok" if gbs / args.peak_gbs >= TARGET else f"< {100 * TARGET:.0f} %"
    return row


def force_route(route: str) -> None:
    """Make MatMulNBits take ``route`` for M <= 8 where it can (module settings of
    :mod:`~onnx_ep.providers.cuda.kernels.nbits_mma`; this process only)."""
    from onnx_ep.providers.cuda.kernels import nbits_mma

    if route == "gemv":
        nbits_mma.MMA_ROUTE = False
    elif route == "mma":
        nbits_mma.MMA_MIN_WARPS = 1


def _meta(k: int, n: int) -> Any:
    from onnx_ep.core.kernel import NodeMeta

    return NodeMeta(name="n", op_type="MatMulNBits", domain="com.microsoft", opset=1,
                    attrs={"K": k, "N": n, "bits": 4, "block_size": 32}, inputs=())


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    cols = ["case", "K", "N", "M", "route", "us", "weight_MB", "GB/s", "peak_%", "TFLOP/s",
            "target", "note"]
    head = (f"MatMulNBits int4 block 32, fp16; peak {args.peak_gbs:g} GB/s; "
            f"{'warm L2' if args.warm else f'L2 flushed ({args.flush_mib:g} MiB {args.flush})'}; "
            f"median of {args.iters}; route {args.route}")
    lines = [head, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="shapes: " + "; ".join(
                                     f"{n} K={k} N={m}" for n, k, m in SHAPES))
    ap.add_argument("--rows", default="1,128",
                    help="comma-separated rows of A (M) to time (default 1,128)")
    ap.add_argument("--shapes", default=",".join(n for n, _, _ in SHAPES),
                    help="comma-separated shape names to run (default all)")
    ap.add_argument("--iters", type=int, default=50,
                    help="timed calls per case; the median is reported (50)")
    ap.add_argument("--flush-mib", type=float, default=128,
                    help="MiB read (or copied) before each timed call to evict L2 (128)")
    ap.add_argument("--flush", choices=("read", "copy"), default="read",
                    help="evict L2 by reading --flush-mib (default: clean lines, as in a "
                         "model) or by copying them (dirty lines the kernel writes back)")
    ap.add_argument("--warm", action="store_true", help="do not flush L2 between calls")
    ap.add_argument("--route", choices=("auto", "gemv", "mma"), default="auto",
                    help="the decode route: as the kernel picks it (auto), the float32 gemv "
                         "wherever it applies, or the tensor-core gemv wherever it applies "
                         "(however few warps B keeps busy)")
    ap.add_argument("--peak-gbs", type=float, default=4800.0,
                    help="HBM bandwidth the share is of, GB/s (4800: H200)")
    ap.add_argument("--no-check", dest="check", action="store_false",
                    help="skip the parity check against cpu_reference")
    ap.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from onnx_ep.providers.cuda import driver

    support = driver.is_available()
    if not support:
        print(f"nbits.py: CUDA is unavailable here: {support.reason}; nothing was measured.",
              file=sys.stderr)
        return 2
    from cuda_kernels import Bench

    force_route(args.route)
    rows_m = [int(x) for x in args.rows.split(",") if x]
    names = set(args.shapes.split(","))
    bench = Bench(argparse.Namespace(size_mib=max(args.flush_mib, 1.0), iters=args.iters))
    rows: list[dict[str, Any]] = []
    try:
        args.flusher = Flush(bench, 0 if args.warm else int(args.flush_mib * MIB), args.flush)
        for name, k, n in SHAPES:
            if name not in names:
                continue
            for m in rows_m:
                try:
                    rows.append(bench_case(bench, name, k, n, m, args))
                except Exception as e:  # noqa: BLE001 - one failed case is a row, not the end
                    rows.append({"case": name, "K": k, "N": n, "M": m,
                                 "note": f"ERROR {type(e).__name__}: {e}"})
    finally:
        bench.close()
    print(json.dumps(rows, indent=2) if args.json else markdown(rows, args))
    return 1 if any(str(r.get("note", "")).startswith(("ERROR", "PARITY")) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
