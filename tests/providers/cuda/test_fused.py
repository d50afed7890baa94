"""GPU parity of CUDA onnx_ep.fused::RotaryHalf against cpu_reference under the kernel's
declared promise (EXACT for float32, float16 and bfloat16), captured replays included.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_fused.py
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_ep import Session, SessionOptions
from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.providers.cuda.kernels import fused
from onnx_ep.testing.ulp import judge
from tests.helpers.cuda_family import FLOATS, random
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET

pytestmark = pytest.mark.cuda
DT = list(FLOATS.values())
IDS = list(FLOATS)
(KERNEL,) = fused.KERNELS


def rotary_model(dtype: object, x: Sequence[int | str], cos: Sequence[int | str],
                 sin: Sequence[int | str]) -> onnx.ModelProto:
    """One RotaryHalf node over graph inputs x, cos, sin."""
    node = helper.make_node("RotaryHalf", ["x", "cos", "sin"], ["y"], domain=FUSED_DOMAIN,
                            name="rotary")
    elem = onnx_elem_type(np.dtype(dtype))
    graph = helper.make_graph(
        [node], "rotary_half",
        [helper.make_tensor_value_info(n, elem, list(s))
         for n, s in (("x", x), ("cos", cos), ("sin", sin))],
        [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", ORACLE_OPSET),
                                            helper.make_opsetid(FUSED_DOMAIN, 1)])


def feeds_for(shapes: Sequence[Sequence[int]], dtype: object, seed: int = 0,
              scale: float = 3.0) -> dict[str, np.ndarray]:
    """X of ``scale`` and cos/sin of random angles in ``dtype``."""
    xs, cs, ss = shapes
    rng = np.random.default_rng(seed + 100)
    return {"x": random(xs, dtype, seed, scale),
            "cos": np.cos(rng.uniform(-4, 4, tuple(cs))).astype(np.float32).astype(dtype),
            "sin": np.sin(rng.uniform(-4, 4, tuple(ss))).astype(np.float32).astype(dtype)}


def check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], *, what: str = "",
          sess: Session | None = None) -> np.ndarray:
    """Run ``m`` on cuda alone (so the node must be placed there) and on cpu_reference;
    assert the kernel's promise for the dtype."""
    dtype = feeds["x"].dtype
    got = np.asarray((sess or Session(m, providers=["cuda"])).run(None, feeds)[0])
    ref = np.asarray(Session(m, providers=["cpu_reference"]).run(None, feeds)[0])
    promise = KERNEL.parity_for(dtype)
    d = judge(got, ref, promise)
    assert d.kept, (f"{what or 'RotaryHalf'} {dtype}: {d.reason} (promise {promise}; max ulp "
                    f"{d.max_ulp}, max abs {d.max_abs})")
    return got


#: (X, cos, sin): Llama/Qwen layouts at D = 64 and 128, lower-rank and equal-shape tables,
#: cos and sin of different layouts (two offsets per pair), D broadcast, a tall prefill
SHAPES = {
    "qwen_decode": ((1, 14, 1, 64), (1, 1, 1, 64), (1, 1, 1, 64)),
    "bhsd_b1sd_d64": ((2, 4, 9, 64), (2, 1, 9, 64), (2, 1, 9, 64)),
    "bhsd_b1sd_d128": ((2, 4, 9, 128), (2, 1, 9, 128), (2, 1, 9, 128)),
    "bhsd_sd_d64": ((2, 4, 9, 64), (9, 64), (9, 64)),
    "bhsd_sd_d128": ((1, 8, 33, 128), (33, 128), (33, 128)),
    "equal_d64": ((2, 3, 7, 64), (2, 3, 7, 64), (2, 3, 7, 64)),
    "cos_sin_differ": ((2, 4, 9, 128), (9, 128), (2, 1, 9, 128)),
    "d_broadcast": ((2, 4, 9, 64), (9, 1), (1, 4, 9, 1)),
    "rank2": ((6, 8), (6, 8), (8,)),
    "prefill_d128": ((1, 14, 1027, 128), (1, 1, 1027, 128), (1, 1, 1027, 128)),
}


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("case", list(SHAPES))
def test_rotary_half_keeps_its_promise(cuda_device, dtype, case):
    shapes = SHAPES[case]
    check(rotary_model(dtype, *shapes), feeds_for(shapes, dtype), what=case)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_large_values_and_specials_round_once(cuda_device, dtype):
    """Terms that cancel (float32 arithmetic would lose the low bits), infinities, NaNs and
    signed zeros: the double recipe gives the reference's bytes (NaN payloads aside)."""
    shapes = ((4, 3, 64), (3, 64), (3, 64))
    feeds = feeds_for(shapes, dtype, seed=3, scale=1e3)
    x = feeds["x"]
    x[0, 0, :4] = np.array([np.inf, -np.inf, np.nan, -0.0]).astype(dtype)
    x[1, 1, 32:36] = np.array([0.0, -0.0, np.inf, 1.0]).astype(dtype)
    feeds["cos"][2, 5] = dtype.type(0.0)
    feeds["sin"][2, 37] = dtype.type(-0.0)
    check(rotary_model(dtype, *shapes), feeds)


def test_qwen_decode_runs_on_cuda_alone_and_repeats_bit_identically(cuda_device):
    shapes = SHAPES["qwen_decode"]
    m = rotary_model(np.float16, *shapes)
    sess = Session(m, providers=["cuda"])
    feeds = feeds_for(shapes, np.float16, seed=5)
    first = check(m, feeds, sess=sess)
    for _ in range(3):
        assert np.asarray(sess.run(None, feeds)[0]).tobytes() == first.tobytes()


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_a_session_takes_new_shapes_with_the_same_node(cuda_device, dtype):
    """Symbolic dims: each sequence length gets its own geometry and prebuilt launch."""
    m = rotary_model(dtype, ("b", 14, "s", 64), (1, 1, "s", 64), (1, 1, "s", 64))
    sess = Session(m, providers=["cuda"])
    for s_len in (7, 1, 7, 300, 1):
        shapes = ((2, 14, s_len, 64), (1, 1, s_len, 64), (1, 1, s_len, 64))
        check(m, feeds_for(shapes, dtype, seed=s_len), sess=sess, what=f"s={s_len}")


def test_an_empty_x_launches_nothing_and_gives_an_empty_y(cuda_device):
    m = rotary_model(np.float32, ("b", 4, 64), (4, 64), (4, 64))
    feeds = feeds_for(((0, 4, 64), (4, 64), (4, 64)), np.float32)
    (y,) = Session(m, providers=["cuda"]).run(None, feeds)
    assert np.asarray(y).shape == (0, 4, 64)


def test_captured_replays_are_the_eager_bytes(cuda_device):
    shapes = SHAPES["bhsd_b1sd_d128"]
    m = rotary_model(np.float16, *shapes)
    on = Session(m, providers=["cuda"], options=SessionOptions(capture="require"))
    off = Session(m, providers=["cuda"], options=SessionOptions(capture="off"))
    try:
        for seed in range(4):
            feeds = feeds_for(shapes, np.float16, seed=seed)
            a = np.asarray(on.run(None, feeds)[0])
            b = np.asarray(off.run(None, feeds)[0])
            assert a.tobytes() == b.tobytes(), f"seed {seed}"
        assert sum(p["replays"] for p in on.capture_report()["plans"]) >= 1
    finally:
        on.close()
        off.close()
