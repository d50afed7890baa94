"""core/kernel.py: check_kernel validates the required members and every optional member a
kernel has; an object returned by bind() must satisfy the protocol too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import onnx_ep
from onnx_ep import (
    Aliases,
    Binds,
    CaptureSupport,
    InfersOutputs,
    Kernel,
    OpKey,
    Parity,
    SupportsNode,
    WorkspaceRequirement,
    check_kernel,
)
from onnx_ep.errors import KernelContractError
from tests.helpers.plugins import TEST_DOMAIN, KernelPlugin, custom_model


class Minimal:
    key = OpKey(TEST_DOMAIN, "Twice")
    parity = Parity.EXACT

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.SUPPORTED

    def workspace_requirement(self, meta: Any) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, ws: Any) -> None:
        outputs[0] = inputs[0] * 2


def _with(**members: Any) -> Any:
    return type("K", (Minimal,), members)()


def test_a_minimal_kernel_satisfies_the_protocol_and_no_optional_one():
    k = Minimal()
    assert check_kernel(k) is None and isinstance(k, Kernel)
    assert not any(isinstance(k, p) for p in (SupportsNode, Binds, InfersOutputs, Aliases))


@pytest.mark.parametrize("members,why", [
    ({"supports": 1}, "'supports' must be callable"),
    ({"bind": "x"}, "'bind' must be callable"),
    ({"infer_outputs": 3}, "'infer_outputs' must be callable"),
    ({"aliases": [0]}, "'aliases' must be a mapping"),
    ({"aliases": {0: -1}}, "'aliases' must map output indices"),
    ({"aliases": {"0": 0}}, "'aliases' must map output indices"),
    ({"execute_with_workspace": None}, "missing method execute_with_workspace()"),
    ({"parity": "exact"}, "'parity' must be a Parity"),
    ({"key": OpKey(TEST_DOMAIN, "Twice", 0)}, "OpKey.since must be an int >= 1"),
])
def test_check_kernel_names_what_is_wrong(members: dict[str, Any], why: str):
    assert why in (check_kernel(_with(**members)) or "")


def test_check_kernel_accepts_well_formed_optional_members():
    k = _with(aliases={0: 0}, supports=lambda self, m: onnx_ep.Support.YES,
              bind=lambda self, m: None, infer_outputs=lambda self, m: [None])
    assert check_kernel(k) is None
    assert all(isinstance(k, p) for p in (SupportsNode, Binds, InfersOutputs, Aliases))


def test_registering_a_kernel_with_a_bad_optional_member_is_refused():
    x = np.ones(3, np.float32)
    with pytest.raises(KernelContractError, match="'aliases' must be a mapping"):
        onnx_ep.Session(custom_model("Twice", x),
                        plugins=[KernelPlugin([(_with(aliases=[1]), "cpu_reference")])])


def test_bind_returning_an_object_without_the_protocol_is_refused_naming_the_node():
    x = np.ones(3, np.float32)
    k = _with(bind=lambda self, meta: object())
    with pytest.raises(KernelContractError, match=r"bind\(\) for node .* missing method"):
        onnx_ep.Session(custom_model("Twice", x), plugins=[KernelPlugin([(k, "cpu_reference")])])


def test_bind_returning_a_runner_runs_the_node():
    x = np.arange(3, dtype=np.float32)

    class Runner(Minimal):
        def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, ws: Any) -> None:
            outputs[0] = inputs[0] * 3

    k = _with(bind=lambda self, meta: Runner())
    s = onnx_ep.Session(custom_model("Twice", x), plugins=[KernelPlugin([(k, "cpu_reference")])])
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], x * 3)
