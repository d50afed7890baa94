#!/usr/bin/env python3
"""Compile every CUDA source in onnx_ep/providers/cuda/kernels with NVRTC (no GPU needed).

``python scripts/check_kernels.py [--arch sm_90] [--load]`` prints one line per source and exits 1
when any fails, with the NVRTC log. Needs cuda-bindings and the NVRTC library
(``pip install 'nvidia-cuda-nvrtc==13.*'``). On a GPU machine ``--load`` compiles through the
on-disk cubin cache and loads each module on device 0, so later processes start warm.
"""

from __future__ import annotations

import argparse
import sys
import time

from onnx_ep.errors import NvrtcError
from onnx_ep.providers.cuda import nvrtc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--load", action="store_true",
                    help="compile through the disk cache and load on device 0 (needs a GPU)")
    ns = ap.parse_args()
    device = None
    if ns.load:
        from onnx_ep.providers.cuda.device import get_device

        device = get_device(0)
    failed = 0
    for path in sorted(nvrtc.KERNELS_DIR.glob("*.cu")):
        t0 = time.perf_counter()
        try:
            if device is not None:
                nvrtc.get_module(path.stem, device)
                cubin = b"(loaded)"
            else:
                cubin = nvrtc.compile_cubin(path.read_text(), path.name,
                                            nvrtc.full_options(ns.arch), ns.arch)
        except NvrtcError as exc:
            failed += 1
            print(f"FAIL {path.name}\n{exc.log or exc}")
            continue
        print(f"ok   {path.name}: {len(cubin):,} bytes cubin in "
              f"{(time.perf_counter() - t0) * 1e3:.0f} ms")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
