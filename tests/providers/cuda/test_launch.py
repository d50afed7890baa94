"""providers/cuda/launch.py: grid_1d, plain launches, prebuilt launches (Params,
prepare/Launch on the ctypes and bindings paths), launch_cached, and the per-node launch
caches of elementwise, activation and Cast nodes.

The CPU tests drive both paths with stand-in driver entry points (a ctypes callback with
cuLaunchKernel's C signature, a Python function shaped like cuda-bindings' wrapper); the
GPU tests launch real kernels on every path this machine has.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

from onnx_ep.errors import CudaError
from onnx_ep.providers.cuda import copies, device, driver, launch
from onnx_ep.providers.cuda.kernels.base import F32, F64, I64, PTR

# ---------------------------------------------------------------- CPU: stand-in drivers

#: cuLaunchKernel's C signature, for a ctypes stand-in
PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class FakeCtypesDriver:
    """A ctypes function pointer standing in for libcuda's cuLaunchKernel: records each call,
    reading ``n_params`` pointers out of kernelParams, and returns ``result``."""

    def __init__(self, n_params: int, result: int = 0) -> None:
        self.n_params = n_params
        self.result = result
        self.calls: list[dict[str, Any]] = []

        def fake_launch(f, gx, gy, gz, bx, by, bz, shm, stream, params, extra):  # noqa: ANN001
            slots = (ctypes.c_void_p * self.n_params).from_address(params) if params else []
            self.calls.append({"f": f, "grid": (gx, gy, gz), "block": (bx, by, bz),
                               "shared": shm, "stream": stream, "extra": extra,
                               "slots": [int(p) for p in slots]})
            return self.result

        self.fn = PROTO(fake_launch)


def _fn(name: str = "fill_f32", handle: int = 0x1234) -> launch.Function:
    return launch.Function(handle, name, None)  # type: ignore[arg-type]


def _stream(handle: int = 0x99) -> device.Stream:
    return device.Stream(None, handle)  # type: ignore[arg-type]


class Pair(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int64), ("b", ctypes.c_int64)]


def test_grid_1d_covers_n_with_at_least_one_block() -> None:
    assert launch.grid_1d(0) == (1, 1, 1)
    assert launch.grid_1d(1) == (1, 1, 1)
    assert launch.grid_1d(256) == (1, 1, 1)
    assert launch.grid_1d(257) == (2, 1, 1)
    assert launch.grid_1d(10**12)[0] == 65535 * 32   # grid-stride loops cover the rest


def test_pack_args_splits_values_and_ctypes() -> None:
    packed = launch.pack_args([(1, ctypes.c_void_p), (2.5, ctypes.c_float), (7, ctypes.c_int64)])
    assert packed == ((1, 2.5, 7), (ctypes.c_void_p, ctypes.c_float, ctypes.c_int64))


def test_params_point_at_a_copy_of_every_argument() -> None:
    pair = Pair(3, 4)
    p = launch.Params([(0xABC0, ctypes.c_void_p), (7, ctypes.c_int64), (1.5, ctypes.c_float),
                        (0.25, ctypes.c_double), (np.int64(9), ctypes.c_int32), (pair, None)])
    pair.a = 99                                      # the array holds its own copy
    slots = (ctypes.c_void_p * 6).from_address(p.address)
    assert ctypes.c_void_p.from_address(slots[0]).value == 0xABC0
    assert ctypes.c_int64.from_address(slots[1]).value == 7
    assert ctypes.c_float.from_address(slots[2]).value == 1.5
    assert ctypes.c_double.from_address(slots[3]).value == 0.25
    assert ctypes.c_int32.from_address(slots[4]).value == 9
    copied = Pair.from_address(slots[5])
    assert (copied.a, copied.b) == (3, 4)
    assert len(p) == 6


def test_params_of_no_arguments_is_a_null_array() -> None:
    assert launch.Params([]).address == 0


def test_params_refuse_a_by_value_argument_that_is_not_a_struct() -> None:
    with pytest.raises(TypeError, match="ctypes.Structure"):
        launch.Params([(5, None)])


def _ctypes_path(monkeypatch: pytest.MonkeyPatch, n_params: int, *,
                 fresh_cache: bool = False) -> FakeCtypesDriver:
    """Route every launch through the ctypes path onto a fake driver (and, with
    ``fresh_cache``, start from empty launch caches)."""
    fake = FakeCtypesDriver(n_params=n_params)
    monkeypatch.setattr(launch, "_ctypes_cuLaunchKernel", lambda: fake.fn)
    monkeypatch.setattr(launch, "launch_path", lambda: "ctypes")
    if fresh_cache:
        monkeypatch.setattr(launch, "_cached", {})
        monkeypatch.setattr(launch, "_seen", {})
    return fake


def test_ctypes_launch_passes_handles_geometry_and_the_prebuilt_array(monkeypatch) -> None:
    fake = FakeCtypesDriver(n_params=2)
    monkeypatch.setattr(launch, "_ctypes_cuLaunchKernel", lambda: fake.fn)
    rec = launch.prepare(_fn(), (3, 2, 1), (256, 1, 1), [(0x5000, PTR),
                                                           (11, I64)], _stream(),
                          shared_bytes=64, path="ctypes")
    assert rec.path == "ctypes"
    rec()
    rec()                                            # reusable: the same array both times
    assert len(fake.calls) == 2 and fake.calls[0] == fake.calls[1]
    call = fake.calls[0]
    assert call["f"] == 0x1234 and call["stream"] == 0x99 and call["extra"] is None
    assert call["grid"] == (3, 2, 1) and call["block"] == (256, 1, 1) and call["shared"] == 64
    assert ctypes.c_void_p.from_address(call["slots"][0]).value == 0x5000
    assert ctypes.c_int64.from_address(call["slots"][1]).value == 11


def test_ctypes_launch_failure_raises_cuda_error_with_the_driver_name(monkeypatch) -> None:
    pytest.importorskip("cuda.bindings.driver")
    fake = FakeCtypesDriver(n_params=1, result=1)    # CUDA_ERROR_INVALID_VALUE
    monkeypatch.setattr(launch, "_ctypes_cuLaunchKernel", lambda: fake.fn)
    rec = launch.prepare(_fn("fill_f32"), (1, 1, 1), (4096, 1, 1), [(0, PTR)],
                          _stream(), path="ctypes")
    with pytest.raises(CudaError) as info:
        rec()
    assert info.value.error_name == "CUDA_ERROR_INVALID_VALUE"
    assert "fill_f32" in str(info.value) and "ctypes" in str(info.value)


def test_bindings_launch_passes_the_array_address_and_checks_the_result(monkeypatch) -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    seen: list[tuple[Any, ...]] = []
    result = [drv.CUresult.CUDA_SUCCESS]

    def fake(*args: Any) -> tuple[Any]:
        seen.append(args)
        return (result[0],)

    monkeypatch.setattr(launch, "_cuLaunchKernel", lambda: fake)
    fn, stream = _fn(), _stream()
    rec = launch.prepare(fn, (2, 1, 1), (128, 1, 1), [(0x10, PTR)], stream,
                          path="bindings")
    rec()
    (args,) = seen
    assert args[0] is fn.handle and args[8] is stream.handle
    assert args[1:8] == (2, 1, 1, 128, 1, 1, 0) and args[9] == rec.params.address != 0
    result[0] = drv.CUresult.CUDA_ERROR_INVALID_HANDLE
    with pytest.raises(CudaError) as info:
        rec()
    assert info.value.error_name == "CUDA_ERROR_INVALID_HANDLE"


def test_ctypes_path_falls_back_to_bindings_without_the_driver_library(monkeypatch) -> None:
    monkeypatch.setattr(launch, "_ctypes_cuLaunchKernel", lambda: None)
    monkeypatch.setattr(launch, "_cuLaunchKernel", lambda: (lambda *a: (0,)))
    rec = launch.prepare(_fn(), (1, 1, 1), (1, 1, 1), [], _stream(), path="ctypes")
    assert rec.path == "bindings"
    rec()


def test_prepare_refuses_an_unknown_path() -> None:
    with pytest.raises(ValueError, match="launch path"):
        launch.prepare(_fn(), (1, 1, 1), (1, 1, 1), [], _stream(), path="cupy")


def _launch_path_in(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("always")
        from onnx_ep.providers.cuda import launch
        launch._ctypes_cuLaunchKernel = lambda: None   # as on a machine without libcuda
        print(launch.launch_path())
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


@pytest.mark.parametrize("value, path, warning", [
    ("bindings", "bindings", ""),
    ("ctypes", "bindings", "could not be loaded through ctypes"),
    ("cupy", "bindings", "is not one of bindings, ctypes"),
    ("", "bindings", ""),
])
def test_onnx_ep_launch_picks_the_path_and_warns_when_it_cannot(value, path, warning) -> None:
    proc = _launch_path_in({"ONNX_EP_LAUNCH": value})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [path]
    if warning:
        assert warning in proc.stderr


def test_remember_empties_a_full_cache() -> None:
    cache: dict[int, int] = {}
    for i in range(5):
        launch.remember(cache, i, i, cap=3)
    assert cache == {3: 3, 4: 4}


def test_launch_cached_builds_a_record_on_the_second_sighting(monkeypatch) -> None:
    fake = _ctypes_path(monkeypatch, 3, fresh_cache=True)
    plain: list[Any] = []
    monkeypatch.setattr(launch, "launch", lambda *a: plain.append(a))
    fn, stream = _fn(), _stream()
    args = [(0x20, PTR), (5, I64), (Pair(1, 2), None)]
    for _ in range(3):
        launch.launch_cached(fn, (1, 1, 1), (256, 1, 1), args, stream)
    assert len(plain) == 1 and len(fake.calls) == 2 and len(launch._cached) == 1
    # a struct of other bytes is another key
    launch.launch_cached(fn, (1, 1, 1), (256, 1, 1), args[:2] + [(Pair(1, 3), None)], stream)
    assert len(plain) == 2


def test_launch_cached_launches_plainly_when_an_argument_is_unhashable(monkeypatch) -> None:
    plain: list[Any] = []
    monkeypatch.setattr(launch, "launch", lambda *a: plain.append(a))
    launch.launch_cached(_fn(), (1, 1, 1), (1, 1, 1), [(ctypes.c_float(1.0), F64)],
                          _stream())
    assert len(plain) == 1


class _T:
    """A device tensor as the kernels read it (ptr, shape, device)."""

    def __init__(self, ptr: int, shape: tuple[int, ...]) -> None:
        self.ptr, self.shape, self.device = ptr, shape, 0


class _Ctx:
    def __init__(self, stream: Any) -> None:
        self.stream = stream


def _bound_add() -> Any:
    from onnx_ep.core.kernel import NodeMeta, TensorSpec
    from onnx_ep.providers.cuda.kernels.elementwise import ROWS

    spec = TensorSpec(np.float32, (2, 3))
    meta = NodeMeta("add", "Add", "", 17, {}, (spec, TensorSpec(np.float32, (3,))))
    return ROWS["Add"].bind(meta)


def test_elementwise_node_packs_once_per_pointer_and_shape_set(monkeypatch) -> None:
    from onnx_ep.providers.cuda.kernels.elementwise import Bcast

    fake = _ctypes_path(monkeypatch, 5)               # a, b, y, n, the Bcast struct
    bound = _bound_add()
    monkeypatch.setattr(type(bound), "bound_function", lambda self, ordinal: _fn("add_f32"))
    built: list[Any] = []
    real_prepare = launch.prepare
    monkeypatch.setattr(launch, "prepare", lambda *a, **k: built.append(a) or real_prepare(
        *a, **k))
    ctx = _Ctx(_stream())
    a, b, y = _T(0x1000, (2, 3)), _T(0x2000, (3,)), _T(0x3000, (2, 3))
    for _ in range(3):
        bound.execute_with_workspace(ctx, [a, b], [y], None)
    assert len(built) == 1 and len(fake.calls) == 3
    slots = fake.calls[0]["slots"]
    assert [ctypes.c_void_p.from_address(s).value for s in slots[:3]] == [0x1000, 0x2000, 0x3000]
    assert ctypes.c_int64.from_address(slots[3]).value == 6
    bc = Bcast.from_address(slots[4])                # the row vector broadcast over rows
    assert bc.ndim == 2 and list(bc.strides[1][:2]) == [0, 1]
    # a new output pointer (another plan) is another launch record
    bound.execute_with_workspace(ctx, [a, b], [_T(0x4000, (2, 3))], None)
    assert len(built) == 2 and len(fake.calls) == 4
    # an empty output launches nothing
    bound.execute_with_workspace(ctx, [_T(0x1000, (0, 3)), b], [_T(0x5000, (0, 3))], None)
    assert len(fake.calls) == 4


def test_cast_node_packs_once(monkeypatch) -> None:
    from onnx_ep.core.kernel import NodeMeta, TensorSpec
    from onnx_ep.providers.cuda.kernels.cast import Cast

    fake = _ctypes_path(monkeypatch, 3)
    meta = NodeMeta("cast", "Cast", "", 19, {"to": 10}, (TensorSpec(np.float32, (4,)),))
    bound = Cast("Cast", 19).bind(meta)
    monkeypatch.setattr(type(bound), "bound_function", lambda self, ordinal: _fn(bound.symbol))
    ctx, x, y = _Ctx(_stream()), _T(0x100, (4,)), _T(0x200, (4,))
    bound.execute_with_workspace(ctx, [x], [y], None)
    bound.execute_with_workspace(ctx, [x], [y], None)
    assert len(bound._launches) == 1 and len(fake.calls) == 2
    assert ctypes.c_int64.from_address(fake.calls[1]["slots"][2]).value == 4


# ---------------------------------------------------------------- GPU


@pytest.mark.cuda
def test_launch_fill_and_axpy_are_bit_exact(cuda_device, allocator, stream) -> None:
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda import nvrtc

    n = 100_003
    fill = nvrtc.get_function("testing", "fill_f32", cuda_device)
    axpy = nvrtc.get_function("testing", "axpy_f32", cuda_device)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    dx = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    dy = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    copies.copy_htod(dx.ptr, x, stream)
    launch.launch(fill, launch.grid_1d(n), (256, 1, 1),
                  [(dy.ptr, PTR), (1.5, F32), (n, I64)], stream)
    a = np.float32(0.3)
    launch.launch(axpy, launch.grid_1d(n, max_blocks=64), (256, 1, 1),
                  [(float(a), F32), (dx.ptr, PTR), (dy.ptr, PTR), (n, I64)], stream)
    out = np.empty_like(x)
    copies.copy_dtoh(out, dy.ptr, stream)
    stream.synchronize()
    expected = a * x + np.float32(1.5)   # float32 multiply, then float32 add: no FMA
    np.testing.assert_array_equal(out, expected)
    dx.free()
    dy.free()


@pytest.mark.cuda
def test_launch_failure_raises_cuda_error_naming_the_kernel(cuda_device, stream) -> None:
    from onnx_ep.providers.cuda import nvrtc

    fill = nvrtc.get_function("testing", "fill_f32", cuda_device)
    with pytest.raises(CudaError) as info:
        launch.launch(fill, (1, 1, 1), (4096, 1, 1),   # more threads than a block may have
                      [(0, PTR), (0.0, F32), (0, I64)], stream)
    assert info.value.error_name == "CUDA_ERROR_INVALID_VALUE"
    assert "fill_f32" in str(info.value)


@pytest.mark.cuda
def test_missing_symbol_raises_not_found(cuda_device) -> None:
    from onnx_ep.providers.cuda import nvrtc

    with pytest.raises(CudaError) as info:
        nvrtc.get_function("testing", "no_such_kernel", cuda_device)
    assert info.value.error_name == "CUDA_ERROR_NOT_FOUND"


@pytest.fixture(params=["ctypes", "bindings"])
def path(request: pytest.FixtureRequest) -> str:
    """Each launch path; ctypes skips where the driver library does not load through it."""
    if request.param == "ctypes" and launch._ctypes_cuLaunchKernel() is None:
        pytest.skip("the CUDA driver library does not load through ctypes here")
    return request.param


@pytest.mark.cuda
def test_prepared_launches_are_bit_exact_on_each_path(cuda_device, allocator, stream,
                                                      path) -> None:
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda import nvrtc

    n = 10_007
    fill = nvrtc.get_function("testing", "fill_f32", cuda_device)
    axpy = nvrtc.get_function("testing", "axpy_f32", cuda_device)
    x = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    dx = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    dy = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    try:
        copies.copy_htod(dx.ptr, x, stream)
        f = launch.prepare(fill, launch.grid_1d(n), (256, 1, 1),
                            [(dy.ptr, PTR), (1.5, F32), (n, I64)],
                            stream, path=path)
        a = np.float32(0.3)
        g = launch.prepare(axpy, launch.grid_1d(n, max_blocks=8), (256, 1, 1),
                            [(float(a), F32), (dx.ptr, PTR),
                             (dy.ptr, PTR), (n, I64)], stream, path=path)
        assert f.path == g.path == path
        f()
        g()
        g()                                          # y = a*x + (a*x + 1.5)
        out = np.empty_like(x)
        copies.copy_dtoh(out, dy.ptr, stream)
        stream.synchronize()
        np.testing.assert_array_equal(out, a * x + (a * x + np.float32(1.5)))
    finally:
        dx.free()
        dy.free()


@pytest.mark.cuda
def test_a_rejected_prepared_launch_names_the_driver_error(cuda_device, stream, path) -> None:
    from onnx_ep.providers.cuda import nvrtc

    fill = nvrtc.get_function("testing", "fill_f32", cuda_device)
    rec = launch.prepare(fill, (1, 1, 1), (4096, 1, 1),   # more threads than a block may have
                          [(0, PTR), (0.0, F32), (0, I64)], stream,
                          path=path)
    with pytest.raises(CudaError) as info:
        rec()
    assert info.value.error_name == "CUDA_ERROR_INVALID_VALUE"
    assert "fill_f32" in str(info.value) and path in str(info.value)


@pytest.mark.cuda
def test_the_default_path_is_bindings_unless_the_environment_names_one(cuda_device) -> None:
    # bindings measured cheaper on the H200 (docs/PERFORMANCE.md, benchmark section 5)
    want = os.environ.get("ONNX_EP_LAUNCH") or "bindings"
    if want == "ctypes" and launch._ctypes_cuLaunchKernel() is None:
        want = "bindings"
    assert launch.launch_path() == want


@pytest.mark.cuda
def test_a_prepared_launch_replays_inside_a_captured_graph(cuda_device, allocator, stream,
                                                           path) -> None:
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda import nvrtc

    drv = driver.driver()
    fill = nvrtc.get_function("testing", "fill_f32", cuda_device)
    n = 1024
    y = allocator.allocate(4 * n, Role.ACTIVATIONS, "test")
    try:
        rec = launch.prepare(fill, launch.grid_1d(n), (256, 1, 1),
                              [(y.ptr, PTR), (7.0, F32), (n, I64)],
                              stream, path=path)
        driver.check(drv.cuStreamBeginCapture(
            stream.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
        try:
            rec()
        finally:
            graph = driver.check(drv.cuStreamEndCapture(stream.handle), "cuStreamEndCapture")
        exe = driver.check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        driver.check(drv.cuGraphLaunch(exe, stream.handle), "cuGraphLaunch")
        out = np.zeros(n, np.float32)
        copies.copy_dtoh(out, y.ptr, stream)
        stream.synchronize()
        np.testing.assert_array_equal(out, np.full(n, 7.0, np.float32))
        driver.check(drv.cuGraphExecDestroy(exe))
        driver.check(drv.cuGraphDestroy(graph))
    finally:
        y.free()


@pytest.mark.cuda
def test_a_chain_of_elementwise_and_cast_nodes_reruns_with_new_feeds(cuda_device) -> None:
    import onnx
    from onnx import TensorProto, helper

    from onnx_ep import Session

    nodes = [helper.make_node("Add", ["x", "b"], ["t0"]),
             helper.make_node("Mul", ["t0", "x"], ["t1"]),
             helper.make_node("Relu", ["t1"], ["t2"]),
             helper.make_node("Cast", ["t2"], ["y"], to=TensorProto.FLOAT16)]
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    onnx.checker.check_model(model)
    s = Session(model, providers=["cuda"])
    try:
        for seed in range(3):                        # same plan, same pointers, new values
            rng = np.random.default_rng(seed)
            x = rng.standard_normal((2, 3)).astype(np.float32)
            b = rng.standard_normal(3).astype(np.float32)
            (y,) = s.run(None, {"x": x, "b": b})
            want = np.maximum((x + b) * x, np.float32(0)).astype(np.float16)
            np.testing.assert_array_equal(y, want)
        assert s.placement_summary() == {"cuda": 4}
    finally:
        s.close()


def test_launch_cached_tells_a_negative_zero_from_a_zero(monkeypatch) -> None:
    fake = _ctypes_path(monkeypatch, 1, fresh_cache=True)
    monkeypatch.setattr(launch, "launch", lambda *a: None)
    fn, stream = _fn(), _stream()
    for value in (0.0, 0.0, -0.0, -0.0):
        launch.launch_cached(fn, (1, 1, 1), (1, 1, 1), [(value, F32)], stream)
    values = [ctypes.c_float.from_address(c["slots"][0]).value for c in fake.calls]
    assert [str(v) for v in values] == ["0.0", "-0.0"]


def test_unary_node_packs_its_scalars_once(monkeypatch) -> None:
    from onnx_ep.core.kernel import NodeMeta, TensorSpec
    from onnx_ep.providers.cuda.kernels.activation import ROWS

    fake = _ctypes_path(monkeypatch, 5)               # x, y, n, p0, p1
    meta = NodeMeta("lr", "LeakyRelu", "", 17, {"alpha": 0.5}, (TensorSpec(np.float32, (8,)),))
    bound = ROWS["LeakyRelu"].bind(meta)
    monkeypatch.setattr(type(bound), "bound_function", lambda self, ordinal: _fn(bound.symbol))
    ctx, x, y = _Ctx(_stream()), _T(0x100, (8,)), _T(0x200, (8,))
    bound.execute_with_workspace(ctx, [x], [y], None)
    bound.execute_with_workspace(ctx, [x], [y], None)
    assert len(bound._launches) == 1 and len(fake.calls) == 2
    slots = fake.calls[1]["slots"]
    assert ctypes.c_int64.from_address(slots[2]).value == 8
    assert ctypes.c_double.from_address(slots[3]).value == 0.5
