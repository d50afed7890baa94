"""providers/cuda/nvrtc.py: cache keys, the disk cache, include paths, compile errors,
cold/warm starts (the prebuilt cubins: tests/providers/test_prebuilt.py)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.errors import NvrtcError
from onnx_ep.providers.cuda import nvrtc

# ---------------------------------------------------------------- CPU

BASE = dict(source_text="__global__ void k() {}", options=("--std=c++17",), arch="sm_90",
            driver_version=13000, nvrtc_version=(13, 0), headers={"a.cuh": b"x"})


def test_cache_key_is_stable_and_changes_with_every_input() -> None:
    key = nvrtc.cache_key(**BASE)
    assert key == nvrtc.cache_key(**BASE) and len(key) == 64
    changes = dict(source_text="__global__ void k2() {}", options=("--std=c++20",),
                   arch="sm_100", driver_version=13010, nvrtc_version=(13, 1),
                   headers={"a.cuh": b"y"})
    for field, value in changes.items():
        assert nvrtc.cache_key(**{**BASE, field: value}) != key, field


def test_cache_key_fields_do_not_run_together() -> None:
    a = nvrtc.cache_key(**{**BASE, "options": ("-DA", "B")})
    b = nvrtc.cache_key(**{**BASE, "options": ("-DAB",)})
    assert a != b


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    assert nvrtc.cache_dir() == tmp_path / "cubin"
    monkeypatch.delenv(nvrtc.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert nvrtc.cache_dir() == tmp_path / "xdg" / "onnx_ep" / "cubin"


def test_full_options_compile_straight_to_cubin_without_fma() -> None:
    opts = nvrtc.full_options("sm_90", ["-DX=1"])
    assert opts[:3] == ("--std=c++17", "--fmad=false", "-arch=sm_90")
    assert f"-I{nvrtc.KERNELS_DIR}" in opts and opts[-1] == "-DX=1"


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_softmax_source_compiles_before_and_after_ampere(arch: str) -> None:
    """softmax.cu's row kernels use sm_80 instructions (cp.async, paired cvt) behind
    __CUDA_ARCH__ guards: the source must still build for a pre-Ampere device (no GPU
    needed, only NVRTC)."""
    try:
        nvrtc.nvrtc()
    except Exception as exc:   # noqa: BLE001 - any way NVRTC is missing is a skip
        pytest.skip(f"NVRTC is unavailable: {exc}")
    src = (nvrtc.KERNELS_DIR / "softmax.cu").read_text()
    cubin = nvrtc.compile_cubin(src, "softmax.cu", nvrtc.full_options(arch), arch)
    assert cubin[:4] == b"\x7fELF"


def test_include_dirs_hold_the_fp16_headers() -> None:
    for d in nvrtc.include_dirs():
        assert (Path(d) / "cuda_fp16.h").is_file()


def test_unknown_source_names_the_available_ones() -> None:
    with pytest.raises(FileNotFoundError, match="testing"):
        nvrtc.source_path("no_such_family")


def test_disk_cache_compiles_once_then_hits(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (13, 0))
    calls: list[str] = []

    def fake_compile(text: str, name: str, options: object, arch: str) -> bytes:
        calls.append(name)
        return b"\x7fELF" + text.encode()

    monkeypatch.setattr(nvrtc, "compile_cubin", fake_compile)
    nvrtc.reset_compile_stats()
    cubin, key = nvrtc.cached_cubin("src", "fam.cu", ("-x",), "sm_90", 13000)
    assert calls == ["fam.cu"] and cubin == b"\x7fELFsrc"
    again, key2 = nvrtc.cached_cubin("src", "fam.cu", ("-x",), "sm_90", 13000)
    assert (again, key2) == (cubin, key) and calls == ["fam.cu"]
    assert nvrtc.compile_stats()["cache_hits"] == 1
    nvrtc.cached_cubin("src", "fam.cu", ("-x",), "sm_90", 13010)   # new driver: new key
    assert len(calls) == 2
    (path,) = [p for p in (tmp_path / "cubin").iterdir() if key[:32] in p.name]
    path.write_bytes(b"garbage")                                   # corrupt entry: recompiled
    assert nvrtc.cached_cubin("src", "fam.cu", ("-x",), "sm_90", 13000)[0] == cubin
    assert len(calls) == 3


def test_a_loaded_module_serves_every_symbol_without_reading_the_disk_cache(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The GPU cold-start test's counters, on the CPU: one compile, one load, and no disk
    cache hit for the second symbol of an already-loaded source."""
    from onnx_ep.providers.cuda import driver, launch

    class FakeModule:
        def function(self, name: str) -> tuple[str, str]:
            return ("fn", name)

    class FakeDevice:
        arch, ordinal = "sm_90", 0

        def set_current(self) -> None:
            pass

    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(nvrtc.PREBUILT_ENV, "0")      # the compile path, not a shipped cubin
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (13, 0))
    compiled: list[str] = []

    def fake_compile(text: str, name: str, options: object, arch: str) -> bytes:
        compiled.append(name)
        return b"\x7fELF" + text.encode()

    monkeypatch.setattr(nvrtc, "compile_cubin", fake_compile)
    monkeypatch.setattr(driver, "driver_version", lambda: 13000)
    monkeypatch.setattr(launch, "load_module", lambda cubin: FakeModule())
    nvrtc.clear_memory_cache()
    nvrtc.reset_compile_stats()
    try:
        dev = FakeDevice()
        assert nvrtc.get_function("testing", "fill_f32", dev) == ("fn", "fill_f32")
        assert nvrtc.get_function("testing", "axpy_f32", dev) == ("fn", "axpy_f32")
        s = nvrtc.compile_stats()
        assert (len(compiled), s["cache_hits"], s["loads"]) == (1, 0, 1)
        nvrtc.clear_memory_cache()                       # a new process: the disk cache hits
        nvrtc.get_function("testing", "fill_f32", dev)
        s = nvrtc.compile_stats()
        assert (len(compiled), s["cache_hits"], s["loads"]) == (1, 1, 2)
    finally:
        nvrtc.clear_memory_cache()


def test_program_buffers_are_private_and_at_least_two_bytes() -> None:
    seen: list[bytes] = []

    def getter(prog: object, buf: bytes) -> tuple[int]:
        seen.append(buf)
        return (0,)

    assert nvrtc._read_bytes(getter, None, 1) == b"\0"
    # bytes([0]) is CPython's shared one-byte object, which NVRTC must never write into
    assert len(seen[0]) >= 2 and seen[0] is not bytes([0])


# ---------------------------------------------------------------- GPU


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty disk cache, with the prebuilt cubins off: these tests count compiles."""
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(nvrtc.PREBUILT_ENV, "0")
    nvrtc.clear_memory_cache()
    yield tmp_path
    nvrtc.clear_memory_cache()


@pytest.mark.cuda
def test_cold_start_compiles_and_warm_start_reads_the_cache(cuda_device, fresh_cache) -> None:
    nvrtc.reset_compile_stats()
    fn = nvrtc.get_function("testing", "fill_f32", cuda_device)
    assert nvrtc.get_function("testing", "fill_f32", cuda_device) is fn
    assert nvrtc.get_function("testing", "axpy_f32", cuda_device).module is fn.module
    cold = nvrtc.compile_stats()
    assert (cold["compiles"], cold["cache_hits"], cold["loads"]) == (1, 0, 1)
    assert list((fresh_cache / "cubin").glob("testing-sm_*.cubin"))
    nvrtc.clear_memory_cache()
    nvrtc.get_function("testing", "fill_f32", cuda_device)
    warm = nvrtc.compile_stats()
    assert (warm["compiles"], warm["cache_hits"], warm["loads"]) == (1, 1, 2)


@pytest.mark.cuda
def test_compile_error_raises_nvrtc_error_with_the_log(cuda_device) -> None:
    with pytest.raises(NvrtcError) as info:
        nvrtc.compile_cubin('extern "C" __global__ void k() { undefined_name = 1; }',
                            "broken.cu", nvrtc.full_options(cuda_device.arch), cuda_device.arch)
    assert "undefined_name" in info.value.log
    assert info.value.error_name == "NVRTC_ERROR_COMPILATION"
    assert "broken.cu" in str(info.value)


@pytest.mark.cuda
def test_compiled_cubin_is_an_elf_for_the_device_arch(cuda_device) -> None:
    src = nvrtc.source_path("testing").read_text()
    cubin = nvrtc.compile_cubin(src, "testing.cu", nvrtc.full_options(cuda_device.arch),
                                cuda_device.arch)
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.cuda
def test_fp16_and_bf16_headers_are_found_and_casts_round_to_nearest(
        cuda_device, allocator, stream) -> None:
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda import copies, launch
    from onnx_ep.providers.cuda.kernels.base import I64, PTR

    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4099) * 1000).astype(np.float32)
    n = x.size
    dx = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    dy = allocator.allocate(2 * n, Role.ACTIVATIONS, "test")
    copies.copy_htod(dx.ptr, x, stream)
    for symbol, dtype in (("cast_f32_f16", np.float16), ("cast_f32_bf16", ml_dtypes.bfloat16)):
        fn = nvrtc.get_function("testing_fp16", symbol, cuda_device)
        launch.launch(fn, launch.grid_1d(n), (256, 1, 1),
                      [(dx.ptr, PTR), (dy.ptr, PTR), (n, I64)], stream)
        out = np.empty(n, dtype)
        copies.copy_dtoh(out, dy.ptr, stream)
        stream.synchronize()
        np.testing.assert_array_equal(out.view(np.uint16), x.astype(dtype).view(np.uint16))
    dx.free()
    dy.free()
