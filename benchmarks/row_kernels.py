#!/usr/bin/env python3
"""Tuning sweep of the fast Softmax / LayerNormalization row kernels on the GPU.

Section 3 of ``cuda_kernels.py`` (rows of 4096, 256 MiB, float32 / float16 / bfloat16)
under several configurations side by side in one run: each case's Session is built once,
then for every configuration the module knobs of ``onnx_ep.providers.cuda.kernels.softmax``
are set, the session runs once (its output checked against float64 numpy under the
kernel's promise) and the kernel step is timed (CUDA events, median of --iters) as a share
of the device-to-device copy measured first.

A configuration is ``key=value`` pairs joined by commas:

* ``stages``: PIPE_STAGES (0: the direct kernels; 2-4: pipelined through shared memory);
* ``shared``: PIPE_SHARED_BYTES in KiB;
* ``values``: FAST_VALUES, the row values each thread aims to hold.

A knob a configuration leaves out keeps softmax.py's value.

Usage::

    python benchmarks/row_kernels.py [--configs "stages=2 stages=0 stages=3,values=16"]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

try:
    import onnx_ep  # noqa: F401
except ImportError:     # run from a checkout without installing: use the repository's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuda_kernels import (
    BF16,
    F16,
    F32,
    SHORT,
    Bench,
    KernelStep,
    bench_copy,
    layernorm_case,
    softmax_case,
)

DEFAULT_CONFIGS = ("stages=2 stages=0 stages=3 stages=4,shared=64 stages=2,shared=96 "
                   "stages=2,values=16 stages=0,values=16")


def defaults() -> dict[str, int]:
    """The knobs as softmax.py ships them (read before any configuration is applied)."""
    from onnx_ep.providers.cuda.kernels import softmax

    return {"stages": softmax.PIPE_STAGES, "shared": softmax.PIPE_SHARED_BYTES // 1024,
            "values": softmax.FAST_VALUES}


def parse_config(text: str, base: dict[str, int]) -> dict[str, int]:
    out = dict(base)
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in out:
            raise SystemExit(f"unknown knob {key!r} in {text!r}; known: {', '.join(out)}")
        out[key] = int(value)
    return out


def apply(config: dict[str, int]) -> None:
    from onnx_ep.providers.cuda.kernels import softmax

    softmax.PIPE_STAGES = config["stages"]
    softmax.PIPE_SHARED_BYTES = config["shared"] * 1024
    softmax.FAST_VALUES = config["values"]


def describe(dtype: Any, rows: int, cols: int) -> str:
    """Which kernel the current settings run at this shape, and its grid."""
    from onnx_ep.providers.cuda import nvrtc
    from onnx_ep.providers.cuda.device import get_device
    from onnx_ep.providers.cuda.kernels import softmax
    from onnx_ep.providers.cuda.kernels.base import suffix
    from onnx_ep.providers.cuda.launch import max_active_blocks

    fr = softmax.fast_rows(rows, cols, 16 // dtype.itemsize, dtype)
    if fr is None:
        return "multi-pass"
    device = get_device(0)
    fn, grid, stages = softmax.fast_rows_kernel(
        fr, lambda infix: nvrtc.get_function("softmax", f"softmax_{infix}_{suffix(dtype)}",
                                             device), device)
    threads = f"{fr.block[0]}x{fr.block[1]} thr, {grid[0]} blocks"
    if not stages:
        return f"{fr.direct_infix} {threads}"
    per_sm = max_active_blocks(fn, fr.block[0] * fr.block[1], fr.shared_bytes)
    return f"{fr.pipe_infix} x{stages} {threads} ({per_sm}/SM), {fr.shared_bytes // 1024} KiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default=DEFAULT_CONFIGS,
                    help="space-separated configurations (see the module docstring)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per cell (20)")
    ap.add_argument("--size-mib", type=float, default=256, help="input size, MiB (256)")
    args = ap.parse_args(argv)
    from onnx_ep.providers.cuda import driver

    support = driver.is_available()
    if not support:
        print(f"row_kernels.py: CUDA is unavailable here: {support.reason}", file=sys.stderr)
        return 2
    shipped = defaults()
    configs = [(c, parse_config(c, shipped)) for c in args.configs.split()]
    b = Bench(argparse.Namespace(size_mib=args.size_mib, iters=args.iters))
    bench_copy(b)
    print(f"copy: {b.copy_gbs:,.0f} GB/s ({args.size_mib:g} MiB)", flush=True)
    cases = [(f"Softmax {SHORT[dt]}", softmax_case, dt) for dt in (F32, F16, BF16)]
    cases += [(f"LayerNorm {SHORT[dt]}", layernorm_case, dt) for dt in (F32, F16, BF16)]
    table: dict[str, dict[str, str]] = {c: {} for c, _ in configs}
    bad = 0
    try:
        for label, make, dt in cases:
            model, feeds, moved, check = make(b, dt)
            rows, cols = feeds["x"].shape
            k = KernelStep(model, feeds)
            try:
                for text, config in configs:
                    apply(config)
                    t0 = time.perf_counter()
                    try:
                        note = check(k.session.run(None, feeds))
                    except Exception as e:  # noqa: BLE001 - a cell's failure is its result
                        bad += 1
                        table[text][label] = "ERROR"
                        print(f"{label:16s} {text:24s} ERROR {type(e).__name__}: {e}", flush=True)
                        continue
                    ms = statistics.median(b.gpu_ms(k, k.stream))
                    share = 100 * moved / (ms * 1e-3) / 1e9 / b.copy_gbs
                    ok = note.startswith("output checked")
                    bad += not ok
                    table[text][label] = f"{share:.1f} %" + ("" if ok else " BROKEN")
                    print(f"{label:16s} {text:24s} {share:5.1f} % of copy  {ms * 1e3:8.1f} us  "
                          f"[{describe(dt, rows, cols)}] {note} "
                          f"({time.perf_counter() - t0:.1f} s)", flush=True)
            finally:
                k.close()
    finally:
        apply(shipped)
        b.close()
    labels = [label for label, _, _ in cases]
    print("\n| configuration | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(labels))
    for text, _ in configs:
        print(f"| `{text}` | " + " | ".join(table[text].get(c, "-") for c in labels) + " |")
    print(f"\ncells whose output broke the promise: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
