"""Every byte admitted: outputs whose size depends on input values are sized from the run's
inputs and reserved before they are allocated, or refused with a 429 naming the node."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import SessionOptions
from onnx_ep.errors import CapacityUnavailable, TierExhausted
from tests.helpers.memory import DOMAIN
from tests.helpers.oracle import ORACLE_IR_VERSION

GiB = 1 << 30


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           out: str = "y", out_type: int = TensorProto.FLOAT,
           domains: tuple[str, ...] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, [helper.make_tensor_value_info(out, out_type,
                                                                                  None)])
    imports = [helper.make_opsetid("", 21)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports, ir_version=ORACLE_IR_VERSION)


def _int_input(name: str, n: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT64, [n])


CONSTANT_OF_SHAPE = _model([helper.make_node("ConstantOfShape", ["shape"], ["y"])],
                           [_int_input("shape", 1)])


def _session(model: onnx.ModelProto, limit: int | None = None, **kw: Any) -> onnx_ep.Session:
    return onnx_ep.Session(model, providers=["cpu_reference"],
                           options=SessionOptions(memory_limit=limit), **kw)


@pytest.mark.parametrize("elements, limit", [(400_000_000, GiB),      # 1.6 GB under 1 GiB
                                             (1_000_000, 1000),        # 4 MB under 1000 bytes
                                             (10**12, GiB),            # 3.64 TiB
                                             (2**62, GiB)])            # past int64 in bytes
def test_a_value_sized_output_that_can_never_fit_is_refused_before_it_is_allocated(
        elements, limit):
    s = _session(CONSTANT_OF_SHAPE, limit)
    s.run(None, {"shape": np.array([1], np.int64)})          # plans the signature
    t0 = time.perf_counter()
    with pytest.raises(CapacityUnavailable, match="ConstantOfShape") as e:
        s.run(None, {"shape": np.array([elements], np.int64)})
    assert time.perf_counter() - t0 < 0.05          # a refusal, not an attempt
    assert e.value.http_status == 429 and e.value.requested >= 4 * elements
    assert str(4 * elements) in str(e.value)
    assert s._authority.held_by(f"{s.holder}/run-2") == 0
    (y,) = s.run(None, {"shape": np.array([3], np.int64)})   # the session stays usable
    np.testing.assert_array_equal(y, np.zeros(3, np.float32))


@pytest.mark.parametrize("op, inputs, feeds, want", [
    ("Expand", ["x", "shape"],
     {"x": np.ones((1, 3), np.float32), "shape": np.array([5, 3], np.int64)}, (5, 3)),
    ("Tile", ["x", "reps"],
     {"x": np.ones((2, 3), np.float32), "reps": np.array([4, 2], np.int64)}, (8, 6)),
    ("Range", ["a", "b", "c"],
     {"a": np.array(0.0, np.float32), "b": np.array(10.0, np.float32),
      "c": np.array(0.5, np.float32)}, (20,)),
])
def test_value_sized_ops_are_sized_before_they_run_and_match_what_they_make(
        op, inputs, feeds, want):
    vis = [helper.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype),
                                         v.shape) for k, v in feeds.items()]
    s = _session(_model([helper.make_node(op, inputs, ["y"])], vis))
    (y,) = s.run(None, feeds)
    assert y.shape == want
    assert s.stats["run_sized_steps"] == 1 and s.stats["unsized_steps"] == 0


def test_one_hot_with_a_huge_depth_is_refused():
    model = _model([helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
                   [_int_input("i", 4), _int_input("d", 1),
                    helper.make_tensor_value_info("v", TensorProto.FLOAT, [2])])
    s = _session(model, GiB)
    feeds = {"i": np.arange(4, dtype=np.int64), "v": np.array([0, 1], np.float32)}
    with pytest.raises(CapacityUnavailable, match="OneHot"):
        s.run(None, {**feeds, "d": np.array([10**11], np.int64)})
    (y,) = s.run(None, {**feeds, "d": np.array([5], np.int64)})
    assert y.shape == (4, 5) and s.stats["unsized_steps"] == 0


class Hold:
    """A host kernel that waits on ``gate`` so a test can read the ledger mid-run."""

    from onnx_ep import CaptureSupport, OpKey, Parity, WorkspaceRequirement

    parity = Parity.EXACT
    key = OpKey(DOMAIN, "Hold", 1)

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()

    def capture_support(self) -> Any:
        return self.CaptureSupport.unsupported("test kernel")

    def workspace_requirement(self, meta: Any) -> Any:
        return self.WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        self.started.set()
        self.gate.wait(10)
        outputs[0] = inputs[0] + 1


class HoldPlugin:
    def __init__(self, kernel: Hold) -> None:
        self.kernel = kernel

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(self, register: Any) -> None:
        register(self.kernel, provider="cpu_reference")


def test_the_ledger_shows_run_sized_bytes_while_the_run_holds_them():
    model = _model([helper.make_node("ConstantOfShape", ["shape"], ["c"]),
                    helper.make_node("Hold", ["c"], ["y"], domain=DOMAIN)],
                   [_int_input("shape", 1)], domains=(DOMAIN,))
    hold = Hold()
    s = _session(model, 64 << 20, plugins=[HoldPlugin(hold)])
    before = s._authority.committed
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(
        s.run(None, {"shape": np.array([1 << 20], np.int64)})))
    t.start()
    assert hold.started.wait(10)
    held = s._authority.committed - before
    assert held >= 4 << 20                      # the 4 MiB ConstantOfShape output, at least
    other = _session(model, 64 << 20, plugins=[HoldPlugin(Hold())])
    with pytest.raises(TierExhausted, match="ConstantOfShape"):   # 61 MiB more do not fit now
        other.run(None, {"shape": np.array([61 << 18], np.int64)})
    hold.gate.set()
    t.join(10)
    assert result and result[0][0].shape == (1 << 20,)
    assert s._authority.committed == before


def test_loop_bodies_meter_their_iterations_and_release_them_each_iteration():
    # Loop 50 times; each iteration makes ConstantOfShape([n]) and sums it: 50 x 4 MiB
    # charged one iteration at a time fits a 16 MiB budget, all at once would not
    body = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["n"], ["c"],
                          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("ReduceSum", ["c"], ["s"], keepdims=0),
         helper.make_node("Add", ["acc", "s"], ["acc_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [])])
    model = _model([helper.make_node("Loop", ["trips", "", "acc0"], ["y"], body=body)],
                   [helper.make_tensor_value_info("trips", TensorProto.INT64, []),
                    helper.make_tensor_value_info("acc0", TensorProto.FLOAT, []),
                    _int_input("n", 1)])
    s = _session(model, 16 << 20)
    feeds = {"trips": np.array(50, np.int64), "acc0": np.array(0, np.float32),
             "n": np.array([1 << 20], np.int64)}
    (y,) = s.run(None, feeds)
    assert y == 50 * (1 << 20)
    assert s.stats["run_sized_steps"] >= 50 and s._authority.ledger()["peak_committed"] < 16 << 20
    with pytest.raises(CapacityUnavailable, match="ConstantOfShape"):
        s.run(None, {**feeds, "n": np.array([5 << 20], np.int64)})   # 20 MiB per iteration


def test_a_device_session_admits_its_host_steps_value_sized_outputs_too():
    from tests.helpers.fake_device import DEVICE, FakeDevicePlugin

    model = _model([helper.make_node("ConstantOfShape", ["shape"], ["c"]),
                    helper.make_node("Relu", ["c"], ["y"])], [_int_input("shape", 1)])
    s = onnx_ep.Session(model, providers=[DEVICE, "cpu_reference"],
                        plugins=[FakeDevicePlugin(ops=("Relu",))])
    with pytest.raises(CapacityUnavailable, match="ConstantOfShape"):
        s.run(None, {"shape": np.array([10**12], np.int64)})
    (y,) = s.run(None, {"shape": np.array([4], np.int64)})
    np.testing.assert_array_equal(y, np.zeros(4, np.float32))
    assert s.stats["run_sized_steps"] >= 1 and s.stats["unsized_steps"] == 0
    s.close()
