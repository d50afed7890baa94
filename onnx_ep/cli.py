"""The ``onnx-ep`` command: run a model, compare providers, list providers, run the demo,
generate tokens (``generate``: onnx_ep/genai/cli.py).

Errors raised by onnx-ep (:mod:`onnx_ep.errors`) print one ``error: ...`` line
on stderr and exit with status 2, like a usage error (with ``--json``, a JSON document
``{"error": type, "message": ...}`` on stdout instead); anything else is a bug and keeps
its traceback. Progress goes to stderr, results to stdout; ``--json`` prints one JSON
document and no progress. A reader that stops early (``| head``) ends the command quietly,
with status 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from onnx_ep.errors import FeedError, OnnxEpError

#: random integer inputs fall in [0, DEFAULT_INT_HIGH) unless they index a Gather table
DEFAULT_INT_HIGH = 10


# ---------------------------------------------------------------- shared: progress, outputs


class _Progress:
    """Progress lines on stderr, silent under --json; repeats are throttled to ~2 lines/s."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0

    def say(self, message: str) -> None:
        if self.enabled:
            print(message, file=sys.stderr, flush=True)

    def tick(self, i: int, n: int) -> None:
        now = time.perf_counter()
        if self.enabled and (i == n or now - self._last >= 0.5):
            self._last = now
            self.say(f"run {i}/{n}")


def _describe_output(name: str, value: Any) -> dict[str, Any]:
    """Name, shape, dtype, sha256 (first 16 hex digits of the C-order bytes) and float sum."""
    if not isinstance(value, np.ndarray):
        return {"name": name, "shape": None, "dtype": type(value).__name__,
                "sha256": hashlib.sha256(repr(value).encode()).hexdigest()[:16], "sum": None}
    arr = np.ascontiguousarray(value)
    data = repr(arr.tolist()).encode() if arr.dtype.kind in "OUS" else arr.tobytes()
    try:
        total: float | None = float(np.sum(arr, dtype=np.float64))
    except (TypeError, ValueError):
        total = None
    return {"name": name, "shape": list(arr.shape), "dtype": str(arr.dtype),
            "sha256": hashlib.sha256(data).hexdigest()[:16], "sum": total}


def _timed_runs(sess: Any, feeds: Mapping[str, Any], repeat: int,
                progress: _Progress) -> tuple[list[Any], dict[str, Any]]:
    """One first run (which plans this shape signature), then ``repeat`` timed runs."""
    progress.say("planning and first run...")
    t0 = time.perf_counter()
    outs = sess.run(None, feeds)
    first = time.perf_counter() - t0
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
        progress.tick(i + 1, repeat)
    timing: dict[str, Any] = {"first_run_ms": first * 1e3, "repeat": repeat}
    if times:
        timing["mean_ms"] = sum(times) / len(times) * 1e3
        timing["min_ms"] = min(times) * 1e3
    return outs, timing


def _result(sess: Any, outs: Sequence[Any], timing: dict[str, Any],
            load_s: float) -> dict[str, Any]:
    return {"providers": sess.get_providers(), "placement": sess.placement_summary(),
            "outputs": [_describe_output(o.name, v) for o, v in zip(sess.get_outputs(), outs)],
            "timings": {"load_ms": load_s * 1e3, **timing}}


def _print_result(res: dict[str, Any]) -> None:
    placement = ", ".join(f"{p}: {n}" for p, n in res["placement"].items())
    print(f"providers: {', '.join(res['providers'])} (nodes per provider: {placement})")
    for o in res["outputs"]:
        total = "n/a" if o["sum"] is None else f"{o['sum']:.6g}"
        print(f"output {o['name']}: shape {o['shape']} {o['dtype']} "
              f"sha256 {o['sha256']} sum {total}")
    t = res["timings"]
    print(f"load {t['load_ms']:.2f} ms; first run (incl. planning) {t['first_run_ms']:.2f} ms")
    if t["repeat"]:
        print(f"{t['repeat']} repeats: mean {t['mean_ms']:.3f} ms, min {t['min_ms']:.3f} ms")


def _open_session(model: Any, providers: list[str] | None,
                  progress: _Progress, options: Any = None) -> tuple[Any, float]:
    from onnx_ep import Session

    progress.say("loading and placing the model...")
    t0 = time.perf_counter()
    sess = Session(model, providers=providers or None, options=options)
    return sess, time.perf_counter() - t0


# ---------------------------------------------------------------- run


def _pair(text: str, what: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return name, value


def _input_arg(text: str) -> tuple[str, str]:
    return _pair(text, "NAME=FILE.npy")


def _dim_arg(text: str) -> tuple[str, int]:
    name, value = _pair(text, "NAME=INT")
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"--dim {name}: {value!r} is not a non-negative integer")
    return name, int(value)


def _load_inputs(pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    feeds: dict[str, Any] = {}
    for name, path in pairs:
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise FeedError(f"cannot read --input {name}={path}: {exc}; pass a .npy file "
                            f"written by numpy.save", input_name=name) from exc
    return feeds


def _gather_table_rows(graph: Any) -> dict[str, int]:
    """Inputs used as Gather indices into an initializer -> that table's size on the axis."""
    rows: dict[str, int] = {}
    for node in graph.nodes:
        if node.op_type == "Gather" and len(node.inputs) == 2:
            table = graph.initializers.get(node.inputs[0])
            if table is not None:
                axis = int(node.attrs.get("axis", 0))
                n = int(table.shape[axis])
                rows[node.inputs[1]] = min(n, rows.get(node.inputs[1], n))
    return rows


def _random_inputs(graph: Any, dims: Mapping[str, int], seed: int,
                   skip: Sequence[str]) -> dict[str, np.ndarray]:
    """A random array for every tensor input not in ``skip``; symbolic dims from ``dims`` or 1."""
    from onnx_ep.core.dtypes import np_dtype

    rng = np.random.default_rng(seed)
    table_rows = _gather_table_rows(graph)
    feeds: dict[str, np.ndarray] = {}
    for v in graph.inputs:
        if v.name in skip:
            continue
        if v.kind not in ("tensor", "unknown") or not v.elem_type:
            raise FeedError(f"--random-inputs cannot make a value for input {v.name!r} of type "
                            f"{v.type_str or 'unknown'}; pass it with --input", input_name=v.name)
        shape = tuple(d if isinstance(d, int) else dims.get(str(d), 1)
                      for d in (v.spec.shape if v.spec is not None else ()))
        dtype = np_dtype(v.elem_type)
        if dtype == np.bool_:
            feeds[v.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif dtype.kind in "iu":
            high = table_rows.get(v.name, DEFAULT_INT_HIGH)
            feeds[v.name] = rng.integers(0, high, size=shape).astype(dtype)
        elif dtype.kind in "OUS":
            feeds[v.name] = rng.integers(0, DEFAULT_INT_HIGH, size=shape).astype(str).astype(object)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _complete_feeds(graph: Any, feeds: dict[str, Any],
                    args: argparse.Namespace) -> dict[str, Any]:
    """``feeds`` checked against the graph's inputs and completed by --random-inputs."""
    known = {v.name for v in graph.inputs}
    if unknown := sorted(set(feeds) - known):
        raise FeedError(f"--input names unknown input(s) {', '.join(unknown)}; the model's "
                        f"inputs are: {', '.join(sorted(known)) or 'none'}",
                        input_name=unknown[0])
    if args.random_inputs:
        feeds.update(_random_inputs(graph, dict(args.dim), args.seed, skip=list(feeds)))
    elif missing := sorted(known - set(feeds)):
        raise FeedError(f"no value for input(s) {', '.join(missing)}; pass --input NAME=FILE.npy "
                        f"or --random-inputs")
    return feeds


def cmd_run(args: argparse.Namespace) -> int:
    from onnx_ep.core.options import PROFILE_PREFIX, SessionOptions
    from onnx_ep.core.report import capture_text

    progress = _Progress(not args.json)
    sess, load_s = _open_session(args.model, args.provider, progress, SessionOptions(
        capture=args.capture, profile=args.profile is not None,
        profile_prefix=args.profile or PROFILE_PREFIX))
    feeds = _complete_feeds(sess.graph, _load_inputs(args.input), args)
    outs, timing = _timed_runs(sess, feeds, args.repeat, progress)
    res = {"model": args.model, "inputs": [
        {"name": k, "shape": list(np.shape(v)), "dtype": str(getattr(v, "dtype", type(v)))}
        for k, v in feeds.items()], **_result(sess, outs, timing, load_s)}
    if args.capture_report:
        res["capture"] = sess.capture_report()
    if args.profile is not None:      # after the runs, so the trace holds every one of them
        res["profile"] = sess.end_profiling()
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for i in res["inputs"]:
            print(f"input {i['name']}: shape {i['shape']} {i['dtype']}")
        _print_result(res)
        if args.capture_report:
            print(capture_text(res["capture"]))
        if "profile" in res:
            print(f"profile: {res['profile']} (open it in Perfetto or chrome://tracing)")
    return 0


# ---------------------------------------------------------------- parity


def _provider_under_test(reference: str) -> str:
    """The best available provider other than ``reference`` (``cuda`` when present)."""
    from onnx_ep import available_providers
    from onnx_ep.errors import ProviderUnavailable

    available = available_providers()
    others = [p for p in available if p != reference]
    if not others:
        raise ProviderUnavailable("", f"no provider other than the reference {reference!r} "
                                  f"is available to compare; pass --provider", available)
    return others[0]


def cmd_parity(args: argparse.Namespace) -> int:
    import attrs

    from onnx_ep.core.graph import build_graph, load_model
    from onnx_ep.testing.parity import compare

    progress = _Progress(not args.json)
    if args.model is None:
        from onnx_ep.demo import build_demo_model, demo_feeds

        progress.say("building demo model...")
        model: Any = build_demo_model()
        feeds: dict[str, Any] = {} if args.random_inputs else dict(demo_feeds())
    else:
        model, feeds = load_model(args.model), {}
    feeds.update(_load_inputs(args.input))
    feeds = _complete_feeds(build_graph(model), feeds, args)
    provider = args.provider or _provider_under_test(args.reference)
    both = provider if provider == args.reference else f"{provider} and {args.reference}"
    progress.say(f"running on {both}{', comparing every node' if args.per_node else ''}...")
    report = compare(model, feeds, provider=provider, reference=args.reference,
                     per_node=args.per_node)
    if args.model is not None:
        report = attrs.evolve(report, model=args.model)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report)
    return 0 if report.ok else 1


# ---------------------------------------------------------------- resources


def cmd_resources(args: argparse.Namespace) -> int:
    from onnx_ep import Session, SessionOptions

    progress = _Progress(not args.json)
    if args.model is None:
        from onnx_ep.demo import build_demo_model, demo_feeds

        progress.say("building demo model...")
        model: Any = build_demo_model()
        feeds: dict[str, Any] = dict(demo_feeds())
    else:
        model, feeds = args.model, {}
    progress.say("loading and placing the model...")
    sess = Session(model, providers=args.provider or None,
                   options=SessionOptions(memory_limit=args.memory_limit))
    if not args.no_run:
        if not feeds:
            feeds = _random_inputs(sess.graph, dict(args.dim), args.seed, skip=[])
        progress.say("planning and running once...")
        sess.run(None, feeds)
    res = sess.resources()
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    mib = 1 << 20
    led = res["ledger"]
    print(f"device {res['device']}: budget {res['budget']:,} bytes "
          f"({res['budget'] / mib:.1f} MiB), committed {res['committed']:,}; the device's "
          f"pool {led['device_budget']:,}, committed by all sessions "
          f"{led['device_committed']:,}")
    pol = res["policy"]
    print(f"policy {pol['name']} (streaming {'on' if pol['streaming'] else 'off'}), "
          f"admission {res['admission']}; counters: "
          + ", ".join(f"{k} {v:,}" for k, v in pol["counters"].items()))
    print(f"weights {res['weights_bytes']:,} bytes; held by this session "
          f"{res['held_by_session']:,}")
    print("ledger by role: " + ", ".join(f"{k} {v:,}" for k, v in
                                         res["ledger"]["by_role"].items() if v))
    cache = res["plan_cache"]
    print(f"plans kept {cache['plans']} of at most {cache['max_plans']}, evicted "
          f"{cache['evictions']}")
    for p in res["plans"]:
        print(f"plan [{p['signature']}]: arena {p['arena_bytes']:,} (live-bytes peak "
              f"{p['activation_live_peak_bytes']:,}, naive sum {p['activation_naive_bytes']:,}), "
              f"workspace step {p['workspace_step_bytes']:,}, session "
              f"{p['workspace_session_bytes']:,}")
    return 0


# ---------------------------------------------------------------- providers


def providers_info() -> dict[str, Any]:
    """Providers (available or why not, and the plugin each came from), plugins, kernel
    counts, broken installed plugins and registration errors."""
    from onnx_ep.core.plugin_manager import default_plugins

    plugins = default_plugins()
    reg = plugins.registry
    counts = reg.kernel_counts()
    providers = []
    for p in sorted(reg.providers.values(), key=lambda p: -p.priority):
        verdict = p.is_available()
        providers.append({"name": p.name, "available": bool(verdict),
                          "reason": "" if verdict else verdict.reason, "device": p.device,
                          "priority": p.priority, "kernels": counts.get(p.name, 0),
                          "plugin": reg.provider_plugin(p.name), "description": p.description})
    broken = plugins.broken()
    return {"providers": providers, "plugins": list(plugins.plugin_names),
            "broken": [{"plugin": n, "reason": why} for n, why in broken.items()],
            "errors": [{"plugin": e.plugin, "message": str(e)} for e in plugins.errors]}


def cmd_providers(args: argparse.Namespace) -> int:
    info = providers_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for p in info["providers"]:
        state = "available" if p["available"] else f"unavailable: {p['reason']}"
        print(f"{p['name']:<16} {state}; {p['kernels']} kernels; device {p['device']}; "
              f"priority {p['priority']}; from plugin {p['plugin']}")
    print(f"plugins: {', '.join(info['plugins']) or 'none'}")
    for b in info["broken"]:
        print(f"broken plugin {b['plugin']} (disabled; leave it out with ONNX_EP_PLUGINS): "
              f"{b['reason']}")
    for e in info["errors"]:
        if e["plugin"] not in {b["plugin"] for b in info["broken"]}:
            print(f"registration error: {e['message']}")
    return 0


# ---------------------------------------------------------------- demo


def _compare_with_onnxruntime(model: Any, feeds: Mapping[str, np.ndarray],
                              outs: Sequence[np.ndarray]) -> dict[str, Any] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, dict(feeds))
    diff = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(outs, ref))
    return {"version": ort.__version__, "max_abs_diff": diff}


def cmd_demo(args: argparse.Namespace) -> int:
    from onnx_ep.demo import build_demo_model, demo_feeds

    progress = _Progress(not args.json)
    progress.say("building demo model...")
    model = build_demo_model(seq=max(args.seq, 16))
    sess, load_s = _open_session(model, args.provider, progress)
    feeds = demo_feeds(batch=args.batch, seq=args.seq)
    outs, timing = _timed_runs(sess, feeds, args.repeat, progress)
    res = {"model": "demo transformer (2 layers, d_model 64, 4 heads, vocab 256)",
           "inputs": [{"name": "input_ids", "shape": [args.batch, args.seq], "dtype": "int64"}],
           **_result(sess, outs, timing, load_s)}
    progress.say("comparing with onnxruntime CPU...")
    res["onnxruntime"] = _compare_with_onnxruntime(model, feeds, outs)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(res["model"])
    _print_result(res)
    ort_res = res["onnxruntime"]
    if ort_res is None:
        print("onnxruntime: not installed, comparison skipped")
    else:
        print(f"onnxruntime {ort_res['version']} CPU: max abs diff "
              f"{ort_res['max_abs_diff']:.3g}")
    return 0


# ---------------------------------------------------------------- parser


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    from onnx_ep import __version__

    parser = argparse.ArgumentParser(
        prog="onnx-ep", description="Run ONNX models through pluggable execution providers.",
        epilog="Errors print 'error: ...' on stderr and exit with status 2.")
    parser.add_argument("--version", action="version", version=f"onnx-ep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser, repeat: int) -> None:
        p.add_argument("--provider", action="append", default=[], metavar="P",
                       help="provider to use, in priority order (repeatable; default: every "
                            "available provider, best first)")
        p.add_argument("--repeat", type=_non_negative, default=repeat, metavar="N",
                       help=f"timed runs after the first run (default: {repeat})")
        p.add_argument("--json", action="store_true",
                       help="print one JSON document on stdout and no progress on stderr")

    run = sub.add_parser(
        "run", help="run a model and print each output's shape, dtype and checksum",
        description="Run MODEL and print, per output, its shape, dtype, the first 16 hex "
                    "digits of the sha256 of its bytes and its sum; then the load time, the "
                    "first run's time (which includes planning) and the mean/min of the "
                    "repeats.")
    run.add_argument("model", metavar="MODEL", help="path of an .onnx file")
    run.add_argument("--input", action="append", default=[], type=_input_arg,
                     metavar="NAME=FILE.npy", help="feed input NAME from a .npy file (repeatable)")
    run.add_argument("--random-inputs", action="store_true",
                     help="random values for inputs not given with --input: floats ~ N(0, 1); "
                          "integers in [0, rows) when they index a Gather table, else [0, "
                          f"{DEFAULT_INT_HIGH}); symbolic dims are 1 unless set with --dim")
    run.add_argument("--dim", action="append", default=[], type=_dim_arg, metavar="NAME=INT",
                     help="value of a symbolic dim for --random-inputs (repeatable)")
    run.add_argument("--seed", type=int, default=0, help="seed for --random-inputs (default: 0)")
    run.add_argument("--capture", choices=("auto", "off", "require"), default="auto",
                     help="CUDA-graph capture of device plans (default: auto; see "
                          "docs/CAPTURE.md)")
    run.add_argument("--capture-report", action="store_true",
                     help="print the capture report after the runs (with --json: its JSON)")
    run.add_argument("--profile", nargs="?", const="", metavar="PREFIX",
                     help="write a Chrome trace of the load and the runs (one event per node "
                          "run) to PREFIX_<date>_<time>.json and print its path (default "
                          "PREFIX: onnx_ep_profile; docs/PROFILING.md)")
    common(run, repeat=3)
    run.set_defaults(func=cmd_run)

    prov = sub.add_parser("providers", help="list providers, plugins and kernel counts",
                          description="List every registered provider (available, or why "
                                      "not), its kernel count, the loaded plugins and any "
                                      "plugin registration errors.")
    prov.add_argument("--json", action="store_true", help="print JSON")
    prov.set_defaults(func=cmd_providers)

    par = sub.add_parser(
        "parity", help="compare a provider with the reference; exit 1 on a broken promise",
        description="Run MODEL (the built-in demo transformer when omitted) on --provider "
                    "(nodes it cannot run fall back to --reference) and on --reference alone, "
                    "and print, per output, whether the bytes are equal, the max ULP, abs and "
                    "rel error, and whether the promise of the kernel that produced it holds. "
                    "--per-node also compares every node, fed the reference's inputs, and "
                    "names the first one that breaks its promise. Exit status: 0 when every "
                    "promise holds, 1 when one is broken, 2 on errors.")
    par.add_argument("model", metavar="MODEL", nargs="?", default=None,
                     help="path of an .onnx file (default: the demo transformer and its "
                          "token ids)")
    par.add_argument("--provider", default=None, metavar="P",
                     help="the provider under test (default: the best available provider "
                          "other than the reference)")
    par.add_argument("--reference", default="cpu_reference", metavar="R",
                     help="the provider to compare against (default: cpu_reference)")
    par.add_argument("--per-node", action="store_true",
                     help="compare every node and report the first that breaks its promise")
    par.add_argument("--input", action="append", default=[], type=_input_arg,
                     metavar="NAME=FILE.npy", help="feed input NAME from a .npy file (repeatable)")
    par.add_argument("--random-inputs", action="store_true",
                     help="random values for inputs not given with --input (as for 'run')")
    par.add_argument("--dim", action="append", default=[], type=_dim_arg, metavar="NAME=INT",
                     help="value of a symbolic dim for --random-inputs (repeatable)")
    par.add_argument("--seed", type=int, default=0, help="seed for --random-inputs (default: 0)")
    par.add_argument("--json", action="store_true",
                     help="print the report as one JSON document and no progress")
    par.set_defaults(func=cmd_parity)

    res = sub.add_parser(
        "resources", help="print the memory budget, ledger, plan sizes and policy",
        description="Load MODEL (the built-in demo transformer when omitted), run it once on "
                    "random inputs (unless --no-run) and print session.resources(): the "
                    "budget, committed bytes, the ledger by role, each plan's arena and "
                    "workspace sizes, and the memory policy with its counters.")
    res.add_argument("model", metavar="MODEL", nargs="?", default=None,
                     help="path of an .onnx file (default: the demo transformer)")
    res.add_argument("--memory-limit", type=_positive, default=None, metavar="BYTES",
                     help="memory budget in bytes (default: the device's free memory)")
    res.add_argument("--provider", action="append", default=[], metavar="P",
                     help="provider, in priority order (repeatable; default: best available)")
    res.add_argument("--no-run", action="store_true", help="only load; plan nothing")
    res.add_argument("--dim", action="append", default=[], type=_dim_arg, metavar="NAME=INT",
                     help="value of a symbolic dim for the random inputs (repeatable)")
    res.add_argument("--seed", type=int, default=0, help="seed for the random inputs")
    res.add_argument("--json", action="store_true", help="print JSON")
    res.set_defaults(func=cmd_resources)

    demo = sub.add_parser(
        "demo", help="run the built-in demo transformer (no download)",
        description="Build a small transformer in memory (onnx_ep.demo), run it like 'run' "
                    "does and, when onnxruntime is importable, print the max abs difference "
                    "from onnxruntime CPU.")
    demo.add_argument("--batch", type=_positive, default=1, help="batch size (default: 1)")
    demo.add_argument("--seq", type=_positive, default=16,
                      help="sequence length (default: 16); above 16 the model is built with "
                           "that many positions, so its weights differ")
    common(demo, repeat=10)
    demo.set_defaults(func=cmd_demo)
    from onnx_ep.genai.cli import add_parser as add_generate

    add_generate(sub, _positive)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``onnx-ep``; returns the exit status."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        status = func(args)
        sys.stdout.flush()          # a closed pipe raises here, inside this try
        return status
    except OnnxEpError as exc:
        if getattr(args, "json", False):
            # a --json caller parses stdout: the error is a JSON document there too
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
            return 2
        first, *rest = str(exc).strip().splitlines() or [type(exc).__name__]
        print(f"error: {first}", file=sys.stderr)
        for line in rest:   # e.g. an NVRTC compiler log
            print(f"  {line}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (``onnx-ep providers | head -1``): what it wanted it got.
        # Point stdout at devnull so the interpreter's last flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
