"""Host-side logic of the CUDA movement kernels (no GPU): coalescing, element widening,
the Transpose route, broadcast strides, Slice attributes and shape inference.

The geometry tests replay what ``movement.cu`` does with the planned geometry in numpy
(the kernels are one line each: ``y[i] = x[offset(i)]``), so a wrong plan fails here.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onnx_ep.core.kernel import NodeMeta, Parity, TensorSpec
from onnx_ep.providers.cuda.kernels import movement as mv
from onnx_ep.providers.cuda.kernels.base import Geo, contiguous_strides


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
