"""First run of a model on a machine whose kernel cache is empty, with and without the
prebuilt cubins, against a warm start.

``python benchmarks/first_run.py [MODEL.onnx] [--provider cuda] [--modes prebuilt,cold,warm]
[--batch 1 --seq 16] [--timeout 600] [--json PATH]``

Without MODEL it runs the demo transformer (``onnx_ep.demo.build_demo_model``, built in
memory); a model file gets random feeds (as ``onnx-ep run --random-inputs``). Every mode is
a fresh Python process (imports, ``Session(...)``, one ``run``), so nothing an earlier mode
loaded helps it:

- ``prebuilt``: ``ONNX_EP_CACHE_DIR`` a new empty directory; the cubins shipped in the
  wheel (``onnx_ep/providers/cuda/prebuilt/``) are used: a user's first run after install;
- ``cold``: another new empty directory and ``ONNX_EP_PREBUILT=0``: every kernel family
  compiles with NVRTC (what a source checkout, or an unshipped architecture, costs);
- ``warm``: a second process on the ``prebuilt`` mode's directory: every later start.

It prints each mode's Session creation and first-run seconds with the kernel counters
(``nvrtc.compile_stats()``: compiles, NVRTC seconds, prebuilt and disk-cache hits, modules
loaded), then each mode's difference from warm; the goal is a prebuilt first run within
5 s of a warm one. ``--provider cuda`` (the default) needs a GPU; ``cpu_reference`` runs
anywhere (and compiles nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("prebuilt", "cold", "warm")
#: how much slower than warm a prebuilt first run may be
TARGET_S = 5.0


def measure(model: str | None, provider: str, batch: int, seq: int) -> dict[str, Any]:
    """Import onnx-ep, create a Session and run it once, in this process; seconds and
    counters. ``model`` None is the demo transformer."""
    t0 = time.perf_counter()
    import onnx_ep
    from onnx_ep.providers.cuda import nvrtc
    import_s = time.perf_counter() - t0

    feeds: dict[str, Any]
    if model is None:
        from onnx_ep.demo import build_demo_model, demo_feeds

        source: Any = build_demo_model()
        feeds = dict(demo_feeds(batch=batch, seq=seq))
    else:
        source, feeds = model, {}
    providers = [provider] if provider == "cpu_reference" else [provider, "cpu_reference"]
    nvrtc.reset_compile_stats()
    t0 = time.perf_counter()
    sess = onnx_ep.Session(source, providers=providers)
    session_s = time.perf_counter() - t0
    if not feeds:
        from onnx_ep.cli import _random_inputs

        feeds = _random_inputs(sess.graph, {}, 0, skip=[])
    t0 = time.perf_counter()
    sess.run(None, feeds)
    run_s = time.perf_counter() - t0
    stats = nvrtc.compile_stats()
    placement = sess.placement_summary()
    sess.close()
    return {"import_s": import_s, "session_s": session_s, "run_s": run_s,
            "first_run_s": session_s + run_s, "stats": stats, "placement": placement,
            "prebuilt_shipped": len(nvrtc.prebuilt_manifest())}


def run_mode(mode: str, cache_root: str, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`measure` in a new process with ``ONNX_EP_CACHE_DIR=cache_root`` and the
    prebuilt cubins on (``prebuilt``, ``warm``) or off (``cold``)."""
    env = dict(os.environ, ONNX_EP_CACHE_DIR=cache_root, PYTHONUNBUFFERED="1")
    env.pop("ONNX_EP_PREBUILT", None)
    if mode == "cold":
        env["ONNX_EP_PREBUILT"] = "0"
    spec = json.dumps({"model": args.model, "provider": args.provider, "batch": args.batch,
                       "seq": args.seq})
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", spec],
                          check=False, env=env, capture_output=True, text=True,
                          timeout=args.timeout)
    wall = time.perf_counter() - t0
    lines = proc.stdout.strip().splitlines()
    try:
        res = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
        raise RuntimeError(f"{mode} child exited {proc.returncode}:\n" + "\n".join(tail)) \
            from None
    return dict(res, mode=mode, process_s=wall)


def report(results: dict[str, dict[str, Any]]) -> str:
    """The table of ``{mode: run_mode result}`` and each mode's difference from warm."""
    warm = results.get("warm")
    head = (f"{'mode':<10}{'session s':>10}{'run s':>8}{'first s':>9}{'vs warm':>9}"
            f"{'compiles':>10}{'NVRTC s':>9}{'prebuilt':>10}{'cached':>8}{'loads':>7}"
            f"{'process s':>11}")
    lines = [head]
    for mode in MODES:
        r = results.get(mode)
        if r is None:
            continue
        s = r["stats"]
        diff = f"{r['first_run_s'] - warm['first_run_s']:+.2f}" if warm else "-"
        lines.append(f"{mode:<10}{r['session_s']:>10.2f}{r['run_s']:>8.2f}"
                     f"{r['first_run_s']:>9.2f}{diff:>9}{int(s['compiles']):>10}"
                     f"{s['compile_seconds']:>9.1f}{int(s.get('prebuilt_hits', 0)):>10}"
                     f"{int(s['cache_hits']):>8}{int(s['loads']):>7}{r['process_s']:>11.2f}")
    if warm:
        for mode in ("prebuilt", "cold"):
            if mode in results:
                d = results[mode]["first_run_s"] - warm["first_run_s"]
                verdict = (f" (goal <= {TARGET_S:.0f} s: {'met' if d <= TARGET_S else 'missed'})"
                           if mode == "prebuilt" else "")
                lines.append(f"{mode} first run: {d:+.2f} s vs warm{verdict}")
    any_r = next(iter(results.values()), None)
    if any_r is not None:
        lines.append(f"placement {any_r['placement']}; prebuilt cubins shipped: "
                     f"{any_r['prebuilt_shipped']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("model", nargs="?", default=None,
                    help="ONNX model file (default: the demo transformer, built in memory)")
    ap.add_argument("--provider", default="cuda", help="provider to run on (default: cuda)")
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated subset of {','.join(MODES)} (default: all)")
    ap.add_argument("--batch", type=int, default=1, help="demo model batch (default: 1)")
    ap.add_argument("--seq", type=int, default=16, help="demo model sequence (default: 16)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds each process may take (default: 600)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child is not None:
        spec = json.loads(args.child)
        print(json.dumps(measure(spec["model"], spec["provider"], spec["batch"], spec["seq"])))
        return 0
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if bad := [m for m in modes if m not in MODES]:
        ap.error(f"unknown mode(s) {', '.join(bad)}; choose from {', '.join(MODES)}")
    if args.model is not None:
        args.model = str(Path(args.model).resolve())

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="onnx-ep-first-run-") as tmp:
        shipped = str(Path(tmp) / "prebuilt")
        # the slow cold compile goes last, so a timeout there still leaves the main result
        order = [m for m in ("prebuilt", "warm", "cold") if m in modes]
        for mode in order:
            root = str(Path(tmp) / "cold") if mode == "cold" else shipped
            if mode == "warm" and "prebuilt" not in results:
                run_mode("prebuilt", root, args)      # fill the cache the warm run reads
            print(f"[first_run] {mode}...", file=sys.stderr, flush=True)
            try:
                results[mode] = run_mode(mode, root, args)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"[first_run] {mode} failed: {e}", file=sys.stderr)
                return 2
    print(f"first run of {args.model or 'the demo transformer'} on {args.provider}, "
          f"each in a new process with an empty kernel cache (warm: the second process)")
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
