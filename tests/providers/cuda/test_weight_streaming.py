"""Weight streaming on the GPU: weights paged through a VMM stable region.

A model whose weights exceed a small ``memory_limit`` is refused under full residency,
runs under weight streaming, and its outputs are byte-identical to a full-residency
session; pages move (page-ins and evictions) under unchanged device addresses.
"""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import SessionOptions
from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import Role, authority_for
from onnx_ep.errors import AdmissionRefused
from tests.helpers.oracle import ORACLE_IR_VERSION

pytestmark = pytest.mark.cuda

MiB = 2**20
D = 1024                # four float32 MatMul weights of D x 2D / 2D x D: 8 MiB each
BATCH = 4


def _mlp() -> onnx.ModelProto:
    """x[4, 1024] -> (MatMul + Add -> Relu) x 4 -> y[4, 1024]; 32 MiB of weights."""
    rng = np.random.default_rng(11)
    dims = [D, 2 * D, D, 2 * D, D]
    nodes, inits, prev = [], [], "x"
    for i in range(4):
        w = (rng.standard_normal((dims[i], dims[i + 1])) / np.sqrt(dims[i])).astype(np.float32)
        b = rng.standard_normal(dims[i + 1]).astype(np.float32)
        inits += [onnx.numpy_helper.from_array(w, f"w{i}"),
                  onnx.numpy_helper.from_array(b, f"b{i}")]
        out = "y" if i == 3 else f"r{i}"
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [out], name=f"relu{i}")]
        prev = out
    graph = helper.make_graph(
        nodes, "mlp32",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, D])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def test_weights_over_the_vram_limit_stream_byte_identical_to_full_residency(cuda_device):
    model = _mlp()
    x = np.random.default_rng(12).standard_normal((BATCH, D)).astype(np.float32)
    full = onnx_ep.Session(model, providers=["cuda"],
                           options=SessionOptions(memory_limit=1024 * MiB))
    assert full.memory_policy.name == "full_resident"
    # every node on cuda (MatMul + Add pairs are fused into MatMulAdd nodes)
    assert full.placement_summary() == {"cuda": len(full.graph.nodes)}
    assert full.resources()["fusion"]["fused"] == {"matmul_add": 12 - len(full.graph.nodes)}
    (expected,) = full.run(None, {"x": x})
    t0 = time.perf_counter()
    for _ in range(3):
        full.run(None, {"x": x})
    full_ms = (time.perf_counter() - t0) / 3 * 1e3
    (plan,) = full.resources()["plans"]
    overhead = (plan["arena_bytes"] + plan["workspace_step_bytes"]
                + plan["workspace_session_bytes"])
    weights = full.graph.weight_bytes
    full.close()
    assert weights > 32 * MiB
    # 24 MiB for weights: full residency cannot fit; the window gets half (6 pages of 2 MiB)
    limit = overhead + 24 * MiB + 4096
    with pytest.raises(AdmissionRefused):
        onnx_ep.Session(model, providers=["cuda"],
                        options=SessionOptions(memory_limit=limit, memory_policy="full_resident"))
    s = onnx_ep.Session(model, providers=["cuda"], options=SessionOptions(memory_limit=limit))
    assert s.memory_policy.name == "weight_streaming"
    pager = s._device.pager
    ptrs = {n: v.ptr for n, v in pager.views.items()}
    t0 = time.perf_counter()
    for _ in range(3):
        (y,) = s.run(None, {"x": x})
        assert y.tobytes() == expected.tobytes()
    streamed_ms = (time.perf_counter() - t0) / 3 * 1e3
    res = s.resources()
    c = res["policy"]["counters"]
    assert c["page_ins"] > 0 and c["evictions"] > 0 and c["remaps"] > 0
    assert c["bytes_moved"] >= 3 * weights
    assert c["page_bytes"] == 2 * MiB and c["window_bytes"] < weights
    assert res["committed"] <= limit
    assert {n: v.ptr for n, v in pager.views.items()} == ptrs     # addresses never moved
    # the cost of paging 32 MiB per run through a 12 MiB window (shown with pytest -s)
    print(f"\nweight streaming: {streamed_ms:.2f} ms/run vs full residency {full_ms:.2f} "
          f"ms/run; counters after 3 runs: {c}")
    s.close()
    assert s.holder not in authority_for("cuda:0", limit).ledger()["by_holder"]


def test_paged_region_maps_pages_of_a_core_reservation_under_a_fixed_address(cuda_device,
                                                                             stream):
    from onnx_ep.providers.cuda.device_runtime import cuda_runtime

    rt = cuda_runtime(0)
    authority = authority_for("cuda:0", 64 * MiB + 512, rt.granularity, budget=rt.budget)
    region = rt.stable_region(3 * 2 * MiB - 5, "paged-region-test")
    P = region.page_bytes
    assert P == 2 * MiB and region.nbytes == 3 * P
    base = authority.committed
    r = authority.reserve(2 * P, Role.WEIGHTS, "paged-region-test")
    pages = [region.new_page(r) for _ in range(2)]
    assert authority.committed == base + 2 * P          # the pages cost nothing more
    spec = TensorSpec(np.float32, (P // 4,))
    a = np.arange(P // 4, dtype=np.float32)
    region.map(0, pages[0])
    region.map(2 * P, pages[1])
    region.write(0, a.view(np.uint8), stream)
    region.write(2 * P, (a + 1).view(np.uint8), stream)
    f = region.fence(stream)
    f.wait()
    assert f.done()
    f.release()
    t = region.tensor(2 * P, spec)
    assert t.ptr == region.ptr + 2 * P
    np.testing.assert_array_equal(t.numpy(stream), a + 1)
    moved = region.unmap(0)
    region.map(P, moved)                                 # the same page at a new address
    np.testing.assert_array_equal(region.tensor(P, spec).numpy(stream), a)
    stream.synchronize()
    region.close()
    r.release()
    assert authority.committed == base
