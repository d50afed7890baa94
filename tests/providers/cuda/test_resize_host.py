"""Host-side logic of the CUDA Resize / GridSample kernels (no GPU): supports, the
geometry structs, and a scalar Python replay of resize.cu's arithmetic.

The replay (``_replay_resize`` / ``_replay_grid``) performs resize.cu's float64 operations
in resize.cu's order, one output element at a time, from the same ``ResizeGeo`` the kernel
receives. It must equal cpu_reference bit for bit: that is the EXACT promise, checked
without a device (the GPU tests then check that the device does what the replay does).
"""

from __future__ import annotations

import ctypes
import itertools
import math

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity, TensorSpec
from onnx_ep.providers.cpu_reference import resize as ref_resize
from onnx_ep.providers.cuda.kernels import resize as rs

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
KERNELS = {k.key.op_type: k for k in rs.KERNELS}


def _meta(op, inputs, opset=19, **attrs):
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(inputs), output_names=("y",))


# ---------------------------------------------------------------- replay of resize.cu

def _sum(vals, pairwise):
    """resize.cu's NpSum: values pushed in order; rows of 8..128 along an innermost axis
    in numpy's pairwise order (8 accumulators, a tree, then the rest in order)."""
    n = len(vals)
    body = n - n % 8
    if not (pairwise and n >= 8):
        res = 0.0
        for v in vals:
            res += v
        return res
    r, res = [0.0] * 8, 0.0

    def tree():
        return ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))

    for i, v in enumerate(vals):
        if i < 8:
            r[i] = v
        elif i < body:
            r[i % 8] += v
        else:
            if i == body:
                res = tree()
            res += v
    return 0.0 + (tree() if body == n else res)


def _cubic(s, a):
    s = abs(s)
    near = ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0
    far = ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a
    return near if s <= 1.0 else (far if s < 2.0 else 0.0)


def _replay_resize(x, y_shape, g, scales, sizes, roi):
    xf = x.reshape(-1)
    nd = g.ndim
    pos = [g.pos[d] for d in range(nd)]
    ins = [g.in_[d] for d in range(nd)]

    def scale_of(d):
        if pos[d] < 0:
            return 1.0
        if scales is not None:
            return float(scales[pos[d]])
        if g.policy == 0:
            return float(sizes[pos[d]]) / float(ins[d])
        common, first = 0.0, True
        for e in range(nd):
            if pos[e] < 0:
                continue
            s = float(sizes[pos[e]]) / float(ins[e])
            if first or (s < common if g.policy == 1 else s > common):
                common = s
            first = False
        return common

    def coord_of(o, out_len, in_len, scale, lo, hi):
        y, width, m = float(o), scale * in_len, g.coord
        if m == 0:
            return (y + 0.5) / scale - 0.5
        if m == 1:
            off = in_len / 2.0 * (1.0 - out_len / width)
            return off + (y + 0.5) / scale - 0.5
        if m == 2:
            return (y + 0.5) / scale - 0.5 if width != 1.0 else -0.5
        if m == 3:
            return y * float(in_len - 1) / (width - 1.0) if width != 1.0 else 0.0
        if m == 4:
            return y / scale
        if m == 6:
            return (y + 0.5) / scale
        if width == 1.0:
            return (hi - lo) * float(in_len - 1) / 2.0 + lo * float(in_len - 1)
        return y * (hi - lo) * float(in_len - 1) / (width - 1.0) + lo * float(in_len - 1)

    def plan(d, o):
        a = {"scale": scale_of(d), "outside": False, "aa": False}
        lo, hi = 0.0, 1.0
        if g.coord == 5 and pos[d] >= 0:
            lo, hi = float(roi[pos[d]]), float(roi[g.naxes + pos[d]])
        a["skip"] = g.out[d] == ins[d] and a["scale"] == 1.0 and lo == 0.0 and hi == 1.0
        if a["skip"]:
            a["base"] = o
            return a
        n_in = ins[d]
        c = coord_of(o, g.out[d], n_in, a["scale"], lo, hi)
        if g.coord == 5:
            a["outside"] = c < 0.0 or c > float(n_in - 1)
        if g.mode == 0:
            fl = float(math.floor(c))
            frac = c - fl
            m = g.nearest
            idx = ((fl if frac <= 0.5 else fl + 1.0) if m == 0 else
                   (fl if frac < 0.5 else fl + 1.0) if m == 1 else fl if m == 2 else
                   float(math.ceil(c)) if m == 3 else
                   (float(math.ceil(c)) if a["scale"] < 1.0 else fl))
            a["base"] = min(max(int(idx), 0), n_in - 1)
            return a
        base = float(math.floor(c))
        ratio = c - base
        if ratio == 0.0:
            base, ratio = base - 1.0, 1.0
        a["base"], a["ratio"] = int(base), ratio
        a["aa"] = bool(g.antialias) and a["scale"] < 1.0
        if a["aa"]:
            support = 1.0 if g.mode == 1 else 2.0
            a["start"] = int(math.floor(-support / a["scale"])) + 1
            a["n"] = 2 - 2 * a["start"]
        else:
            a["start"], a["n"] = (0, 2) if g.mode == 1 else (-1, 4)

        def raw(k):
            off = float(a["start"] + k)
            if a["aa"]:
                dist = (off - ratio) * a["scale"]
                if g.mode == 1:
                    return min(max(1.0 - abs(dist), 0.0), 1.0)
                return _cubic(dist, g.cubic_a)
            if g.mode == 1:
                return 1.0 - ratio if k == 0 else ratio
            return _cubic(off - ratio, g.cubic_a)

        coeffs = [raw(k) for k in range(a["n"])]
        if a["aa"]:
            t = _sum(coeffs, True)
            coeffs = [c / t for c in coeffs]
        if g.exclude_outside:
            outs = [not 0 <= a["base"] + a["start"] + k < n_in for k in range(a["n"])]
            coeffs = [0.0 if o else c for o, c in zip(outs, coeffs)]
            t = _sum(coeffs, True)
            t = 1.0 if t == 0.0 else t
            coeffs = [c / t for c in coeffs]
        a["coeffs"] = coeffs
        return a

    def interp(plans, dims, lvl, off):
        if lvl < 0:
            return float(xf[off])
        d = dims[lvl]
        a = plans[d]
        if a["outside"]:
            return g.extrapolation
        vals = []
        for k in range(a["n"]):
            idx = min(max(a["base"] + a["start"] + k, 0), ins[d] - 1)
            vals.append(interp(plans, dims, lvl - 1, off + idx * g.stride[d]) * a["coeffs"][k])
        return _sum(vals, bool(g.pairwise[d]))

    out = np.empty(int(np.prod(y_shape)), dtype=np.float64 if g.mode else x.dtype)
    for i, o in enumerate(itertools.product(*[range(n) for n in y_shape])):
        plans = [plan(d, o[d]) for d in range(nd)]
        off = sum(p["base"] * g.stride[d] for d, p in enumerate(plans)
                  if p["skip"] or g.mode == 0)
        if g.mode == 0:
            outside = any(p["outside"] for p in plans)
            out[i] = np.array(g.extrapolation).astype(x.dtype) if outside else xf[off]
            continue
        dims = [d for d in range(nd) if not plans[d]["skip"]]
        out[i] = interp(plans, dims, len(dims) - 1, off)
    if g.mode and x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return np.clip(np.rint(out), info.min, info.max).astype(x.dtype).reshape(y_shape)
    return out.astype(x.dtype).reshape(y_shape)


def _reference(x, attrs, opset, scales=None, sizes=None, roi=None):
    inputs = [x, roi, scales, sizes] if opset >= 11 else [x, scales]
    specs = [None if v is None else TensorSpec(v.dtype, v.shape) for v in inputs]
    meta = _meta("Resize", specs, opset, **attrs)
    ctx = ExecutionContext(meta)
    return meta, ref_resize.Resize("Resize").run(ctx, *inputs)


def _replay(meta, x, y_shape, scales=None, sizes=None, roi=None):
    opts = rs.resize_options(meta)
    axes = rs.resize_axes(meta, x.ndim, opts)
    g = rs.resize_geometry(x.shape, y_shape, axes, opts,
                           roi.dtype if roi is not None else np.float32)
    return _replay_resize(x, y_shape, g, scales, sizes, roi)


def _f32(*v):
    return np.array(v, dtype=np.float32)


def _i64(*v):
    return np.array(v, dtype=np.int64)


CASES = [
    # (attrs, opset, shape, scales, sizes, roi)
    ({"mode": "nearest"}, 19, (1, 1, 2, 2), _f32(1, 1, 2, 3), None, None),
    ({"mode": "nearest"}, 19, (1, 1, 2, 4), _f32(1, 1, 0.6, 0.6), None, None),
    ({"mode": "nearest", "nearest_mode": "ceil",
      "coordinate_transformation_mode": "half_pixel"}, 19, (1, 1, 4, 4), None,
     _i64(1, 1, 8, 8), None),
    ({"mode": "nearest", "nearest_mode": "floor",
      "coordinate_transformation_mode": "align_corners"}, 19, (1, 1, 4, 4), None,
     _i64(1, 1, 8, 8), None),
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil",
      "coordinate_transformation_mode": "asymmetric"}, 19, (1, 1, 4, 4), None,
     _i64(1, 1, 8, 8), None),
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil",
      "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, 19, (1, 3, 5), None,
     _i64(1, 3, 9), None),
    ({"mode": "nearest", "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"}, 19,
     (1, 1, 2, 2), None, _i64(7, 8), None),
    ({"mode": "nearest", "keep_aspect_ratio_policy": "not_smaller", "axes": [2, 3]}, 19,
     (1, 1, 4, 4), None, _i64(3, 2), None),
    ({"mode": "linear"}, 19, (1, 1, 4, 4), _f32(1, 1, 0.6, 0.6), None, None),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, 19,
     (1, 1, 2, 2), _f32(1, 1, 2, 2), None, None),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, 19,
     (1, 1, 4, 4), _f32(1, 1, 0.6, 0.6), None, None),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, 19,
     (1, 1, 4, 4), None, _i64(1, 1, 3, 1), None),
    ({"mode": "linear", "antialias": 1}, 19, (1, 1, 4, 4), _f32(1, 1, 0.6, 0.6), None, None),
    ({"mode": "linear", "antialias": 1}, 19, (2, 3, 40), None, _i64(2, 3, 3), None),
    ({"mode": "linear", "antialias": 1}, 19, (3, 100), None, _i64(3, 2), None),
    ({"mode": "cubic", "antialias": 1}, 19, (2, 61), _f32(1, 0.1), None, None),
    ({"mode": "cubic", "antialias": 1}, 19, (40, 30), None, _i64(3, 4), None),
    ({"mode": "cubic"}, 19, (1, 1, 4, 4), _f32(1, 1, 0.8, 0.8), None, None),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, 19, (1, 1, 4, 4),
     _f32(1, 1, 1.7, 1.7), None, None),
    ({"mode": "cubic", "coordinate_transformation_mode": "asymmetric"}, 19, (1, 1, 4, 4),
     _f32(1, 1, 2, 2), None, None),
    ({"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, 19,
     (1, 1, 4, 4), None, _i64(1, 1, 9, 10), None),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}, 19,
     (1, 1, 4, 4), None, _i64(1, 1, 3, 3), _f32(0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8)),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": 10.0}, 19, (1, 1, 4, 4), None, _i64(1, 1, 3, 3),
     _f32(0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7)),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
      "axes": [3, 2]}, 19, (1, 1, 4, 4), None, _i64(3, 3), _f32(0.6, 0.4, 0.8, 0.6)),
    ({"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": -3.0}, 19, (1, 1, 4, 4), None, _i64(1, 1, 3, 3),
     _f32(0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7)),
    ({"mode": "linear"}, 10, (1, 1, 2, 4), _f32(1, 1, 2, 1.5), None, None),
    ({"mode": "nearest"}, 10, (1, 1, 2, 4), _f32(1, 1, 0.6, 0.6), None, None),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "uint8"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_replay_of_resize_cu_equals_the_reference_bit_for_bit(case, dtype):
    attrs, opset, shape, scales, sizes, roi = CASES[case]
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(case)
    if dt.kind == "u":
        x = rng.integers(0, 256, size=shape).astype(dt)
    else:
        x = (rng.standard_normal(shape) * 3).astype(np.float32).astype(dt)
    meta, want = _reference(x, attrs, opset, scales, sizes, roi)
    if not KERNELS["Resize"].supports(meta):
        pytest.skip(f"declined: {KERNELS['Resize'].supports(meta).reason}")
    got = _replay(meta, x, want.shape, scales, sizes, roi)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


# ---------------------------------------------------------------- supports / structs

def test_resize_geo_matches_the_cu_struct_layout():
    # 3 x 8 int64, 2 x 8 int32, 9 int32 (+4 padding), 2 doubles
    assert ctypes.sizeof(rs.ResizeGeo) == 192 + 64 + 36 + 4 + 16
    assert rs.ResizeGeo.cubic_a.offset == 296
    assert ctypes.sizeof(rs.GridGeo) == 48 + 24 + 16


def test_resize_geometry_flags_innermost_axes_for_pairwise_sums():
    opts = rs.resize_options(_meta("Resize", [TensorSpec(F32, (2, 3, 4, 1))],
                                   mode="linear"))
    g = rs.resize_geometry((2, 3, 4, 1), (2, 3, 8, 1), [2, 3], opts)
    assert [g.pairwise[d] for d in range(4)] == [0, 0, 1, 1]
    assert [g.pos[d] for d in range(4)] == [-1, -1, 0, 1]
    assert [g.stride[d] for d in range(4)] == [12, 4, 1, 1]


@pytest.mark.parametrize("dtype,mode,ok", [
    (F32, "cubic", True), (np.dtype(np.float16), "linear", True), (BF16, "nearest", True),
    (np.dtype(np.uint8), "linear", True), (np.dtype(np.int64), "nearest", True),
    (np.dtype(np.int64), "linear", False), (np.dtype(np.float64), "linear", False),
])
def test_resize_supports_dtypes_by_mode(dtype, mode, ok):
    meta = _meta("Resize", [TensorSpec(dtype, (1, 1, "H", "W")), None,
                            TensorSpec(F32, (4,))], mode=mode)
    assert bool(KERNELS["Resize"].supports(meta)) is ok


def test_resize_declines_unknown_modes_and_int_crop_extrapolation():
    x = TensorSpec(np.dtype(np.uint8), (1, 1, 4, 4))
    sizes = TensorSpec(np.dtype(np.int64), (4,))
    meta = _meta("Resize", [x, TensorSpec(F32, (8,)), None, sizes], mode="nearest",
                 coordinate_transformation_mode="tf_crop_and_resize")
    assert not KERNELS["Resize"].supports(meta)
    assert not KERNELS["Resize"].supports(_meta("Resize", [x, None, None, sizes],
                                                mode="bicubic"))
    assert not KERNELS["Resize"].supports(_meta("Resize", [x, None, None, sizes],
                                                axes=[2, 2]))
    assert KERNELS["Resize"].supports(_meta("Resize", [x, None, None, sizes], axes=[-1, 2]))


def test_resize_promises_exact_and_leaves_the_shape_to_the_plan():
    meta = _meta("Resize", [TensorSpec(F32, (1, 1, 4, 4)), None, TensorSpec(F32, (4,))])
    assert KERNELS["Resize"].bind(meta).parity == Parity.EXACT
    assert KERNELS["Resize"].infer_outputs(meta) == [None]


# ---------------------------------------------------------------- GridSample

def _replay_grid(x, grid, mode, padding, align):
    nd = x.ndim - 2
    dims = x.shape[2:]
    out_shape = (grid.shape[0], x.shape[1], *grid.shape[1:-1])
    xf = x.astype(np.float64)
    out = np.empty(out_shape, dtype=np.float64)

    def bounds(d):
        return (0.0, d - 1.0) if align else (-0.5, d - 0.5)

    def reflect(v, lo, hi):
        span = hi - lo
        if span <= 0:
            return lo
        below, above = v < lo, v > hi
        dx = lo - v if below else v - hi
        n = math.floor(dx / span)
        r = dx - n * span
        even = math.fmod(n, 2.0) == 0.0
        return ((lo + r if even else hi - r) if below else
                (hi - r if even else lo + r) if above else v)

    def pixel(n, c, idx):
        valid, fixed = True, []
        for j, d in zip(idx, dims):
            if padding == 2:
                j = int(math.trunc(reflect(float(j), *bounds(d))))
            valid = valid and 0 <= j < d
            fixed.append(min(max(j, 0), d - 1))
        v = float(xf[(n, c, *fixed)])
        return 0.0 if padding == 0 and not valid else v

    for n, c, *o in itertools.product(*[range(s) for s in out_shape]):
        gv = [float(grid[(n, *o, nd - 1 - i)]) for i in range(nd)]
        coords = []
        for i, d in enumerate(dims):
            cc = (gv[i] + 1.0) / 2.0 * (d - 1.0) if align else ((gv[i] + 1.0) * d - 1.0) / 2.0
            if mode == 0:
                cc = float(np.rint(cc))
            if padding == 1 and mode != 2:
                cc = min(max(cc, 0.0), d - 1.0)
            elif padding == 2:
                cc = reflect(cc, *bounds(d))
            coords.append(cc)
        if mode == 0:
            out[(n, c, *o)] = pixel(n, c, [int(cc) for cc in coords])
            continue
        base = [math.floor(cc) for cc in coords]
        frac = [cc - b for cc, b in zip(coords, base)]
        offs = (0, 1) if mode == 1 else (-1, 0, 1, 2)
        ws = [[1.0 - f, f] if mode == 1 else list(ref_resize._cubic_weights(np.float64(f)))
              for f in frac]
        acc = 0.0
        for combo in itertools.product(range(len(offs)), repeat=nd):
            w = 1.0
            for i, k in enumerate(combo):
                w = w * float(ws[i][k])
            acc = acc + w * pixel(n, c, [b + offs[k] for b, k in zip(base, combo)])
        out[(n, c, *o)] = acc
    return out.astype(x.dtype)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_replay_of_grid_sample_equals_the_reference_bit_for_bit(mode, padding, align):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    grid = (rng.standard_normal((1, 3, 5, 2)) * 0.9).astype(np.float32)
    meta = _meta("GridSample", [TensorSpec(F32, x.shape), TensorSpec(F32, grid.shape)], 16,
                 mode=mode, padding_mode=padding, align_corners=align)
    want = ref_resize.GridSample("GridSample").run(ExecutionContext(meta), x, grid)
    got = _replay_grid(x, grid, rs.GRID_MODES[mode], rs.GRID_PADDING[padding], align)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert KERNELS["GridSample"].supports(meta)
    assert KERNELS["GridSample"].infer_outputs(meta) == [TensorSpec(F32, (1, 2, 3, 5))]


def test_grid_sample_volumetric_replay_and_declines():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 1, 3, 2, 4)).astype(np.float32)
    grid = (rng.standard_normal((1, 2, 2, 3, 3)) * 1.2).astype(np.float32)
    meta = _meta("GridSample", [TensorSpec(F32, x.shape), TensorSpec(F32, grid.shape)], 20,
                 mode="linear", padding_mode="reflection")
    want = ref_resize.GridSample("GridSample").run(ExecutionContext(meta), x, grid)
    got = _replay_grid(x, grid, 1, 2, False)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    mixed = _meta("GridSample", [TensorSpec(F32, x.shape),
                                 TensorSpec(np.dtype(np.float16), grid.shape)], 20)
    assert not KERNELS["GridSample"].supports(mixed)


# ---------------------------------------------------------------- CenterCropPad

@pytest.mark.parametrize("x_shape,target,axes", [
    ((20, 10, 3), (10, 7, 3), None), ((10, 7, 3), (20, 10, 3), None),
    ((20, 8, 3), (10, 10), [0, 1]), ((3, 20, 8), (10, 9), [1, 2]),
    ((20, 8, 3), (10, 9), [-3, -2]), ((5, 6), (5, 6), None),
])
def test_center_crop_pad_geometry_replays_the_reference(x_shape, target, axes):
    x = np.arange(int(np.prod(x_shape)), dtype=np.int32).reshape(x_shape) + 1
    attrs = {} if axes is None else {"axes": axes}
    meta = _meta("CenterCropPad", [TensorSpec(x.dtype, x.shape),
                                   TensorSpec(np.dtype(np.int64), (len(target),))], 18,
                 **attrs)
    want = ref_resize.CenterCropPad("CenterCropPad").run(
        ExecutionContext(meta), x, np.array(target, dtype=np.int64))
    g = rs.crop_geometry(x.shape, want.shape)
    got = np.zeros(want.shape, dtype=x.dtype)
    for o in itertools.product(*[range(n) for n in want.shape]):
        src = [o[d] + g.shift[d] for d in range(x.ndim)]
        if all(0 <= s < n for s, n in zip(src, x.shape)):
            got[o] = x[tuple(src)]
    np.testing.assert_array_equal(got, want)
    assert KERNELS["CenterCropPad"].supports(meta)


def test_resize_bounds_antialias_rows_to_what_the_kernel_replays():
    opts = rs.resize_options(_meta("Resize", [TensorSpec(F32, (3, 100))], mode="linear",
                                   antialias=1))
    assert rs.max_taps((3, 100), (3, 2), [0, 1], opts) == 100
    assert rs.max_taps((3, 300), (3, 2), [0, 1], opts) > rs.MAX_TAPS
    x = TensorSpec(F32, (3, 300))
    meta = NodeMeta(name="n", op_type="Resize", domain="", opset=19,
                    attrs={"mode": "linear", "antialias": 1},
                    inputs=(x, None, None, TensorSpec(np.dtype(np.int64), (2,))),
                    outputs=(TensorSpec(F32, (3, 2)),), output_names=("y",))
    assert not KERNELS["Resize"].supports(meta)


# ---------------------------------------------------------------- AffineGrid, Col2Im

def _replay_affine(theta, spatial, align):
    nd = len(spatial)
    out = np.empty((theta.shape[0], *spatial, nd), dtype=np.float64)

    def base_of(k, d):
        if align:
            if d <= 1:
                return -1.0
            return 1.0 if k == d - 1 else float(k) * (2.0 / float(d - 1)) + -1.0
        return (2.0 * k + 1.0) / d - 1.0

    for n, *p in itertools.product(range(theta.shape[0]), *[range(d) for d in spatial]):
        base = [base_of(p[nd - 1 - j], spatial[nd - 1 - j]) for j in range(nd)] + [1.0]
        for i in range(nd):
            acc = 0.0
            for j in range(nd + 1):
                acc += float(theta[n, i, j]) * base[j]
            out[(n, *p, i)] = acc
    return out.astype(theta.dtype)


@pytest.mark.parametrize("size,align", [((2, 3, 5, 4), 0), ((2, 3, 5, 4), 1),
                                        ((1, 2, 3, 4, 2), 0), ((1, 2, 1, 4, 3), 1)])
def test_affine_grid_replay_keeps_the_promise(size, align):
    from onnx_ep.testing.ulp import judge

    nd = len(size) - 2
    theta = np.random.default_rng(5).standard_normal((size[0], nd, nd + 1)).astype(F32)
    meta = _meta("AffineGrid", [TensorSpec(F32, theta.shape),
                                TensorSpec(np.dtype(np.int64), (len(size),))], 20,
                 align_corners=align)
    want = ref_resize.AffineGrid("AffineGrid").run(ExecutionContext(meta), theta,
                                                  np.array(size, dtype=np.int64))
    got = _replay_affine(theta, size[2:], align)
    assert judge(got, want, KERNELS["AffineGrid"].bind(meta).parity).kept
    assert KERNELS["AffineGrid"].supports(meta)


def _replay_col2im(x, image, block, dil, strides, pads):
    nd = len(image)
    n_k = int(np.prod(block))
    blocks = [(image[i] + pads[i] + pads[nd + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(nd)]
    n, c = x.shape[0], x.shape[1] // n_k
    xf = x.astype(np.float32)
    out = np.zeros((n, c, *image), dtype=np.float32)
    for nn, cc, *p in itertools.product(range(n), range(c), *[range(d) for d in image]):
        acc = np.float32(0.0)
        for kidx, ks in enumerate(itertools.product(*[range(k) for k in block])):
            bs = []
            for d in range(nd):
                t = p[d] + pads[d] - ks[d] * dil[d]
                bs.append(t // strides[d] if t >= 0 and t % strides[d] == 0 else -1)
            if all(0 <= b < blocks[d] for d, b in enumerate(bs)):
                bidx = int(np.ravel_multi_index(bs, blocks))
                acc = np.float32(acc + xf[nn, cc * n_k + kidx, bidx])
        out[(nn, cc, *p)] = acc
    return out.astype(x.dtype)


@pytest.mark.parametrize("image,block,attrs", [
    ((5, 5), (1, 5), {}), ((5, 5), (2, 2), {"strides": [2, 2]}),
    ((6, 6), (2, 2), {"dilations": [1, 5]}), ((5, 5), (2, 2), {"pads": [1, 0, 1, 0]}),
    ((3, 4, 5), (1, 1, 5), {}), ((6, 7), (3, 2), {"strides": [1, 2], "pads": [1, 0, 2, 1]}),
])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_col2im_replay_equals_the_reference_bit_for_bit(image, block, attrs, dtype):
    nd = len(image)
    dil = attrs.get("dilations", [1] * nd)
    strides = attrs.get("strides", [1] * nd)
    pads = attrs.get("pads", [0] * (2 * nd))
    blocks = [(image[i] + pads[i] + pads[nd + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(nd)]
    x = np.random.default_rng(6).standard_normal(
        (2, 2 * int(np.prod(block)), int(np.prod(blocks)))).astype(dtype)
    specs = [TensorSpec(x.dtype, x.shape), TensorSpec(np.dtype(np.int64), (nd,)),
             TensorSpec(np.dtype(np.int64), (nd,))]
    meta = _meta("Col2Im", specs, 18, **attrs)
    want = ref_resize.Col2Im("Col2Im").run(ExecutionContext(meta), x, np.array(image),
                                         np.array(block))
    got = _replay_col2im(x, list(image), list(block), dil, strides, pads)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert KERNELS["Col2Im"].supports(meta)
    g = rs.col2im_geometry(meta, x.shape, want.shape)
    assert [g.image[i] for i in range(nd)] == list(image) and g.l == x.shape[2]


# ---------------------------------------------------------------- Y sized from known values
# Resize's scales / sizes, CenterCropPad's shape, AffineGrid's size, Col2Im's image and
# block shapes: with their values in NodeMeta.constants, infer_outputs sizes Y as the
# reference shapes it; without them Y is left to the plan.

def _known(meta, values):
    """``meta`` with the input values the plan knows, by input position."""
    import attrs

    return attrs.evolve(meta, constants={i: np.asarray(v) for i, v in values.items()
                                         if v is not None})


def _ref_shape(op, arrays, opset, **attrs):
    """The reference's Y shape, or ``None`` where it raises."""
    from onnx_ep.errors import NodeError

    meta = _meta(op, [None if a is None else TensorSpec(a.dtype, a.shape) for a in arrays],
                 opset, **attrs)
    ref = {r.key.op_type: r for r in ref_resize.KERNELS}[op]
    slot = [None]
    try:
        ref.execute_with_workspace(ExecutionContext(meta), list(arrays), slot, None)
    except NodeError:
        return None
    return np.shape(slot[0])


def _check_known(op, arrays, opset, **attrs):
    meta = _meta(op, [None if a is None else TensorSpec(a.dtype, a.shape) for a in arrays],
                 opset, **attrs)
    want = _ref_shape(op, arrays, opset, **attrs)
    got = KERNELS[op].infer_outputs(_known(meta, dict(enumerate(arrays[1:], 1))))
    assert got == [None if want is None else TensorSpec(arrays[0].dtype, want)]
    assert KERNELS[op].infer_outputs(meta) == [None]     # values on the device only
    return want


EMPTY_F = np.zeros(0, np.float32)


@pytest.mark.parametrize("scales,sizes,policy,axes", [
    ([1, 1, 2, 0.5], None, "stretch", None),
    ([1, 1, 1.7, 0.26], None, "stretch", None),
    ([0.6, 3.0], None, "stretch", [2, -1]),
    (None, [1, 1, 5, 3], "stretch", None),
    (None, [7, 2], "not_larger", [2, 3]),
    (None, [7, 2], "not_smaller", [2, 3]),
    ([1, 1, 0, 1], None, "stretch", None),        # a zero scale: the reference raises
    (None, [5, 3], "stretch", None),              # one size for four axes
    ([1, 1, 2, 2], [1, 1, 8, 8], "stretch", None),  # both given
])
def test_resize_sizes_y_from_known_scales_or_sizes(scales, sizes, policy, axes):
    x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    attrs = {"mode": "nearest", "keep_aspect_ratio_policy": policy}
    if axes is not None:
        attrs["axes"] = axes
    arrays = [x, EMPTY_F, EMPTY_F if scales is None else np.array(scales, np.float32),
              None if sizes is None else np.array(sizes, np.int64)]
    if sizes is None:
        arrays.pop()
    _check_known("Resize", arrays, 19, **attrs)


def test_resize_10_and_upsample_size_y_from_known_scales():
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    scales = np.array([1, 1, 2.5, 0.5], np.float32)
    assert _check_known("Resize", [x, scales], 10) == (1, 1, 7, 2)
    assert _check_known("Upsample", [x, np.array([1, 1, 2, 3], np.float32)], 9) == \
        (1, 1, 6, 12)
    assert _check_known("Upsample", [x, scales], 9) is None    # Upsample never shrinks


def test_resize_with_empty_scales_spec_needs_only_known_sizes():
    x = TensorSpec(F32, (1, 1, 3, 4))
    meta = _meta("Resize", [x, None, TensorSpec(F32, (0,)), TensorSpec(np.int64, (4,))])
    assert KERNELS["Resize"].infer_outputs(
        _known(meta, {3: np.array([1, 1, 6, 2], np.int64)})) == [TensorSpec(F32, (1, 1, 6, 2))]
    unsure = _meta("Resize", [x, None, TensorSpec(F32, ("k",)), TensorSpec(np.int64, (4,))])
    assert KERNELS["Resize"].infer_outputs(
        _known(unsure, {3: np.array([1, 1, 6, 2], np.int64)})) == [None]


@pytest.mark.parametrize("target,axes", [([2, 8], [1, 2]), ([5, 5, 5], None), ([3], [-1]),
                                         ([2, 2], [0, 0]), ([-1, 3], [1, 2]), ([4], None)])
def test_center_crop_pad_sizes_y_from_a_known_shape(target, axes):
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    attrs = {} if axes is None else {"axes": axes}
    _check_known("CenterCropPad", [x, np.array(target, np.int64)], 18, **attrs)


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 4, 5], [3, 3, 4, 5], [2, 3, 4]])
def test_affine_grid_sizes_y_from_a_known_size(size):
    nd = 3 if len(size) == 5 else 2
    theta = np.zeros((2, nd, nd + 1), np.float32)
    _check_known("AffineGrid", [theta, np.array(size, np.int64)], 20)


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 5], [2, 2], {}), ([6, 4], [3, 2], {"strides": [3, 2]}),
    ([5, 5], [2, 2], {"pads": [1, 1, 1, 1], "dilations": [2, 1]}), ([5, 5], [3, 3], {})])
def test_col2im_sizes_y_from_known_image_and_block_shapes(image, block, attrs):
    nd = len(image)
    dil = attrs.get("dilations", [1] * nd)
    strides = attrs.get("strides", [1] * nd)
    pads = attrs.get("pads", [0] * (2 * nd))
    blocks = [(image[i] + pads[i] + pads[nd + i] - dil[i] * (block[i] - 1) - 1) // strides[i]
              + 1 for i in range(nd)]
    x = np.zeros((2, 3 * int(np.prod(block)), int(np.prod(blocks))), np.float32)
    want = _check_known("Col2Im", [x, np.array(image, np.int64), np.array(block, np.int64)],
                        18, **attrs)
    assert want == (2, 3, *image)
    wrong = np.zeros((2, 3 * int(np.prod(block)), int(np.prod(blocks)) + 1), np.float32)
    assert _check_known("Col2Im", [wrong, np.array(image, np.int64),
                                   np.array(block, np.int64)], 18, **attrs) is None
