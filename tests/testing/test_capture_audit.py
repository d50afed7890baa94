"""The capture-contract audit (onnx_ep/testing/capture_audit.py): planted kernels that break
the promise are named with file and line, guarded and declared routes are not, and every
built-in kernel keeps it. No GPU: the audit reads source only."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import onnx_ep
from onnx_ep import CaptureSupport, OpKey, Parity, Tensor, WorkspaceRequirement, uncaptured_route
from onnx_ep.providers.cuda import copies
from onnx_ep.providers.cuda.kernels.base import BoundLaunch
from onnx_ep.testing import CaptureViolation, audit_builtin_kernels, audit_capture

REPO = Path(__file__).resolve().parents[2]
HERE = __name__


def read_back(x):
    return x.numpy()


def sync_when_not_capturing(stream):
    if not stream.is_capturing():
        stream.synchronize()


class _Planted:
    """The protocol's bookkeeping; subclasses write ``execute_with_workspace``."""

    key = OpKey("com.example", "Planted")
    parity = Parity.EXACT

    def capture_support(self):
        return CaptureSupport.SUPPORTED

    def workspace_requirement(self, meta):
        return WorkspaceRequirement.NONE


# ---------------------------------------------------------------- violations


class Syncs(_Planted):
    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        ctx.stream.synchronize()


class ReadsBack(_Planted):
    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        outputs[0] = read_back(inputs[0])


class AllocatesScratch(_Planted):
    def _scratch(self, runtime, nbytes):
        return runtime.allocate(nbytes)

    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        self._scratch(ctx.scope, 64)


class MakesTensor(_Planted):
    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        outputs[0] = Tensor.empty((4,), np.float32)


class GuardsTheWrongWay(_Planted):
    """``or`` lets the body run while capturing: not a guard."""

    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        if not ctx.stream.is_capturing() or len(inputs) > 1:
            ctx.stream.synchronize()


class CallsParent(Syncs):
    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        super().execute_with_workspace(ctx, inputs, outputs, workspace)


class UploadsArguments(BoundLaunch):
    """The built-in launch path calls this override: the audit follows it there."""

    source = "elementwise"

    def launch_key(self, stream, inputs, y):
        return (stream, int(y.ptr))

    def geometry(self, n, inputs, y):
        return (1, 1, 1), (1, 1, 1)

    def arguments(self, n, inputs, y):
        copies.copy_htod(int(y.ptr), np.zeros(n, np.float32), None)
        return []


class _BoundSyncs(_Planted):
    def __init__(self, row):
        self.row = row

    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        ctx.stream.synchronize()


class BindsToSyncing(_Planted):
    """Clean itself; the object its ``bind`` makes (what the session runs) is not."""

    def bind(self, meta):
        return _BoundSyncs(self)

    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        pass


# ---------------------------------------------------------------- allowed


class GuardedCalls(_Planted):
    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        if not ctx.stream.is_capturing():
            ctx.stream.synchronize()
        if ctx.stream.is_capturing():
            pass
        else:
            outputs[0] = read_back(inputs[0])
        sync_when_not_capturing(ctx.stream)
        if ctx.stream.is_capturing():
            raise RuntimeError("the readback below cannot be captured")
        inputs[0].numpy()


class DeclaredRoute(_Planted):
    """Answers unsupported once the dynamic route ran; the route is declared."""

    def __init__(self):
        self.dynamic = False

    def capture_support(self):
        if self.dynamic:
            return CaptureSupport.unsupported("sizes were read back to the host")
        return CaptureSupport.SUPPORTED

    @uncaptured_route("sizes are read back to the host")
    def _dynamic(self, ctx, x):
        self.dynamic = True
        ctx.stream.synchronize()
        return x.numpy()

    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        if inputs[0].shape[0] < 0:
            self._dynamic(ctx, inputs[0])

        @onnx_ep.uncaptured_route("nested, same promise")
        def nested():
            return Tensor.empty((1,), np.float32)

        nested()


class Declines(_Planted):
    def capture_support(self):
        return CaptureSupport.unsupported("numpy on the host")

    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        ctx.stream.synchronize()
        outputs[0] = inputs[0].numpy()


class HostArrays(_Planted):
    def execute_with_workspace(self, ctx, inputs, outputs, workspace):
        scratch = np.empty((4,), np.float32)
        outputs[0] = np.zeros_like(scratch) + np.zeros((4,), np.float32)


# ---------------------------------------------------------------- helpers


def line_of(obj, text: str) -> int:
    """The file line of the first source line of ``obj`` containing ``text``."""
    lines, first = inspect.getsourcelines(obj)
    return first + next(i for i, line in enumerate(lines) if text in line)


def only(found: list[CaptureViolation]) -> CaptureViolation:
    assert len(found) == 1, "\n".join(map(str, found))
    return found[0]


# ---------------------------------------------------------------- tests


def test_every_builtin_kernel_keeps_the_capture_promise():
    found = audit_builtin_kernels()
    assert found == [], "\n".join(map(str, found))


def test_a_synchronize_in_execute_is_named_with_file_and_line():
    v = only(audit_capture([Syncs()]))
    assert v.kernel == "Syncs"
    assert v.call == "ctx.stream.synchronize"
    assert v.file == inspect.getsourcefile(Syncs)
    assert v.line == line_of(Syncs, "ctx.stream.synchronize()")
    assert v.path == ("Syncs.execute_with_workspace",)
    assert str(v) .endswith(f":{v.line}: Syncs: ctx.stream.synchronize() reachable from "
                            f"execute_with_workspace while capture_support() is SUPPORTED")


def test_a_readback_in_a_module_helper_names_the_helper():
    v = only(audit_capture([ReadsBack]))
    assert (v.call, v.line) == ("x.numpy", line_of(read_back, "x.numpy()"))
    assert v.path == ("ReadsBack.execute_with_workspace", "read_back")
    assert "via read_back while" in str(v)


def test_an_allocation_in_a_method_helper_names_the_method():
    v = only(audit_capture([AllocatesScratch()]))
    assert v.call == "runtime.allocate"
    assert v.line == line_of(AllocatesScratch._scratch, "runtime.allocate(")
    assert v.path[-1] == "AllocatesScratch._scratch"


def test_a_device_tensor_constructor_is_an_allocation():
    v = only(audit_capture([MakesTensor()]))
    assert (v.call, v.line) == ("Tensor.empty", line_of(MakesTensor, "Tensor.empty("))


def test_a_condition_that_can_hold_while_capturing_is_no_guard():
    v = only(audit_capture([GuardsTheWrongWay()]))
    assert v.line == line_of(GuardsTheWrongWay, "ctx.stream.synchronize()")


def test_super_calls_are_followed():
    v = only(audit_capture([CallsParent()]))
    assert v.kernel == "CallsParent"
    assert v.line == line_of(Syncs, "ctx.stream.synchronize()")
    assert v.path == ("CallsParent.execute_with_workspace", "Syncs.execute_with_workspace")


def test_the_audit_follows_a_builtin_base_into_an_override():
    v = only(audit_capture([UploadsArguments]))
    assert v.call == "copies.copy_htod"
    assert v.line == line_of(UploadsArguments.arguments, "copy_htod(")
    assert v.path == ("BoundLaunch.execute_with_workspace", "BoundLaunch.prepare",
                      "UploadsArguments.arguments")


def test_the_class_bind_returns_is_audited():
    v = only(audit_capture([BindsToSyncing()]))
    assert v.kernel == "_BoundSyncs"
    assert v.line == line_of(_BoundSyncs, "ctx.stream.synchronize()")


@pytest.mark.parametrize("kernel", [GuardedCalls(), DeclaredRoute(), Declines(), Declines,
                                    HostArrays()],
                         ids=["is_capturing-guards", "uncaptured_route", "declines",
                              "declining-class", "numpy-arrays"])
def test_allowed_calls_are_not_flagged(kernel):
    assert audit_capture([kernel]) == []


def test_uncaptured_route_marks_and_returns_the_function():
    def route():
        return 1

    assert onnx_ep.uncaptured_route("why")(route) is route
    assert route.__onnx_ep_uncaptured__ == "why"


def test_violations_are_sorted_and_each_reported_once():
    found = audit_capture([ReadsBack(), Syncs(), Syncs, ReadsBack()])
    assert [v.kernel for v in found] == ["ReadsBack", "Syncs"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "onnx_ep.testing.capture_audit", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_cli_exits_1_on_a_planted_violation():
    done = _cli(f"{HERE}:Syncs", f"{HERE}:GuardedCalls")
    assert done.returncode == 1, done.stderr
    assert f"test_capture_audit.py:{line_of(Syncs, 'synchronize()')}: Syncs:" in done.stdout


def test_the_cli_exits_0_on_the_builtin_kernels():
    done = _cli()
    assert done.returncode == 0, done.stdout + done.stderr
