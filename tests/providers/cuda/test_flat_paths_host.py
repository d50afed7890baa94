"""CPU checks of the launch geometry of the flat elementwise/Cast path and of the fast
Softmax/LayerNorm rows: which kernels the host expects to take the fast path, and grids."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from onnx_ep.core.kernel import NodeMeta, TensorSpec
from onnx_ep.providers.cuda.kernels import activation, elementwise, softmax
from onnx_ep.providers.cuda.kernels.base import BLOCK, flat_geometry, launch_geometry

KERNELS_DIR = Path(elementwise.__file__).parent


class _T:
    def __init__(self, ptr: int, shape: tuple[int, ...], dtype=np.float32) -> None:
        self.ptr, self.shape, self.dtype, self.device = ptr, shape, np.dtype(dtype), 0


def _never() -> int:
    raise AssertionError("a small grid must not ask for the occupancy")


def test_flat_geometry_sizes_grids_for_one_pack_per_thread() -> None:
    grid, block = flat_geometry(4096, [(0x1000, 4, False), (0x2000, 4, False)], (0x3000, 4),
                                _never)
    assert block == (BLOCK, 1, 1) and grid == (4096 // (4 * BLOCK), 1, 1)
    # float16 packs hold 8, bool packs 16; a bool output of float32 inputs packs by 4
    assert flat_geometry(8 * BLOCK * 3, [(0, 2, False)], (0, 2), _never)[0] == (3, 1, 1)
    assert flat_geometry(16 * BLOCK, [(0, 1, False)], (0, 1), _never)[0] == (1, 1, 1)
    assert flat_geometry(4 * BLOCK * 2, [(0, 4, False)], (0, 1), _never)[0] == (2, 1, 1)


def test_flat_geometry_declines_misaligned_pointers_but_not_scalars() -> None:
    assert flat_geometry(100, [(0x1004, 4, False)], (0x2000, 4), _never) is None
    assert flat_geometry(100, [(0x1000, 4, False)], (0x2008, 4), _never) is None
    assert flat_geometry(100, [(0x1000, 4, False), (0x1004, 4, True)], (0x2000, 4),
                         _never) is not None
    # a float32 -> bool pack is 4 bytes of output: 4-byte alignment suffices there
    assert flat_geometry(100, [(0x1000, 4, False)], (0x2004, 1), _never) is not None


def test_flat_geometry_caps_large_grids_at_one_wave() -> None:
    grid, _ = flat_geometry(1 << 26, [(0, 4, False)], (0, 4), lambda: 1056)
    assert grid == (1056, 1, 1)


ROWS = {**elementwise.ROWS, **activation.ROWS}


def _bound(op: str, *specs: TensorSpec):
    meta = NodeMeta("n", op, "", 21, {}, tuple(specs))
    return ROWS[op].bind(meta)


@pytest.mark.parametrize("shapes,flat", [(((2, 3), (2, 3)), True), (((2, 3), ()), True),
                                         (((), (5,)), True), (((2, 3), (1, 1)), True),
                                         (((2, 3), (3,)), False), (((2, 3), (2, 1)), False)])
def test_binary_geometry_takes_the_flat_path_for_same_shapes_and_scalars(shapes, flat) -> None:
    a, b = shapes
    out = np.broadcast_shapes(a, b)
    bound = _bound("Add", TensorSpec(np.float32, a), TensorSpec(np.float32, b))
    n = int(np.prod(out))
    grid, _ = bound.geometry(n, [_T(0x1000, a), _T(0x2000, b)], _T(0x3000, out))
    assert grid == (flat_geometry(n, [(0, 4, False)], (0, 4), _never)[0] if flat
                    else launch_geometry(n)[0])


def test_unary_geometry_falls_back_for_a_misaligned_input() -> None:
    bound = _bound("Relu", TensorSpec(np.float32, (4096,)))
    grid, _ = bound.geometry(4096, [_T(0x1004, (4096,))], _T(0x2000, (4096,)))
    assert grid == launch_geometry(4096)[0]


@pytest.mark.parametrize("cols,v,want", [(4096, 4, (128, 8)), (4096, 8, (128, 4)),
                                         (4096, 1, (512, 8)), (7, 1, (32, 1)),
                                         (768, 4, (32, 8)), (1000, 4, (32, 8)),
                                         (32768, 4, (1024, 8)), (32768, 8, (1024, 4)),
                                         (8193, 1, None), (65536, 8, None)])
def test_fast_geometry_fits_rows_in_registers(cols, v, want) -> None:
    assert softmax.fast_geometry(cols, v) == want
    if want is not None:
        threads, packs = want
        assert threads * packs * v >= cols and packs * v <= softmax.FAST_MAX_VALUES


def test_fast_rows_pack_short_rows_into_blocks_and_skip_float64() -> None:
    rows = softmax.fast_rows(13, 64, 4, np.float32)
    assert rows.direct_infix == "fast_v4_p1" and rows.block == (32, 8, 1)
    assert rows.grid == (2, 1, 1)
    assert softmax.fast_rows(13, 64, 2, np.float64) is None


def test_pipelined_rows_need_16_byte_packs_and_buffers_that_fit(monkeypatch) -> None:
    rows = softmax.fast_rows(32768, 4096, 8, np.float16)
    assert rows.pipe_infix == "pipe_p4" and rows.block == (128, 2, 1)
    assert rows.stages == 2 and rows.shared_bytes == 2 * 256 * 4 * 16   # 32 KiB
    monkeypatch.setattr(softmax, "PIPE_STAGES", 4)                      # 4 do not fit: 3
    assert softmax.fast_rows(32768, 4096, 8, np.float16).stages == 3
    monkeypatch.setattr(softmax, "PIPE_STAGES", 2)
    assert softmax.fast_rows(32768, 4096, 1, np.float16).stages == 0  # 2-byte loads
    assert softmax.fast_rows(2, 4096, 8, np.float16).stages == 0      # one block in all
    # float32 rows of 4096: two rows of 128 threads x 8 packs a block, 32 KiB a buffer: two
    # buffers do not fit in 48 KiB (the direct kernel runs); they do in 64 KiB
    assert softmax.fast_rows(16384, 4096, 4, np.float32).stages == 0
    monkeypatch.setattr(softmax, "PIPE_SHARED_BYTES", 64 * 1024)
    assert softmax.fast_rows(16384, 4096, 4, np.float32).stages == 2
    monkeypatch.setattr(softmax, "PIPE_STAGES", 0)
    assert softmax.fast_rows(32768, 4096, 8, np.float16).stages == 0


def test_pipelined_grid_gives_every_block_the_same_number_of_row_groups() -> None:
    rows = softmax.fast_rows(32768, 4096, 8, np.float16)       # 16384 row groups
    assert rows.grid_for(528) == (512, 1, 1)      # 32 row groups each, not 31-32 over 528
    assert rows.grid_for(16384) is None           # a block per group anyway: direct kernel
    assert rows.grid_for(1) == (1, 1, 1)
    short = softmax.fast_rows(37, 64, 4, np.float32)   # 8 rows a block: 5 row groups
    assert short.grid_for(3) == (3, 1, 1) and short.grid_for(5) is None


def test_fast_rows_kernel_pipelines_only_when_blocks_walk_several_row_groups(monkeypatch) -> None:
    from types import SimpleNamespace

    asked = []

    def occupancy(fn, threads, shared):
        asked.append((fn, threads, shared))
        return 4

    monkeypatch.setattr(softmax, "max_active_blocks", occupancy)
    device = SimpleNamespace(multiprocessors=132)          # 528 blocks at once
    rows = softmax.fast_rows(32768, 4096, 8, np.float16)  # 16384 row groups
    assert softmax.fast_rows_kernel(rows, lambda infix: infix, device) == (
        "pipe_p4", (512, 1, 1), 2)
    assert asked == [("pipe_p4", 256, 2 * 256 * 4 * 16)]
    few = softmax.fast_rows(64, 4096, 8, np.float16)      # 32 groups: a block each
    assert softmax.fast_rows_kernel(few, lambda infix: infix, device) == ("fast_v8_p4", few.grid, 0)
    monkeypatch.setattr(softmax, "PIPE_MAX_BLOCKS", 3)
    assert softmax.fast_rows_kernel(few, lambda infix: infix, device) == ("pipe_p4", (3, 1, 1), 2)
    asked.clear()
    monkeypatch.setattr(softmax, "PIPE_MAX_BLOCKS", None)
    some = softmax.fast_rows(2 * 132, 4096, 8, np.float16)  # 132 groups: one per SM
    assert softmax.fast_rows_kernel(some, lambda infix: infix, device)[2] == 0 and not asked
    monkeypatch.setattr(softmax, "max_active_blocks", lambda fn, threads, shared: 0)
    assert softmax.fast_rows_kernel(rows, lambda infix: infix, device)[2] == 0   # fits nowhere
    unaligned = softmax.fast_rows(32768, 4096, 1, np.float16)
    assert softmax.fast_rows_kernel(unaligned, lambda infix: infix, device)[0] == "fast_v1_p8"


def test_pipelined_kernels_are_instantiated_for_every_pack_count() -> None:
    src = (KERNELS_DIR / "softmax.cu").read_text()
    have = set(re.findall(r"EP_PIPE_P\((\w+), (\w+), (\d+), (\d+)\)", src))
    for line in re.findall(r"EP_PIPE_P124\((\w+), (\w+), (\d+)\)", src):
        have |= {(*line, str(p)) for p in (1, 2, 4)}
    import ml_dtypes

    picked = 0
    for dtype, sfx in ((np.float32, "f32"), (np.float16, "f16"), (ml_dtypes.bfloat16, "bf16")):
        v = 16 // np.dtype(dtype).itemsize
        for cols in range(v, 40000, 13 * v):
            rows = softmax.fast_rows(1 << 20, cols, v, dtype)
            if rows is not None and rows.stages:
                picked += 1
                assert any(h[1:] == (sfx, str(v), str(rows.packs)) for h in have), (sfx, cols)
    assert picked > 100


def test_fast_row_kernels_are_instantiated_for_every_geometry_the_host_picks() -> None:
    src = (KERNELS_DIR / "softmax.cu").read_text()
    have = set(re.findall(r"EP_FAST_VP\((\w+), (\w+), (\d+), (\d+)\)", src))
    for line in re.findall(r"EP_FAST_P124\((\w+), (\w+), (\d+)\)", src):
        have |= {(*line, str(p)) for p in (1, 2, 4)}
    for sfx, vw in (("f32", 4), ("f16", 8), ("bf16", 8)):
        for v in (1, vw):
            for cols in range(v, 70000, 37 * v):
                geo = softmax.fast_geometry(cols, v)
                if geo is not None:
                    assert any(h[1:] == (sfx, str(v), str(geo[1])) for h in have), (sfx, v, geo)


def test_bfloat16_arithmetic_in_float32_rounds_like_the_reference() -> None:
    """elementwise.cu computes bfloat16 + - * / in float32 and rounds once; cpu_reference
    computes in float64 and rounds once: equal for every bfloat16 against a sample of
    others, both orders (the full check ran 4.3e8 pairs per op)."""
    import ml_dtypes

    from onnx_ep.providers.cpu_reference.numerics import round_from_float64

    bf16 = np.dtype(ml_dtypes.bfloat16)
    a = np.arange(65536, dtype=np.uint16).view(bf16)
    special = np.array([0x0000, 0x0001, 0x007f, 0x0080, 0x3f80, 0x3f81, 0x7f7f, 0x7f80,
                        0x7fc0, 0x8001, 0xff7f, 0xff80], np.uint16)
    b = np.concatenate([special, np.random.default_rng(0).integers(0, 65536, 52)
                        .astype(np.uint16)]).view(bf16)[:, None]
    with np.errstate(all="ignore"):
        for fn in (np.add, np.subtract, np.multiply, np.divide):
            for x, y in ((a[None, :], b), (b, a[None, :])):
                want = round_from_float64(fn(x.astype(np.float64), y.astype(np.float64)), bf16)
                got = fn(x.astype(np.float32), y.astype(np.float32)).astype(bf16)
                nan = np.isnan(want.astype(np.float32)) & np.isnan(got.astype(np.float32))
                assert ((want.view(np.uint16) == got.view(np.uint16)) | nan).all(), fn.__name__
