#!/usr/bin/env python3
"""Build the prebuilt cubins the wheel ships: every kernels/*.cu for each architecture.

``python scripts/build_cubins.py [--arch sm_90 --arch sm_80 ...] [--source NAME ...]
[--jobs N] [--out DIR]`` compiles with NVRTC (no GPU needed) into
``onnx_ep/providers/cuda/prebuilt/`` and writes ``manifest.json`` beside the cubins: for
each, its source, arch, :func:`~onnx_ep.providers.cuda.nvrtc.prebuilt_key`, NVRTC version
and size. Run it before building the wheel (``pyproject.toml`` packages what it writes).

Default architectures: sm_80, sm_86, sm_89, sm_90, sm_100 and sm_120, less those the
installed NVRTC does not support (``nvrtcGetSupportedArchs``). Cubins of other
architectures already in the directory stay when their key still matches the source;
a cubin the manifest does not list (a stale one) is deleted.

Needs cuda-bindings and the NVRTC library, which is not an onnx-ep requirement:
``pip install cuda-bindings nvidia-cuda-nvrtc`` (or the one ``cuda-bindings[all]`` pulls
in). Exits 1 when a source fails to compile (its log is printed), 2 for an architecture
the NVRTC cannot build.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # build this checkout's sources

from onnx_ep.errors import NvrtcError  # noqa: E402
from onnx_ep.providers.cuda import nvrtc  # noqa: E402

#: what a wheel covers: Ampere (A100, A10/RTX 30), Ada (L4/L40, RTX 40), Hopper,
#: Blackwell datacenter and consumer cards
DEFAULT_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")


def supported_archs() -> list[str]:
    """The real architectures the installed NVRTC can compile for."""
    archs = nvrtc._check(nvrtc.nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return [f"sm_{int(a)}" for a in archs]


def build_one(source: Path, arch: str, out: Path, headers: dict[str, bytes],
              version: str) -> dict[str, Any]:
    """Compile ``source`` for ``arch`` into ``out``; its manifest entry (plus ``seconds``),
    or ``{"error": log}``."""
    text = source.read_text()
    opts = nvrtc.full_options(arch)
    key = nvrtc.prebuilt_key(text, opts, arch, headers)
    t0 = time.perf_counter()
    try:
        cubin = nvrtc.compile_cubin(text, source.name, opts, arch)
    except NvrtcError as exc:
        return {"source": source.name, "arch": arch, "error": exc.log or str(exc)}
    seconds = time.perf_counter() - t0
    file = nvrtc.prebuilt_file(source.name, arch, key)
    _write(out / file, cubin)
    return {"file": file, "source": source.name, "arch": arch, "key": key, "nvrtc": version,
            "bytes": len(cubin), "seconds": round(seconds, 3)}


def _write(path: Path, data: bytes) -> None:
    # temporary file and rename: a reader never sees half a cubin
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)   # mkstemp's 0600 would install unreadable for other users
    os.replace(tmp, path)


def still_valid(out: Path, headers: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    """Entries of an existing manifest in ``out`` whose cubin is there and whose key still
    matches the current source (another architecture's build, kept)."""
    try:
        old = json.loads((out / nvrtc.PREBUILT_MANIFEST).read_text())["cubins"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    keep = {}
    for file, e in old.items():
        try:
            text = (nvrtc.KERNELS_DIR / e["source"]).read_text()
            key = nvrtc.prebuilt_key(text, nvrtc.full_options(e["arch"]), e["arch"], headers)
        except (OSError, KeyError, TypeError):
            continue
        if key == e.get("key") and (out / file).is_file():
            keep[file] = e
    return keep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", default=None,
                    help="sm_XX to build for (repeatable); default: "
                         f"{', '.join(DEFAULT_ARCHS)} where the NVRTC supports them")
    ap.add_argument("--source", action="append", default=None,
                    help="kernels/<NAME>.cu to build (repeatable); default: every source")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="parallel NVRTC compiles (threads; default: CPU count)")
    ap.add_argument("--out", type=Path, default=nvrtc.PREBUILT_DIR,
                    help=f"output directory (default: {nvrtc.PREBUILT_DIR})")
    ns = ap.parse_args(argv)

    major, minor = nvrtc.nvrtc_version()
    version = f"{major}.{minor}"
    supported = supported_archs()
    if ns.arch:
        archs = list(dict.fromkeys(ns.arch))
        if bad := [a for a in archs if a not in supported]:
            print(f"NVRTC {version} cannot build {', '.join(bad)}; it supports "
                  f"{', '.join(supported)}", file=sys.stderr)
            return 2
    else:
        archs = [a for a in DEFAULT_ARCHS if a in supported]
    sources = sorted(nvrtc.KERNELS_DIR.glob("*.cu"))
    if ns.source:
        try:
            sources = [nvrtc.source_path(s) for s in dict.fromkeys(ns.source)]
        except FileNotFoundError as exc:
            print(exc, file=sys.stderr)
            return 2

    out: Path = ns.out
    out.mkdir(parents=True, exist_ok=True)
    headers = nvrtc.local_headers()
    jobs = [(src, arch) for arch in archs for src in sources]
    print(f"NVRTC {version}: {len(sources)} sources x {', '.join(archs)} "
          f"({len(jobs)} cubins) in {max(1, ns.jobs)} threads into {out}", flush=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, ns.jobs)) as pool:
        results = list(pool.map(lambda j: build_one(j[0], j[1], out, headers, version), jobs))
    wall = time.perf_counter() - t0

    failed = [r for r in results if "error" in r]
    built = {r.pop("file"): r for r in results if "error" not in r}
    seconds = {f: r.pop("seconds") for f, r in built.items()}
    rebuilt = {(s.name, a) for s, a in jobs}
    cubins = {f: e for f, e in still_valid(out, headers).items()
              if (e["source"], e["arch"]) not in rebuilt}
    cubins.update(built)
    _write(out / nvrtc.PREBUILT_MANIFEST,
           (json.dumps({"format": 1, "cubins": dict(sorted(cubins.items()))}, indent=1)
            + "\n").encode())
    stale = [p for p in out.glob("*.cubin") if p.name not in cubins]
    for p in stale:
        p.unlink()

    print(f"\n{'source':<22}{'arch':<8}{'bytes':>12}{'seconds':>10}")
    for f, e in sorted(built.items(), key=lambda fe: (fe[1]["arch"], fe[1]["source"])):
        print(f"{e['source']:<22}{e['arch']:<8}{e['bytes']:>12,}{seconds[f]:>10.1f}")
    for r in failed:
        print(f"{r['source']:<22}{r['arch']:<8}{'FAILED':>12}")
    total = sum(e["bytes"] for e in built.values())
    print(f"\nbuilt {len(built)} cubins, {total:,} bytes ({total / 2**20:.1f} MiB) in "
          f"{wall:.1f} s wall ({sum(seconds.values()):.1f} s of NVRTC); the manifest lists "
          f"{len(cubins)} cubins, {sum(e['bytes'] for e in cubins.values()):,} bytes"
          + (f"; deleted {len(stale)} stale" if stale else ""))
    for r in failed:
        print(f"\nFAIL {r['source']} for {r['arch']}:\n{r['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
