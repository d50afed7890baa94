"""GPU parity of the CUDA Resize / Upsample / GridSample kernels against cpu_reference:
exact bytes (resize.cu replays the reference's float64 arithmetic; the host tests check
the replay itself against the reference). ``providers=["cuda"]`` only, so a node the
device could not run or size fails instead of silently running on the host.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_resize.py
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.core.kernel import Parity
from tests.helpers.cuda_family import BF16, check, model, random

pytestmark = pytest.mark.cuda
EXACT = Parity.EXACT
F32, F16, U8 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.uint8)


def _f32(*v):
    return np.array(v, dtype=np.float32)


def _i64(*v):
    return np.array(v, dtype=np.int64)


# (id, dtype, x shape, attrs, opset, scales, sizes, roi): scales / sizes / roi are
# initializers (uploaded, read by the kernel on the device); onnx sizes Y from them
RESIZE = [
    ("nearest_ceil_asym", F32, (1, 2, 3, 4),
     {"mode": "nearest", "nearest_mode": "round_prefer_ceil",
      "coordinate_transformation_mode": "asymmetric"}, 19, None, _i64(1, 2, 7, 9), None),
    ("nearest_axes_not_larger", BF16, (1, 1, 2, 2),
     {"mode": "nearest", "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"}, 19,
     None, _i64(7, 8), None),
    ("linear_down_antialias", F16, (2, 3, 17, 1),
     {"mode": "linear", "antialias": 1}, 19, _f32(1, 1, 0.2, 1), None, None),
    ("linear_align_u8", U8, (1, 1, 4, 5),
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, 19,
     _f32(1, 1, 2, 1.5), None, None),
    ("cubic_exclude_outside", BF16, (1, 2, 4, 4),
     {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, 19,
     _f32(1, 1, 1.7, 0.8), None, None),
    ("cubic_antialias_sym", F32, (2, 9, 11),
     {"mode": "cubic", "antialias": 1,
      "coordinate_transformation_mode": "half_pixel_symmetric"}, 19, None, _i64(2, 4, 5),
     None),
    ("crop_extrapolate", F32, (1, 1, 4, 4),
     {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": 10.0, "axes": [2, 3]}, 19, None, _i64(3, 3),
     _f32(0.4, 0.6, 1.2, 1.7)),
    ("opset10_nearest", F32, (1, 1, 2, 4), {"mode": "nearest"}, 10, _f32(1, 1, 0.6, 0.6),
     None, None),
]


@pytest.mark.parametrize("case", RESIZE, ids=[c[0] for c in RESIZE])
def test_resize_matches_the_reference_bit_for_bit(cuda_device, case):
    _, dtype, shape, attrs, opset, scales, sizes, roi = case
    x = random(shape, dtype, seed=len(shape)) if dtype != U8 else \
        np.random.default_rng(0).integers(0, 256, size=shape).astype(U8)
    consts, names = {}, ["x"]
    if opset < 11:
        consts["scales"] = scales
        names.append("scales")
    else:
        for name, value in (("roi", roi), ("scales", scales), ("sizes", sizes)):
            if value is not None:
                consts[name] = value
            names.append(name if value is not None else "")
    m = model("Resize", {"x": x}, attrs, consts=consts, inputs=names, opset=opset)
    check(m, {"x": x}, EXACT)


def test_upsample_9_runs_on_cuda(cuda_device):
    x = random((1, 2, 3, 2), F32)
    m = model("Upsample", {"x": x}, {"mode": "linear"}, consts={"scales": _f32(1, 1, 2, 3)},
              inputs=["x", "scales"], opset=9)
    check(m, {"x": x}, EXACT)


GRID = [
    ("bilinear_zeros", F32, (1, 2, 3, 4), (1, 3, 5, 2), "bilinear", "zeros", 0, 16),
    ("bicubic_border_align", F32, (2, 1, 4, 3), (2, 2, 3, 2), "bicubic", "border", 1, 16),
    ("nearest_reflection", F16, (1, 3, 4, 4), (1, 4, 2, 2), "nearest", "reflection", 0, 20),
    ("linear_volumetric", BF16, (1, 2, 3, 2, 4), (1, 2, 2, 3, 3), "linear", "reflection", 1,
     20),
]


@pytest.mark.parametrize("case", GRID, ids=[c[0] for c in GRID])
def test_grid_sample_matches_the_reference_bit_for_bit(cuda_device, case):
    _, dtype, xs, gs, mode, padding, align, opset = case
    x = random(xs, dtype, seed=1)
    grid = (random(gs, F32, seed=2) * 0.8).astype(dtype)
    m = model("GridSample", {"x": x, "grid": grid},
              {"mode": mode, "padding_mode": padding, "align_corners": align}, opset=opset)
    check(m, {"x": x, "grid": grid}, EXACT)


@pytest.mark.parametrize("dtype", [F16, np.dtype(np.int64)], ids=str)
def test_center_crop_pad_moves_bytes_and_pads_zeros(cuda_device, dtype):
    x = random((20, 8, 3), dtype)
    m = model("CenterCropPad", {"x": x}, {"axes": [0, 1]},
              consts={"shape": _i64(10, 11)}, inputs=["x", "shape"], opset=18)
    check(m, {"x": x}, EXACT)


@pytest.mark.parametrize("size,align,dtype", [((2, 3, 5, 4), 0, F32), ((1, 2, 3, 4, 2), 1, F16)],
                         ids=["2d", "3d_align_f16"])
def test_affine_grid_keeps_its_promise(cuda_device, size, align, dtype):
    nd = len(size) - 2
    theta = random((size[0], nd, nd + 1), dtype, seed=5)
    m = model("AffineGrid", {"theta": theta}, {"align_corners": align},
              consts={"size": _i64(*size)}, inputs=["theta", "size"], opset=20)
    check(m, {"theta": theta})


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_col2im_sums_in_the_reference_order(cuda_device, dtype):
    image, block = (6, 7), (3, 2)
    attrs = {"strides": [1, 2], "pads": [1, 0, 2, 1], "dilations": [1, 1]}
    blocks = [(6 + 1 + 2 - 3) // 1 + 1, (7 + 0 + 1 - 2) // 2 + 1]
    x = random((2, 2 * 6, blocks[0] * blocks[1]), dtype, seed=6)
    m = model("Col2Im", {"x": x}, attrs, consts={"image_shape": _i64(*image),
                                                 "block_shape": _i64(*block)},
              inputs=["x", "image_shape", "block_shape"], opset=18)
    check(m, {"x": x}, EXACT)
