"""A static audit of the capture contract: no GPU, no launch, only the kernels' source.

A kernel whose ``capture_support()`` answers :data:`CaptureSupport.SUPPORTED` is recorded
into a CUDA graph with the rest of its segment. While a stream captures, the driver
refuses a synchronize, an allocation, a free or a synchronous copy and invalidates the
capture, and an asynchronous copy from or to host memory is refused (pageable) or
recorded with its host pointer and replayed against whatever that memory holds then.
So such a kernel must do none of these on its execute path (docs/CAPTURE.md).

:func:`audit_capture` reads each audited class's ``execute_with_workspace`` with
:mod:`ast` and follows the calls it makes (``self.m()``, ``super().m()``, module
functions ``f()`` and ``mod.f()`` of ``onnx_ep`` and of the kernel's own package, up to
:data:`MAX_DEPTH` calls deep) looking for the calls in :data:`FORBIDDEN`. A call in the
body of ``if not ....is_capturing():`` (or the ``else`` of ``if ....is_capturing():``,
or after ``if ....is_capturing(): raise``) is guarded and allowed, and a function marked
:func:`~onnx_ep.core.kernel.uncaptured_route` is skipped. The classes a kernel's
``bind()`` constructs are audited too: they are what the session runs.

It is a static check by name: calls through other objects' attributes
(``self.pair.execute(...)``) and third-party code are not followed, and a forbidden
name reached that way goes unseen. ``python -m onnx_ep.testing.capture_audit`` runs it.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import os
import sys
import textwrap
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import import_module
from typing import Any

import attrs

from onnx_ep.core.kernel import CaptureSupport

#: called names a capture-supported kernel must not reach (``*``: any name with that prefix)
FORBIDDEN: tuple[str, ...] = (
    # host waits: refused on a capturing stream (the capture is invalidated), and a
    # context or event wait blocks on work the graph has not run yet
    "synchronize", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    # allocations and frees are no stream work: refused under capture, and a replay would
    # reuse the capture run's address (the memory authority allocates at plan time)
    "cuMemAlloc*", "cuMemAllocManaged", "cuMemAllocHost*", "cuMemHostAlloc",
    "cuMemFree*", "cuMemFreeHost", "allocate",
    # host <-> device copies: recorded with the host pointer and replayed against whatever
    # that memory holds then; plain cuMemcpy and the readbacks also synchronize
    "download", "upload", "copy_htod", "copy_dtoh", "cuMemcpyHtoD*", "cuMemcpyDtoH*",
    "cuMemcpy", "from_numpy",
)
#: ``X.empty(...)`` / ``X.zeros(...)`` allocate device memory (``DeviceTensor.empty``)
#: unless ``X`` is numpy, whose arrays live on the host
CONSTRUCTORS: frozenset[str] = frozenset({"empty", "zeros"})
HOST_ARRAY_MODULES: frozenset[str] = frozenset({"np", "numpy"})
#: ``x.numpy()`` reads a device value back into a host array (a copy, then a synchronize)
READBACKS: frozenset[str] = frozenset({"numpy"})
#: how many calls deep the audit follows from ``execute_with_workspace``
MAX_DEPTH = 8
UNCAPTURED_ATTR = "__onnx_ep_uncaptured__"
ENTRY = "execute_with_workspace"


@attrs.frozen
class CaptureViolation:
    """A forbidden call reachable from a capture-supported kernel's execute path.

    :ivar kernel: the audited class's qualname.
    :ivar file, line: where the forbidden call is written.
    :ivar call: the called expression as written (``stream.synchronize``).
    :ivar path: qualnames of the functions from ``execute_with_workspace`` to the one
        holding the call, both included.
    """

    kernel: str
    file: str
    line: int
    call: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        rel = os.path.relpath(self.file)
        file = self.file if rel.startswith("..") else rel
        via = f" via {' -> '.join(self.path[1:])}" if len(self.path) > 1 else ""
        return (f"{file}:{self.line}: {self.kernel}: {self.call}() reachable from {ENTRY}"
                f"{via} while capture_support() is SUPPORTED")


def audit_capture(kernels: Iterable[object | type]) -> list[CaptureViolation]:
    """Audit kernel instances or classes; return every violation, sorted by file and line.

    An instance (or a class that instantiates without arguments) whose
    ``capture_support()`` declines is skipped; any other class is audited as if it
    answered SUPPORTED. Classes that an audited kernel's ``bind()`` constructs are
    audited as well.
    """
    queue: list[type] = []
    for k in kernels:
        cls = k if isinstance(k, type) else type(k)
        if _promises_capture(k) and cls not in queue:
            queue.append(cls)
    found: dict[tuple[str, str, int, str], CaptureViolation] = {}
    for cls in queue:  # grows while it is walked: bound classes join it
        for bound in _bound_classes(cls):
            if bound not in queue and _promises_capture(bound):
                queue.append(bound)
        for v in _ClassAudit(cls).run():
            found.setdefault((v.kernel, v.file, v.line, v.call), v)
    return sorted(found.values(), key=lambda v: (v.file, v.line, v.kernel))


def audit_builtin_kernels() -> list[CaptureViolation]:
    """:func:`audit_capture` over every kernel the ``cuda`` and ``cpu_reference`` providers
    register (no entry points, no GPU: kernel modules import no driver)."""
    from onnx_ep.core.plugin_manager import build_plugins

    plugins = build_plugins(entry_points=False)
    plugins.check()
    return audit_capture([e.kernel for p in ("cuda", "cpu_reference")
                          for e in plugins.registry.entries(p)])


# ---------------------------------------------------------------- which classes


def _promises_capture(kernel: object) -> bool:
    """False only when the kernel (or its no-argument instance) declines capture."""
    try:
        obj = kernel() if isinstance(kernel, type) else kernel  # type: ignore[operator]
        answer = obj.capture_support()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 -- needs arguments or cannot answer: audit it
        return True
    return not (isinstance(answer, CaptureSupport) and not answer.supported)


def _bound_classes(cls: type) -> Iterator[type]:
    """Classes with an execute method that a ``bind`` of ``cls``'s MRO constructs."""
    for klass in cls.__mro__:
        fn = _plain_function(vars(klass).get("bind"))
        parsed = _parse(fn) if fn is not None else None
        for node in ast.walk(parsed[0]) if parsed is not None else ():
            target = _global_value(node.func, fn.__globals__) if isinstance(
                node, ast.Call) else None
            if isinstance(target, type) and callable(getattr(target, ENTRY, None)):
                yield target


# ---------------------------------------------------------------- one class


class _ClassAudit:
    """Walks the execute path of one class and collects its violations."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.packages = {"onnx_ep", cls.__module__.split(".")[0]}
        self.seen: set[Any] = set()
        self.found: list[CaptureViolation] = []

    def run(self) -> list[CaptureViolation]:
        entry = _method(self.cls.__mro__, ENTRY)
        if entry is not None:
            self.walk(entry[0], entry[1], ())
        return self.found

    def walk(self, fn: Callable[..., Any], owner: type | None, path: tuple[str, ...]) -> None:
        marked = hasattr(fn, UNCAPTURED_ATTR)
        fn = inspect.unwrap(fn)
        if (marked or hasattr(fn, UNCAPTURED_ATTR) or fn.__code__ in self.seen
                or len(path) > MAX_DEPTH):
            return
        self.seen.add(fn.__code__)
        parsed = _parse(fn)
        if parsed is None:
            return
        tree, first, file = parsed
        path = (*path, fn.__qualname__)
        for call in _unguarded_calls(tree):
            written = _forbidden(call, fn.__globals__)
            if written is not None:
                self.found.append(CaptureViolation(self.cls.__qualname__, file,
                                                   first + call.lineno - 1, written, path))
                continue
            target = self.resolve(call.func, fn, owner)
            if target is not None:
                self.walk(target[0], target[1], path)

    def resolve(self, func: ast.expr, fn: Callable[..., Any], owner: type | None
                ) -> tuple[Callable[..., Any], type | None] | None:
        """The function a call reaches, with the class it is a method of, when it is
        defined in onnx_ep or the kernel's own package (else None)."""
        found: tuple[Callable[..., Any], type | None] | None = None
        recv, mro = getattr(func, "value", None), self.cls.__mro__
        if owner is not None and isinstance(recv, ast.Name) and recv.id in ("self", "cls"):
            found = _method(mro, func.attr)  # type: ignore[attr-defined]
        elif (owner in mro and isinstance(recv, ast.Call)
              and _name(recv.func) == "super"):
            found = _method(mro[mro.index(owner) + 1:], func.attr)  # type: ignore[attr-defined]
        elif inspect.isfunction(target := _global_value(func, fn.__globals__)):
            found = (target, None)
        module = (getattr(found[0], "__module__", None) or "") if found else ""
        return found if module.split(".")[0] in self.packages else None


def _method(mro: Sequence[type], name: str) -> tuple[Callable[..., Any], type] | None:
    for klass in mro:
        if name in vars(klass):
            fn = _plain_function(vars(klass)[name])
            return (fn, klass) if fn is not None else None
    return None


def _plain_function(attr: Any) -> Any:
    if isinstance(attr, (staticmethod, classmethod)):
        attr = attr.__func__
    return attr if inspect.isfunction(attr) else None


def _global_value(func: ast.expr, namespace: dict[str, Any]) -> Any:
    """What ``f`` or ``mod.f`` names in a function's module globals (None otherwise)."""
    if isinstance(func, ast.Name):
        return namespace.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        mod = namespace.get(func.value.id)
        if isinstance(mod, types.ModuleType):
            return getattr(mod, func.attr, None)
    return None


_PARSED: dict[Any, tuple[ast.AST, int, str] | None] = {}
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _parse(fn: Callable[..., Any]) -> tuple[ast.AST, int, str] | None:
    """The function's AST, its first line and its file; None without parsable source (a
    builtin, or a lambda cut out of a larger expression)."""
    code = getattr(fn, "__code__", None)
    if code not in _PARSED:
        _PARSED[code] = None
        try:
            lines, first = inspect.getsourcelines(fn)
            file = inspect.getsourcefile(fn) or code.co_filename
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except SyntaxError:
            try:  # a string literal at column 0 defeats dedent; an enclosing block does not
                tree, first = ast.parse("if 1:\n" + "".join(lines)), first - 1
            except SyntaxError:
                return None
        except (OSError, TypeError):
            return None
        node = next((n for n in ast.walk(tree) if isinstance(n, _DEFS)), None)
        if node is not None:
            _PARSED[code] = (node, first, os.path.abspath(file))
    return _PARSED[code]


# ---------------------------------------------------------------- calls and guards


def _forbidden(call: ast.Call, namespace: dict[str, Any]) -> str | None:
    """The call as written when it is forbidden under capture, else None."""
    func, name = call.func, _name(call.func)
    if name is None:
        return None
    if any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in FORBIDDEN):
        return ast.unparse(func)
    if isinstance(func, ast.Attribute) and (name in READBACKS or (
            name in CONSTRUCTORS and not _is_numpy(func.value, namespace))):
        return ast.unparse(func)
    return None


def _is_numpy(expr: ast.expr, namespace: dict[str, Any]) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    value = namespace.get(expr.id) if isinstance(expr, ast.Name) else None
    return (isinstance(expr, ast.Name) and expr.id in HOST_ARRAY_MODULES) or (
        isinstance(value, types.ModuleType) and value.__name__.split(".")[0] == "numpy")


def _not_capturing(test: ast.expr, outcome: bool) -> bool:
    """Whether ``test`` evaluating to ``outcome`` proves the stream is not capturing."""
    if isinstance(test, ast.Call) and _name(test.func) == "is_capturing":
        return not outcome
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _not_capturing(test.operand, not outcome)
    if isinstance(test, ast.BoolOp):
        # a true ``and`` (a false ``or``) holds for every operand: one proof is enough
        check = any if isinstance(test.op, ast.And) == outcome else all
        return check(_not_capturing(v, outcome) for v in test.values)
    return False


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


class _Calls(ast.NodeVisitor):
    """Every call in a function body that can run while the stream captures."""

    def __init__(self) -> None:
        self.calls: list[ast.Call] = []
        self.guarded = 0

    def block(self, stmts: Sequence[ast.stmt]) -> None:
        entered = 0
        for stmt in stmts:
            self.visit(stmt)
            # ``if ...is_capturing(): raise`` (or return) guards the rest of the block
            if (isinstance(stmt, ast.If) and not stmt.orelse and isinstance(
                    stmt.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))
                    and _not_capturing(stmt.test, False)):
                self.guarded += 1
                entered += 1
        self.guarded -= entered

    def branches(self, test: ast.expr, body: Any, orelse: Any) -> None:
        self.visit(test)
        for part, guarded in ((body, _not_capturing(test, True)),
                              (orelse, _not_capturing(test, False))):
            self.guarded += guarded
            self.block(part if isinstance(part, list) else [ast.Expr(part)])  # IfExp
            self.guarded -= guarded

    def visit_If(self, node: ast.If) -> None:
        self.branches(node.test, node.body, node.orelse)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.branches(node.test, node.body, node.orelse)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # a nested def marked uncaptured_route(...) is skipped like a marked method
        if not any(_name(d.func if isinstance(d, ast.Call) else d) == "uncaptured_route"
                   for d in node.decorator_list):
            self.block(node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        if not self.guarded:
            self.calls.append(node)
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                self.block(value)
                continue
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, ast.AST):
                    self.visit(item)


def _unguarded_calls(fn: ast.AST) -> list[ast.Call]:
    """The calls of a function's body (not its decorators or defaults) outside guards."""
    walker, body = _Calls(), getattr(fn, "body", [])
    walker.block(body if isinstance(body, list) else [ast.Expr(body)])  # a lambda's body
    return walker.calls


# ---------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m onnx_ep.testing.capture_audit",
        description="Statically check that capture-supported kernels never synchronize, "
                    "allocate or copy to/from the host on their execute path; exit 1 on "
                    "a violation.")
    ap.add_argument("kernels", nargs="*", metavar="module.path:Class",
                    help="kernel classes to audit (default: every built-in kernel)")
    args = ap.parse_args(argv)
    classes: list[Any] = []
    for spec in args.kernels:
        module, _, qualname = spec.partition(":")
        try:
            obj: Any = import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            ap.error(f"cannot load {spec}: {exc}")
        classes.append(obj)
    found = audit_capture(classes) if classes else audit_builtin_kernels()
    for v in found:
        print(v)
    what = ", ".join(args.kernels) or "the built-in kernels"
    print(f"{len(found)} capture violation(s) in {what}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
