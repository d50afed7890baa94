"""Session: load -> graph -> placement -> plan (cached per shape signature) -> run.

The onnxruntime-shaped entry point: ``Session(model, providers).run(None, feeds)``.
This module only glues the rooms together; graph building, placement,
planning, execution and memory live in their own modules.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import onnx

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.executor import Executor
from onnx_ep.core.graph import Graph, Value, build_graph, load_model
from onnx_ep.core.kernel import TensorSpec, WorkspaceLifetime, WorkspaceView
from onnx_ep.core.options import RunOptions, SessionOptions
from onnx_ep.core.placement import place
from onnx_ep.core.planner import (
    ExecutionPlan,
    Program,
    build_program,
    infer_specs,
    light_model_for_inference,
    plan_signature,
)
from onnx_ep.errors import FeedError, OnnxEpWarning, ProviderUnavailable
from onnx_ep.plugins.manager import Runtime, runtime_for

log = logging.getLogger("onnx_ep")


@attrs.frozen
class NodeArg:
    """A model input or output as onnxruntime describes it."""

    name: str
    shape: list[Any]
    type: str


def resolve_providers(requested: Sequence[str] | None, runtime: Runtime) -> list[str]:
    """Validate ``requested`` against the registry; ``None`` means all available, best first.

    :raises ProviderUnavailable: for an unknown or unavailable provider.
    """
    reg = runtime.registry
    available = reg.available()
    if requested is None:
        return available
    out: list[str] = []
    for name in requested:
        if not isinstance(name, str):
            # onnxruntime also accepts (name, options) tuples
            name = name[0]
        prov = reg.providers.get(name)
        if prov is None:
            hint = ("install the CUDA extra (pip install 'onnx-ep[cuda]') on a machine with "
                    "an NVIDIA GPU" if name == "cuda" else
                    "check the spelling, or install the plugin that provides it")
            raise ProviderUnavailable(name, f"no such provider is registered; {hint}",
                                      available)
        verdict = prov.is_available()
        if not verdict:
            raise ProviderUnavailable(name, verdict.reason, available)
        if name not in out:
            out.append(name)
    if not out:
        raise ProviderUnavailable("", "providers= is empty", available)
    return out


class Session:
    """Run an ONNX model through execution providers.

    :param model: a path (external data is read from beside it), serialized
        bytes or an ``onnx.ModelProto``.
    :param providers: provider names in priority order; ``None`` picks every
        available provider, best first (``cuda`` when present, else
        ``cpu_reference``). Nodes fall back provider by provider.
    :param options: a :class:`SessionOptions` (see ``SessionOptions.from_toml``).
    :param plugins: in-process plugin objects (mostly for tests).
    :raises ModelError: malformed model. :raises ProviderUnavailable:
    :raises NoKernelError: a node no provider can run. :raises PluginError:
    """

    def __init__(self, model: str | os.PathLike[str] | bytes | onnx.ModelProto,
                 providers: Sequence[str] | None = None,
                 options: SessionOptions | None = None,
                 plugins: Sequence[Any] = ()) -> None:
        self.options = options or SessionOptions()
        log.setLevel(self.options.log_level.upper())
        self._runtime = runtime_for(plugins)
        self._runtime.check()
        self._providers = resolve_providers(
            providers if providers is not None else self.options.providers, self._runtime)
        proto = load_model(model)
        self._graph: Graph = build_graph(proto)
        self._light = light_model_for_inference(proto)
        self._executor = Executor(self._runtime.registry, self._providers)
        self._program: Program = build_program(
            self._graph, place(self._graph, self._runtime.registry, self._providers))
        self._plans: dict[tuple[Any, ...], ExecutionPlan] = {}
        self._lock = threading.Lock()
        self._ws_pool: dict[tuple[Any, ...], list[np.ndarray]] = {}
        self._persistent_ws: dict[tuple[Any, ...], np.ndarray] = {}
        self._input_values: list[Value] = list(self._graph.inputs)
        self._input_index = {v.name: i for i, v in enumerate(self._input_values)}
        self._output_index = {v.name: i for i, v in enumerate(self._graph.outputs)}
        self.stats: dict[str, int] = {"plans": 0, "runs": 0, "plan_cache_hits": 0}
        log.info("session: %d nodes on %s", len(self._graph.nodes),
                 self._program.placement.count_by_provider())
        self._notify("onnx_ep_session_created", session=self)

    # ---------------------------------------------------------------- metadata
    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs (initializers excluded), onnxruntime-style."""
        return [_node_arg(v) for v in self._input_values]

    def get_outputs(self) -> list[NodeArg]:
        return [_node_arg(v) for v in self._graph.outputs]

    def get_providers(self) -> list[str]:
        """Providers this session may use, in priority order."""
        return list(self._providers)

    @property
    def graph(self) -> Graph:
        return self._graph

    def placement_summary(self) -> dict[str, int]:
        """Number of nodes each provider runs."""
        return self._program.placement.count_by_provider()

    # ---------------------------------------------------------------- run
    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """Run the model and return the requested outputs (all when ``output_names`` is None).

        :raises FeedError: a missing/extra feed, wrong dtype or wrong shape,
            naming the input, what was expected and what was given.
        :raises RunCancelled: ``run_options.terminate`` was set.
        """
        t0 = time.perf_counter()
        arrays, signature = self._bind_feeds(feeds)
        plan = self._plans.get(signature)
        planned = plan is None
        if plan is None:
            plan = self._plan(signature, arrays)
        else:
            self.stats["plan_cache_hits"] += 1
        want = self._output_positions(output_names)
        workspaces, step_buf = self._take_workspaces(plan)
        cancel = (lambda: run_options.terminate) if run_options is not None else None
        try:
            outs = self._executor.run(plan.program, arrays, workspaces=workspaces,
                                      cancel=cancel)
        finally:
            self._give_back(plan, step_buf)
        self.stats["runs"] += 1
        result = [outs[i] for i in want]
        self._notify("onnx_ep_run_finished", session=self,
                     stats={"seconds": time.perf_counter() - t0, "planned": planned,
                            "signature": signature})
        return result

    # ---------------------------------------------------------------- internals
    def _bind_feeds(self, feeds: Mapping[str, Any]) -> tuple[list[Any], tuple[Any, ...]]:
        if not isinstance(feeds, Mapping):
            raise FeedError(f"feeds must be a dict of input name -> numpy array, got "
                            f"{type(feeds).__name__}")
        arrays: list[Any] = [None] * len(self._input_values)
        for name, value in feeds.items():
            idx = self._input_index.get(name)
            if idx is None:
                known = ", ".join(self._input_index) or "none"
                raise FeedError(f"unknown input {name!r}; the model's inputs are: {known}",
                                input_name=name)
            arrays[idx] = value
        sig: list[Any] = []
        for v, a in zip(self._input_values, arrays):
            if a is None:
                raise FeedError(f"missing feed for input {v.name!r} (expected "
                                f"{_describe(v)})", input_name=v.name,
                                expected=_describe(v))
            if isinstance(a, np.ndarray):
                sig.append((a.dtype, a.shape))
            else:
                sig.append((type(a), None))
        signature = tuple(sig)
        if signature not in self._plans:
            self._validate(arrays)
        return arrays, signature

    def _validate(self, arrays: list[Any]) -> None:
        bound: dict[str, tuple[int, str]] = {}
        for v, a in zip(self._input_values, arrays):
            expected = _describe(v)
            if v.kind in ("tensor", "unknown") and not isinstance(a, np.ndarray):
                raise FeedError(f"input {v.name!r} expects a numpy array ({expected}), got "
                                f"{type(a).__name__}; wrap it with np.asarray(..., dtype=...)",
                                input_name=v.name, expected=expected, got=type(a).__name__)
            if not isinstance(a, np.ndarray) or not v.elem_type:
                continue
            want_dt = np_dtype(v.elem_type)
            if a.dtype != want_dt and not (want_dt == np.dtype(object) and a.dtype.kind in "OUS"):
                raise FeedError(f"input {v.name!r} expects dtype {want_dt} ({v.type_str}), "
                                f"got {a.dtype}", input_name=v.name, expected=expected,
                                got=f"{a.dtype}{list(a.shape)}")
            if v.spec is None:
                continue
            shape = v.spec.shape
            if len(shape) != a.ndim:
                raise FeedError(f"input {v.name!r} expects rank {len(shape)} "
                                f"(shape {_shape_str(shape)}), got rank {a.ndim} "
                                f"(shape {list(a.shape)})", input_name=v.name,
                                expected=expected, got=f"{a.dtype}{list(a.shape)}")
            for axis, (want, got) in enumerate(zip(shape, a.shape)):
                if isinstance(want, int) and want != got:
                    raise FeedError(f"input {v.name!r} expects dim {axis} = {want} (shape "
                                    f"{_shape_str(shape)}), got {got} (shape {list(a.shape)})",
                                    input_name=v.name, expected=expected,
                                    got=f"{a.dtype}{list(a.shape)}")
                if isinstance(want, str):
                    prev = bound.setdefault(want, (got, v.name))
                    if prev[0] != got:
                        raise FeedError(
                            f"input {v.name!r} dim {axis} is symbolic {want!r} = {got}, but "
                            f"input {prev[1]!r} bound {want!r} = {prev[0]}; inputs sharing a "
                            f"symbolic dim must agree", input_name=v.name, expected=expected,
                            got=f"{a.dtype}{list(a.shape)}")

    def _plan(self, signature: tuple[Any, ...], arrays: list[Any]) -> ExecutionPlan:
        with self._lock:
            plan = self._plans.get(signature)
            if plan is not None:
                return plan
            specs_in = [TensorSpec(a.dtype, a.shape) if isinstance(a, np.ndarray) else None
                        for a in arrays]
            if all(s is not None for s in specs_in):
                specs = infer_specs(self._light, self._graph, specs_in)  # type: ignore[arg-type]
            else:
                specs = infer_specs(None, self._graph, [])
            plan = plan_signature(self._program, signature, specs)
            self._plans[signature] = plan
            self.stats["plans"] += 1
            log.debug("planned signature %s: workspace step=%d session=%d", signature,
                      plan.workspace.step_peak, plan.workspace.session_peak)
            return plan

    def _take_workspaces(self, plan: ExecutionPlan) -> tuple[list[WorkspaceView | None] | None,
                                                             np.ndarray | None]:
        ws = plan.workspace
        if ws.total == 0:
            return None, None
        with self._lock:
            pool = self._ws_pool.setdefault(plan.signature, [])
            step_buf = pool.pop() if pool else np.empty(ws.step_peak, np.uint8)
            persistent = self._persistent_ws.get(plan.signature)
            if persistent is None and ws.session_peak:
                persistent = self._persistent_ws[plan.signature] = np.empty(
                    ws.session_peak, np.uint8)
        views: list[WorkspaceView | None] = []
        for req in ws.per_step:
            if req.nbytes == 0:
                views.append(None)
            elif req.lifetime is WorkspaceLifetime.SESSION_PERSISTENT:
                views.append(WorkspaceView(persistent, req.nbytes, req.lifetime))
            else:
                views.append(WorkspaceView(step_buf, req.nbytes, req.lifetime))
        return views, step_buf

    def _give_back(self, plan: ExecutionPlan, step_buf: np.ndarray | None) -> None:
        if step_buf is not None:
            with self._lock:
                self._ws_pool.setdefault(plan.signature, []).append(step_buf)

    def _output_positions(self, output_names: Sequence[str] | None) -> list[int]:
        if output_names is None:
            return list(range(len(self._graph.outputs)))
        if isinstance(output_names, str):
            output_names = [output_names]
        pos = []
        for n in output_names:
            i = self._output_index.get(n)
            if i is None:
                known = ", ".join(self._output_index)
                raise FeedError(f"unknown output {n!r}; the model's outputs are: {known}")
            pos.append(i)
        return pos

    def _notify(self, hook: str, **kwargs: Any) -> None:
        impls = getattr(self._runtime.pm.hook, hook)
        if not impls.get_hookimpls():
            return
        try:
            impls(**kwargs)
        except Exception as exc:  # observers must not break runs
            import warnings
            warnings.warn(f"{hook} observer raised {type(exc).__name__}: {exc}",
                          OnnxEpWarning, stacklevel=3)


def _shape_str(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _describe(v: Value) -> str:
    if v.spec is None:
        return v.type_str or "any value"
    return f"{v.type_str} {_shape_str(v.spec.shape)}"


def _node_arg(v: Value) -> NodeArg:
    shape = [d for d in v.spec.shape] if v.spec is not None else []
    return NodeArg(v.name, shape, v.type_str)
