"""Host-side logic of the CUDA movement kernels (no GPU): coalescing, element widening,
the Transpose route, broadcast strides, Concat's launch groups, Slice attributes and
shape inference.

The geometry tests replay what ``movement.cu`` does with the planned geometry in numpy
(the kernels are one line each: ``y[i] = x[offset(i)]``), so a wrong plan fails here.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from onnx_ep.core.kernel import NodeMeta, Parity, TensorSpec
from onnx_ep.providers.cuda.kernels import movement as mv
from onnx_ep.providers.cuda.kernels.base import Geo, contiguous_strides
from tests.helpers.byte_memory import ByteMemory


def _units(x: np.ndarray, width: int) -> np.ndarray:
    """``x``'s bytes as elements of ``width`` bytes (what the x<width> kernels see)."""
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.dtype("V16")}[width]
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8).view(dt)


def _offsets(n: int, sizes, strides) -> np.ndarray:
    idx = np.arange(n)
    off = np.zeros(n, dtype=np.int64)
    for size, stride in zip(reversed(sizes), reversed(strides)):
        off += (idx % size) * stride
        idx //= size
    return off


def _replay_transpose(x: np.ndarray, perm) -> np.ndarray:
    route, w, geo = mv.transpose_plan(x.shape, perm, x.dtype.itemsize)
    xu = _units(x, w)
    if route == "copy":
        yu = xu.copy()
    elif route == "tile":
        b, r, c = geo
        yu = xu.reshape(b, r, c).transpose(0, 2, 1).reshape(-1)
    else:
        nd = len(geo) // 2
        yu = xu[_offsets(xu.size, geo[:nd], geo[nd:])]
    return yu.view(np.uint8).view(x.dtype).reshape(tuple(x.shape[p] for p in perm))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 5, 1, 8), (4, 4, 2, 2), (3, 1, 16),
                                   (2, 3, 2, 5, 2)])
def test_every_transpose_plan_reproduces_numpy(dtype, shape):
    x = np.arange(np.prod(shape)).astype(dtype).reshape(shape)
    for perm in itertools.permutations(range(len(shape))):
        np.testing.assert_array_equal(_replay_transpose(x, perm), np.transpose(x, perm),
                                      err_msg=f"perm {perm}")


def test_last_two_axes_swap_takes_the_tiled_route():
    assert mv.transpose_plan((8, 64, 128), (0, 2, 1), 4)[:2] == ("tile", 4)
    assert mv.transpose_plan((64, 128), (1, 0), 2)[0] == "tile"
    assert mv.transpose_plan((2, 3, 64, 128), (0, 1, 3, 2), 4)[2] == (6, 64, 128)


def test_identity_permutation_is_a_copy():
    assert mv.transpose_plan((3, 4, 5), (0, 1, 2), 4)[0] == "copy"
    assert mv.transpose_plan((1, 7, 1), (2, 1, 0), 2)[0] == "copy"


def test_widening_keeps_alignment():
    # 3 float16 per row is 6 bytes: only 2-byte elements fit
    assert mv.widen(2, [4, 3], [3, 1], (0, 0))[0] == 2
    assert mv.widen(2, [4, 8], [8, 1], (0, 0)) == (16, [4], [1])
    # a misaligned pointer caps the width
    assert mv.widen(4, [4, 8], [16, 1], (0, 4))[0] == 4
    assert mv.widen(4, [4, 8], [16, 1], (0, 8))[0] == 8
    # a non-contiguous innermost dim never widens
    assert mv.widen(4, [4, 8], [1, 4], (0, 0))[0] == 4


def test_coalesce_merges_runs_and_drops_unit_dims():
    assert mv.coalesce([2, 3, 4], [12, 4, 1]) == ([24], [1])
    assert mv.coalesce([2, 1, 4], [4, 99, 1]) == ([8], [1])
    assert mv.coalesce([3, 4], [1, 3]) == ([3, 4], [1, 3])
    assert mv.coalesce([1, 1], [5, 5]) == ([], [])
    assert mv.coalesce([5, 4, 3], [0, 0, 1]) == ([20, 3], [0, 1])


@pytest.mark.parametrize("src,dst", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((4,), (2, 4)),
                                     ((2, 1, 3), (2, 5, 3)), ((), (2, 2))])
def test_expand_geometry_reproduces_broadcast_to(src, dst):
    x = np.arange(int(np.prod(src))).astype(np.float16).reshape(src)
    sizes, strides = mv.coalesce(dst, mv.broadcast_strides(src, dst))
    w, sizes, strides = mv.widen(2, sizes, strides, (0, 0))
    xu = _units(x, w)
    n = int(np.prod(dst)) * 2 // w
    y = xu[_offsets(n, sizes or [1], strides or [0])]
    np.testing.assert_array_equal(y.view(np.uint8).view(np.float16).reshape(dst),
                                  np.broadcast_to(x, dst))


def test_broadcast_strides_rejects_mismatch():
    with pytest.raises(ValueError):
        mv.broadcast_strides((3,), (4,))


def test_tile_grid_covers_batch_times_row_tiles():
    gx, gy, gz = mv.tile_grid(3, 100, 70)
    assert gx == 3 and gy * gz >= 3 * 4
    gx, gy, gz = mv.tile_grid(70000, 64, 32)
    assert gy == 65535 and gy * gz >= 140000


def test_block_copy_width():
    assert mv.block_copy_width(4, 8, (8, 16), (0, 32)) == 16
    assert mv.block_copy_width(4, 6, (6, 12), (0, 0)) == 8
    assert mv.block_copy_width(2, 3, (3, 6), (0, 0)) == 2


def test_slice_attribute_plan_matches_numpy():
    x = np.arange(60).reshape(3, 4, 5)
    base, shape = mv.slice_attr_plan(x.shape, [1, -3], [100, -1], [0, 2])
    want = x[1:, :, -3:-1]
    assert tuple(shape) == want.shape
    assert x.reshape(-1)[base] == want.reshape(-1)[0]
    assert mv.slice_attr_plan(x.shape, [0], [1], [5]) is None


def _meta(op, inputs, opset=17, n_out=1, **attrs):
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(inputs), output_names=tuple(f"y{i}" for i in range(n_out)))


KERNELS = {k.key.op_type: k for k in mv.KERNELS}
F32 = np.dtype(np.float32)


def test_infer_outputs():
    x = TensorSpec(F32, (2, 3, 4))
    assert KERNELS["Transpose"].infer_outputs(_meta("Transpose", [x], perm=[2, 0, 1])) == \
        [TensorSpec(F32, (4, 2, 3))]
    assert KERNELS["Transpose"].infer_outputs(_meta("Transpose", [x]))[0].shape == (4, 3, 2)
    assert KERNELS["Concat"].infer_outputs(
        _meta("Concat", [x, TensorSpec(F32, (2, 5, 4))], axis=1))[0].shape == (2, 8, 4)
    idx = TensorSpec(np.int64, (7, 2))
    assert KERNELS["Gather"].infer_outputs(_meta("Gather", [x, idx], axis=-1))[0].shape == \
        (2, 3, 7, 2)
    assert [s.shape for s in KERNELS["Split"].infer_outputs(
        _meta("Split", [TensorSpec(F32, (2, 7))], opset=18, n_out=3, axis=1,
              num_outputs=3))] == [(2, 3), (2, 3), (2, 1)]
    assert KERNELS["Split"].infer_outputs(
        _meta("Split", [x, TensorSpec(np.int64, (2,))], opset=13, n_out=2, axis=1)) == \
        [None, None]
    assert KERNELS["Flatten"].infer_outputs(_meta("Flatten", [x], axis=2))[0].shape == (6, 4)
    assert KERNELS["Unsqueeze"].infer_outputs(
        _meta("Unsqueeze", [x], opset=11, axes=[0, -1]))[0].shape == (1, 2, 3, 4, 1)
    assert KERNELS["Squeeze"].infer_outputs(
        _meta("Squeeze", [TensorSpec(F32, (1, 3, 1))], opset=11))[0].shape == (3,)
    assert KERNELS["Slice"].infer_outputs(
        _meta("Slice", [x], opset=9, starts=[1], ends=[3], axes=[1]))[0].shape == (2, 2, 4)


def test_views_alias_input_zero_and_movement_is_exact():
    for op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"):
        assert KERNELS[op].aliases == {0: 0}
    for k in mv.KERNELS:
        assert k.parity == Parity.EXACT
        assert k.capture_support().supported


def test_a_view_of_the_same_buffer_is_made_once_and_checked_once():
    from onnx_ep.core.kernel import ExecutionContext
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    k = mv.View("Reshape", since=5)
    ctx = ExecutionContext(_meta("Reshape", [TensorSpec(np.float32, (2, 6))]))
    x = DeviceTensor(4096, np.float32, (2, 6))
    spec = TensorSpec(np.float32, (3, 4))
    first, again = [spec], [spec]
    k.execute_with_workspace(ctx, [x], first, None)
    k.execute_with_workspace(ctx, [x], again, None)
    assert again[0] is first[0] and first[0].shape == (3, 4) and first[0].ptr == x.ptr
    other = [TensorSpec(np.float32, (12,))]
    k.execute_with_workspace(ctx, [x], other, None)
    assert other[0] is not first[0] and other[0].shape == (12,)
    y = DeviceTensor(8192, np.float32, (2, 6))          # another buffer: its own view
    fresh = [spec]
    k.execute_with_workspace(ctx, [y], fresh, None)
    assert fresh[0] is not first[0] and fresh[0].ptr == y.ptr
    with pytest.raises(Exception, match="elements"):       # a wrong plan is still refused
        k.execute_with_workspace(ctx, [x], [TensorSpec(np.float32, (5,))], None)


def test_supports_declines_what_cannot_run():
    assert not KERNELS["Transpose"].supports(_meta("Transpose", [TensorSpec(F32, (2, 3))],
                                                   perm=[0, 0]))
    assert not KERNELS["Identity"].supports(_meta("Identity", [None]))
    assert not KERNELS["Gather"].supports(
        _meta("Gather", [TensorSpec(F32, (2, 3)), TensorSpec(np.float32, (1,))]))
    assert not KERNELS["Transpose"].supports(_meta("Transpose", [TensorSpec(F32, (1,) * 9)]))
    assert KERNELS["Slice"].supports(
        _meta("Slice", [TensorSpec(F32, (4,)), TensorSpec(np.int32, (1,)),
                        TensorSpec(np.int32, (1,))], opset=13))


def test_geo_struct_layout_matches_the_cuda_struct():
    # struct Geo { long long size[8]; long long stride[8]; int ndim; } -> 136 bytes
    import ctypes

    assert ctypes.sizeof(Geo) == 136
    g = Geo.of([2, 3], [3, 1])
    assert g.dims() == ([2, 3], [3, 1])
    with pytest.raises(ValueError):
        Geo.of([1] * 9, [1] * 9)
    assert contiguous_strides((2, 3, 4)) == [12, 4, 1]


# ---------------------------------------------------------------- Concat: groups of inputs
# concat_plan's launches are replayed the way movement.cu's concat / copy2d kernels run
# them, in a numpy "device memory" whose addresses the tests choose, so widths, pointers,
# offsets and pitches are all checked against numpy.concatenate byte for byte.

_CU = Path(mv.__file__).with_name("movement.cu").read_text()


def _replay_concat(mem: ByteMemory, width: int, table: mv.CatInputs, dst: int, pitch: int,
                   rows: int) -> None:
    """What ``concat_x<width>(table, dst, pitch, rows)`` writes, thread by thread."""
    n = table.n
    off = np.array(table.off[:n + 1], np.int64)
    src = np.array(table.src[:n], np.int64)
    assert 1 <= n <= mv.CONCAT_GROUP and off[0] == 0 and np.all(np.diff(off) > 0)
    assert dst % width == 0 and np.all(src % width == 0), "unaligned access"
    cols = int(off[n])
    i = np.arange(rows * cols)
    r, j = i // cols, i % cols
    k = np.searchsorted(off[1:n], j, side="right")   # the kernel's linear scan
    begin, span = off[k], off[k + 1] - off[k]
    u = mem.units(width)
    u[dst // width + r * pitch + j] = u[src[k] // width + r * span + (j - begin)]


def _replay_copy2d(mem: ByteMemory, width: int, src: int, sp: int, dst: int, dp: int,
                   rows: int, cols: int) -> None:
    assert src % width == 0 and dst % width == 0, "unaligned access"
    i = np.arange(rows * cols)
    r, j = i // cols, i % cols
    u = mem.units(width)
    u[dst // width + r * dp + j] = u[src // width + r * sp + j]


def _replay_plan(mem: ByteMemory, itemsize: int, plan: list[mv.ConcatGroup]) -> None:
    for g in plan:
        if len(g.srcs) == 1:
            f = g.width // itemsize
            _replay_copy2d(mem, itemsize, g.srcs[0], g.cols * f, g.dst, g.pitch * f,
                           g.rows, g.cols * f)
        else:
            _replay_concat(mem, g.width, g.table(), g.dst, g.pitch, g.rows)


def _pieces(shapes, dtype, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    return [rng.integers(0, 256, int(np.prod(s)) * dt.itemsize, dtype=np.uint8)
            .view(dt).reshape(s) for s in shapes]


def _axis_dims(shapes, axis):
    return [s[axis] for s in shapes]


CONCAT_CASES = [
    # (shapes, axis): 1, 2, 3, 9 and 20 inputs; empty inputs mixed in; axis 0 / middle /
    # last; odd rows (width 1 or 2) and aligned float16 decode shapes
    ([(2, 3, 4)], 1),
    ([(1, 2, 128, 64), (1, 2, 1, 64)], 2),                       # KV-cache append
    ([(1, 14, 1, 32), (1, 14, 1, 32)], -1),                      # rotary halves
    ([(3, 5, 7), (3, 5, 1), (3, 5, 3)], -1),
    ([(2, 3), (5, 3), (1, 3)], 0),
    ([(2, k, 3) for k in (1, 2, 0, 3, 1, 4, 0, 2, 5)], 1),
    ([(k,) for k in (1, 1, 2, 0, 1, 3, 1, 1, 0, 1, 4, 1, 1, 1, 2, 1, 0, 1, 1, 1)], 0),
    ([(3, k % 4, 5) for k in range(20)], 1),
    ([(4, 1, 2)] * 17, 1),
    ([(3, 8)] * 16 + [(3, 1)], 1),                               # odd output rows
    ([(0, 4), (3, 4), (0, 4), (2, 4)], 0),
    ([(2, 0, 4), (2, 3, 4), (2, 0, 4)], 1),
    ([(2, 0), (2, 0)], 1),
]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int64, np.int8, np.complex128])
@pytest.mark.parametrize("shapes,axis", CONCAT_CASES, ids=lambda v: str(v)[:24])
@pytest.mark.parametrize("skew", [0, 1, 8])
def test_concat_plan_reproduces_numpy_concatenate(dtype, shapes, axis, skew):
    xs = _pieces(shapes, dtype)
    want = np.concatenate(xs, axis=axis)
    es = np.dtype(dtype).itemsize
    mem = ByteMemory()
    # skew moves every other input off its boundary, in whole elements
    ins = [mem.tensor(x, (skew * es) if k % 2 else 0) for k, x in enumerate(xs)]
    y = mem.tensor(np.zeros(want.shape, want.dtype))
    a = axis % want.ndim
    outer, inner = int(np.prod(want.shape[:a])), int(np.prod(want.shape[a + 1:]))
    plan = mv.concat_plan(es, outer, [d * inner for d in _axis_dims(shapes, a)],
                          [t.ptr for t in ins], y.ptr)
    _replay_plan(mem, es, plan)
    assert y.array().tobytes() == want.tobytes()
    live = sum(1 for s in shapes if s[a] and outer)
    assert len(plan) == -(-live // mv.CONCAT_GROUP)
    assert all(1 <= len(g.srcs) <= mv.CONCAT_GROUP for g in plan)


def test_concat_plan_groups_non_empty_inputs():
    plan = mv.concat_plan(8, 1, [1] * 20, [256 * k for k in range(20)], 1 << 16)
    assert [len(g.srcs) for g in plan] == [16, 4]
    assert plan[1].dst == (1 << 16) + 16 * 8
    # four empty inputs leave sixteen: one launch
    plan = mv.concat_plan(8, 1, [1, 0] * 4 + [1] * 12, [256 * k for k in range(20)], 0)
    assert [len(g.srcs) for g in plan] == [16]
    assert 256 not in plan[0].srcs
    assert mv.concat_plan(2, 4, [3, 5], [0, 64], 128, group=1)[1].dst == 128 + 6
    assert mv.concat_plan(2, 0, [3, 5], [0, 64], 128) == []
    assert mv.concat_plan(2, 3, [0, 0], [0, 64], 128) == []


def test_concat_width_is_the_widest_every_access_allows():
    # KV-cache append, float16: rows of 16384 and 128 bytes -> 16-byte elements
    g, = mv.concat_plan(2, 2, [128 * 64, 64], [0, 1 << 20], 1 << 21)
    assert (g.width, g.offsets, g.pitch, g.rows) == (16, (0, 1024, 1032), 1032, 2)
    # rotary halves: 64-byte rows -> 16 bytes, 4 per half
    g, = mv.concat_plan(2, 14, [32, 32], [0, 4096], 8192)
    assert (g.width, g.offsets, g.pitch) == (16, (0, 4, 8), 8)
    # int64 shape vectors: one 8-byte element each
    g, = mv.concat_plan(8, 1, [1, 1, 1], [0, 256, 512], 1024)
    assert (g.width, g.offsets) == (8, (0, 1, 2, 3))
    # odd float16 rows stay 2-byte; odd int8 rows 1-byte
    assert mv.concat_plan(2, 3, [3, 5], [0, 256], 512)[0].width == 2
    assert mv.concat_plan(1, 3, [3, 5], [0, 256], 512)[0].width == 1
    # a pointer 8 bytes off a 16-byte boundary caps the width at 8
    assert mv.concat_plan(2, 3, [8, 8], [0, 264], 512)[0].width == 8
    # an element wider than every vector is moved as it is
    assert mv.concat_plan(16, 3, [1, 1], [0, 256], 512)[0].width == 16


def test_concat_output_pitch_limits_the_width_only_with_several_rows():
    # group 1 is aligned, group 2 has an odd row: with 3 rows the output pitch is odd bytes
    ptrs = [256 * k for k in range(17)]
    sizes = [8] * 16 + [1]
    assert [g.width for g in mv.concat_plan(2, 3, sizes, ptrs, 1 << 16)] == [2, 2]
    wide, tail = mv.concat_plan(2, 1, sizes, ptrs, 1 << 16)
    assert (wide.width, wide.pitch, tail.width) == (16, 16, 2)


def test_concat_table_layout_matches_the_cuda_struct():
    # struct CatInputs { const void* src[16]; long long off[17]; int n; } -> 272 bytes
    import ctypes

    assert f"#define EP_CAT_MAX {mv.CONCAT_GROUP}\n" in _CU
    assert ctypes.sizeof(mv.CatInputs) == 272
    assert (mv.CatInputs.src.offset, mv.CatInputs.off.offset, mv.CatInputs.n.offset) == \
        (0, 128, 264)
    g = mv.ConcatGroup(width=4, dst=0, pitch=5, rows=1, srcs=(64, 128), offsets=(0, 2, 5))
    t = g.table()
    assert (t.n, list(t.src[:2]), list(t.off[:3])) == (2, [64, 128], [0, 2, 5])
    with pytest.raises(ValueError):
        mv.ConcatGroup(width=1, dst=0, pitch=17, rows=1, srcs=(0,) * 17,
                       offsets=tuple(range(18))).table()


def test_every_concat_width_is_instantiated():
    assert re.search(r"void concat_##S\(CatInputs c, S##_t\* y, long long yp,\s*\\\s*"
                     r"long long rows\)", _CU)
    for w in mv.WIDTHS:
        assert f"EP_MOVEMENT(x{w})" in _CU


# ---------------------------------------------------------------- Concat: execute, emulated

@pytest.fixture
def emulated(monkeypatch):
    """Concat's launches and copies replayed in a :class:`ByteMemory`; returns (memory, log)."""
    from onnx_ep.providers.cuda import copies

    mem, log = ByteMemory(), []

    def launch(self, fn, grid, block, args, stream, shared=0):
        op, _, sfx = fn.rpartition("_x")
        vals = [v for v, _ in args]
        log.append(op)
        if op == "concat":
            assert len(args) == 4 and args[0][1] is None       # the struct travels by value
            assert grid[0] * block[0] >= vals[3] * vals[0].off[vals[0].n]
            _replay_concat(mem, int(sfx), *vals)
        elif op == "copy2d":
            _replay_copy2d(mem, int(sfx), *vals)
        else:
            raise AssertionError(f"unexpected launch {fn}")

    def copy_dtod(dst, src, nbytes, stream):
        log.append("memcpy")
        mem.bytes[dst:dst + nbytes] = mem.bytes[src:src + nbytes]

    monkeypatch.setattr(mv.CudaKernel, "function", lambda self, symbol, t: symbol)
    monkeypatch.setattr(mv.CudaKernel, "launch", launch)
    monkeypatch.setattr(copies, "copy_dtod", copy_dtod)
    return mem, log


def _run_concat(mem, xs, axis, opset=13):
    from onnx_ep.core.kernel import ExecutionContext

    want = np.concatenate(xs, axis=axis)
    ins = [mem.tensor(x) for x in xs]
    y = mem.tensor(np.zeros(want.shape, want.dtype))
    meta = _meta("Concat", [TensorSpec(x.dtype, x.shape) for x in xs], opset=opset, axis=axis)
    k = KERNELS["Concat"]
    assert k.supports(meta)
    k.bind(meta).execute_with_workspace(ExecutionContext(meta), ins, [y], None)
    assert y.array().tobytes() == want.tobytes()


@pytest.mark.parametrize("shapes,axis,launches", [
    ([(1, 2, 128, 64), (1, 2, 1, 64)], 2, ["concat"]),
    ([(1, 14, 1, 32), (1, 14, 1, 32)], -1, ["concat"]),
    ([(1,)] * 9, 0, ["concat"]),
    ([(3, 1, 5)] * 20, 1, ["concat", "concat"]),
    ([(4, 1, 2)] * 17, 1, ["concat", "copy2d"]),
    ([(1,)] * 17, 0, ["concat", "memcpy"]),
    ([(2, 0, 4), (2, 3, 4), (2, 0, 4)], 1, ["memcpy"]),
    ([(0, 4), (3, 4)], 0, ["memcpy"]),
    ([(2, 3)], 0, ["memcpy"]),
])
def test_concat_launches_once_per_group(emulated, shapes, axis, launches):
    mem, log = emulated
    _run_concat(mem, _pieces(shapes, np.float16), axis)
    assert log == launches


def test_concat_rejects_inputs_that_do_not_fill_the_output(emulated):
    from onnx_ep.core.kernel import ExecutionContext
    from onnx_ep.errors import NodeError

    mem, log = emulated
    xs = [mem.tensor(x) for x in _pieces([(2, 3), (2, 1)], np.float32)]
    y = mem.tensor(np.zeros((2, 5), np.float32))
    meta = _meta("Concat", [TensorSpec(x.dtype, x.shape) for x in xs], opset=13, axis=1)
    with pytest.raises(NodeError, match="add up to 4"):
        KERNELS["Concat"].bind(meta).execute_with_workspace(ExecutionContext(meta), xs, [y],
                                                            None)
    assert log == []


def test_a_transpose_that_only_moves_unit_axes_is_a_view_at_that_signature():
    from onnx_ep.core.kernel import NodeMeta, TensorSpec
    from onnx_ep.providers.cuda.kernels.movement import Transpose, moves_only_unit_axes

    assert moves_only_unit_axes((2, 1, 14, 64), (0, 2, 1, 3))        # decode: S = 1
    assert not moves_only_unit_axes((2, 7, 14, 64), (0, 2, 1, 3))    # prefill
    assert moves_only_unit_axes((1, 14, 1, 64), (0, 2, 1, 3))
    assert not moves_only_unit_axes((3, 4), (1, 0))
    spec = TensorSpec(np.float16, ("batch", "seq", 14, 64))
    meta = NodeMeta(name="t", op_type="Transpose", domain="", opset=21,
                    attrs={"perm": [0, 2, 1, 3]}, inputs=(spec,), input_names=("x",),
                    output_names=("y",))
    bound = Transpose("Transpose").bind(meta)
    assert bound.aliases_at([TensorSpec(np.float16, (1, 1, 14, 64))]) == {0: 0}
    assert bound.aliases_at([TensorSpec(np.float16, (1, 5, 14, 64))]) is None
    assert bound.aliases_at([spec]) is None                           # not known yet
    weight = NodeMeta(name="t", op_type="Transpose", domain="", opset=21,
                      attrs={"perm": [1, 0]}, inputs=(TensorSpec(np.float16, (1, 8)),),
                      constants={0: np.zeros((1, 8), np.float16)}, input_names=("w",),
                      output_names=("y",))
    assert Transpose("Transpose").bind(weight).aliases_at(
        [TensorSpec(np.float16, (1, 8))]) is None                     # a weight: copied


# ---------------------------------------------------------------- values the plan knows
# Slice's starts/ends/axes/steps, Tile's repeats, Expand's and Reshape's shape, Split's
# sizes, Squeeze's / Unsqueeze's axes: with the value in NodeMeta.constants, infer_outputs
# sizes the outputs as the reference shapes them; without it they stay unsized.

def _ref_shapes(op, arrays, opset, n_out=1, **attrs):
    """The reference's output shapes for ``arrays``, or ``None`` where it raises."""
    from onnx_ep.core.kernel import ExecutionContext
    from onnx_ep.errors import NodeError
    from onnx_ep.providers.cpu_reference import movement as ref_mv

    meta = _meta(op, [None if a is None else TensorSpec(a.dtype, a.shape) for a in arrays],
                 opset, n_out, **attrs)
    ref = {r.key.op_type: r for r in ref_mv.KERNELS}[op]
    slot = [None] * n_out
    try:
        ref.execute_with_workspace(ExecutionContext(meta), list(arrays), slot, None)
    except NodeError:
        return None
    return [np.shape(o) for o in slot]


def _inferred(op, arrays, opset, n_out=1, known=(1,), **attrs):
    """infer_outputs' shapes with the values of inputs ``known`` in meta.constants."""
    import attrs as attrs_lib

    meta = _meta(op, [None if a is None else TensorSpec(a.dtype, a.shape) for a in arrays],
                 opset, n_out, **attrs)
    meta = attrs_lib.evolve(meta, constants={i: arrays[i] for i in known
                                             if i < len(arrays) and arrays[i] is not None})
    specs = KERNELS[op].infer_outputs(meta)
    if any(s is None for s in specs):
        assert all(s is None for s in specs)
        return None
    assert all(s.dtype == arrays[0].dtype for s in specs)
    return [s.shape for s in specs]


I64 = np.int64
X4 = np.zeros((5, 6, 7), np.float32)

SLICE_CASES = [
    ([1], [4], None, None),
    ([0, -3], [100, -1], [0, 2], None),
    ([-1], [-100], [1], [-1]),
    ([4, 0], [0, 7], [-3, 2], [-2, 3]),
    ([2], [2], [0], [1]),
    ([10], [20], [1], [1]),
    ([0], [5], [0], [0]),                         # zero step: the reference raises
    ([0, 0], [1, 1], [1, 1], None),               # repeated axis: the reference raises
    ([0], [1, 2], None, None),                    # unequal lengths
    ([-7], [3], [-1], [2]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICE_CASES)
def test_slice_sizes_from_known_values_like_the_reference(starts, ends, axes, steps):
    arrays = [X4, np.array(starts, I64), np.array(ends, I64),
              None if axes is None else np.array(axes, np.int32),
              None if steps is None else np.array(steps, I64)]
    while arrays[-1] is None:
        arrays.pop()
    want = _ref_shapes("Slice", arrays, 13)
    assert _inferred("Slice", arrays, 13, known=(1, 2, 3, 4)) == want
    assert _inferred("Slice", arrays, 13, known=()) is None
    if len(arrays) > 3:                           # one given input still on the device
        assert _inferred("Slice", arrays, 13, known=(1, 2)) is None


@pytest.mark.parametrize("repeats", [[1, 2, 3], [0, 1, 1], [2, 2], [1, -1, 1]])
def test_tile_sizes_from_known_repeats(repeats):
    arrays = [X4, np.array(repeats, I64)]
    assert _inferred("Tile", arrays, 13) == _ref_shapes("Tile", arrays, 13)
    assert _inferred("Tile", arrays, 13, known=()) is None


@pytest.mark.parametrize("target", [[5, 6, 7], [2, 1, 1, 1], [6, 7], [1], [3, 6, 7], [0, 1, 1]])
def test_expand_sizes_from_a_known_shape(target):
    x = np.zeros((5, 1, 7), np.float32)
    arrays = [x, np.array(target, I64)]
    assert _inferred("Expand", arrays, 13) == _ref_shapes("Expand", arrays, 13)
    assert _inferred("Expand", arrays, 13, known=()) is None


@pytest.mark.parametrize("target,allowzero", [
    ([30, 7], 0), ([-1, 7], 0), ([0, -1], 0), ([5, 0, 7], 1), ([210], 0), ([-1], 0),
    ([4, -1], 0), ([-1, -1], 0), ([0, 0, 0, 0], 0), ([5, 6, 7, -2], 0), ([0, -1], 1),
    ([2, 3, 35], 0)])
def test_reshape_sizes_from_a_known_shape(target, allowzero):
    arrays = [X4, np.array(target, I64)]
    want = _ref_shapes("Reshape", arrays, 14, allowzero=allowzero)
    assert _inferred("Reshape", arrays, 14, allowzero=allowzero) == want
    assert _inferred("Reshape", arrays, 14, known=(), allowzero=allowzero) is None


@pytest.mark.parametrize("op,axes", [("Squeeze", [0, -1]), ("Squeeze", []), ("Squeeze", [1]),
                                     ("Squeeze", [0, 0]), ("Squeeze", [5]),
                                     ("Unsqueeze", [0, -1]), ("Unsqueeze", [2, 4]),
                                     ("Unsqueeze", [1, 1]), ("Unsqueeze", [7])])
def test_squeeze_unsqueeze_size_from_known_axes(op, axes):
    x = np.zeros((1, 4, 1, 3, 1), np.float32)
    arrays = [x, np.array(axes, I64)]
    assert _inferred(op, arrays, 13) == _ref_shapes(op, arrays, 13)
    assert _inferred(op, arrays, 13, known=()) is None
    # a symbolic dim is not known to be 1: Squeeze leaves it to the plan
    sym = _meta("Squeeze", [TensorSpec(F32, ("N", 4)), TensorSpec(I64, (1,))], opset=13)
    import attrs as attrs_lib

    assert KERNELS["Squeeze"].infer_outputs(
        attrs_lib.evolve(sym, constants={1: np.array([0], I64)})) == [None]


@pytest.mark.parametrize("split,n_out,extra", [
    ([2, 4], 2, {}), ([6, 0, 0], 3, {}), ([1, 1, 1], 3, {}), ([3], 2, {}), ([], 3, {}),
    ([], 4, {"num_outputs": 4}), ([7, -1], 2, {})])
def test_split_sizes_from_known_split(split, n_out, extra):
    arrays = [X4, np.array(split, I64)]
    opset = 18 if extra else 13
    want = _ref_shapes("Split", arrays, opset, n_out, axis=1, **extra)
    assert _inferred("Split", arrays, opset, n_out, axis=1, **extra) == want
    assert _inferred("Split", arrays, opset, n_out, known=(), axis=1, **extra) is None
