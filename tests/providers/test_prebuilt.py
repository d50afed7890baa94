"""Prebuilt cubins (nvrtc.prebuilt_key, the lookup in get_module and precompile), the
packaging step scripts/build_cubins.py and benchmarks/first_run.py, on the host: a fake
device and a fake compiler, except the script's test, which needs NVRTC."""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from onnx_ep.errors import CudaError
from onnx_ep.providers.cuda import nvrtc

REPO = Path(__file__).resolve().parents[2]
OPTS = ("--std=c++17", "--fmad=false", "-arch=sm_90")
BASE = {"source_text": "__global__ void k() {}", "options": OPTS, "arch": "sm_90",
        "headers": {"ep_a.cuh": b"x"}}
ELF = b"\x7fELF"


# ---------------------------------------------------------------- the key

def test_prebuilt_key_ignores_include_paths() -> None:
    key = nvrtc.prebuilt_key(**BASE)
    here = ("-I/work/onnx_ep/providers/cuda/kernels", *OPTS, "-I/venv/nvidia/cu13/include")
    there = ("--include-path=/home/u/site-packages/nvidia/cu13/include", *OPTS)
    assert nvrtc.prebuilt_key(**{**BASE, "options": here}) == key
    assert nvrtc.prebuilt_key(**{**BASE, "options": there}) == key
    assert nvrtc.prebuilt_key(**{**BASE, "options": nvrtc.full_options("sm_90")}) == key


def test_prebuilt_key_takes_no_driver_or_nvrtc_version() -> None:
    params = set(inspect.signature(nvrtc.prebuilt_key).parameters)
    assert params == {"source_text", "options", "arch", "headers"}


def test_prebuilt_key_changes_with_source_header_arch_and_other_options() -> None:
    key = nvrtc.prebuilt_key(**BASE)
    changes = {"source_text": "__global__ void k2() {}", "arch": "sm_100",
               "options": (*OPTS, "-DX=1"), "headers": {"ep_a.cuh": b"y"}}
    for field, value in changes.items():
        assert nvrtc.prebuilt_key(**{**BASE, field: value}) != key, field
    assert nvrtc.prebuilt_key(**{**BASE, "headers": {"ep_a.cuh": b"x", "ep_b.cuh": b""}}) != key
    assert nvrtc.prebuilt_key(**{**BASE, "options": ("--std=c++20", *OPTS[1:])}) != key


def test_prebuilt_and_cache_keys_never_coincide() -> None:
    cache = nvrtc.cache_key(BASE["source_text"], OPTS, "sm_90", 13000, (13, 0), BASE["headers"])
    assert nvrtc.prebuilt_key(**BASE) != cache


# ---------------------------------------------------------------- the lookup

Ship = Callable[..., Path]


@pytest.fixture
def ship(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Ship]:
    """Points PREBUILT_DIR and the disk cache into tmp_path; ``ship(source, ...)`` writes a
    prebuilt cubin and its manifest entry, under the current source's key unless ``text``
    (another source text) is given."""
    prebuilt = tmp_path / "prebuilt"
    monkeypatch.setattr(nvrtc, "PREBUILT_DIR", prebuilt)
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(nvrtc.PREBUILT_ENV, raising=False)
    nvrtc.clear_memory_cache()
    nvrtc.reset_compile_stats()

    def write(source: str, arch: str = "sm_90", *, text: str | None = None,
              version: str = "13.0", data: bytes | None = None) -> Path:
        if text is None:
            text = nvrtc.source_path(source).read_text()
        key = nvrtc.prebuilt_key(text, nvrtc.full_options(arch), arch, nvrtc.local_headers())
        data = ELF + f"{source}-{arch}".encode() if data is None else data
        prebuilt.mkdir(exist_ok=True)
        file = nvrtc.prebuilt_file(f"{source}.cu", arch, key)
        (prebuilt / file).write_bytes(data)
        path = prebuilt / nvrtc.PREBUILT_MANIFEST
        manifest = json.loads(path.read_text()) if path.exists() else {"format": 1,
                                                                        "cubins": {}}
        manifest["cubins"][file] = {"source": f"{source}.cu", "arch": arch, "key": key,
                                    "nvrtc": version, "bytes": len(data)}
        path.write_text(json.dumps(manifest))
        return prebuilt / file

    yield write
    nvrtc.clear_memory_cache()


def _key(source: str, arch: str = "sm_90") -> str:
    text = nvrtc.source_path(source).read_text()
    return nvrtc.prebuilt_key(text, nvrtc.full_options(arch), arch, nvrtc.local_headers())


def test_lookup_returns_the_shipped_cubin_whatever_the_driver(ship: Ship) -> None:
    ship("testing")
    for driver in (13000, 13020):
        assert nvrtc.prebuilt_cubin("testing.cu", "sm_90", _key("testing"), driver) == \
            ELF + b"testing-sm_90"
    assert nvrtc.prebuilt_cubin("testing.cu", "sm_80", _key("testing", "sm_80"), 13000) is None


def test_a_stale_cubin_is_never_returned(ship: Ship) -> None:
    stale = ship("testing", text="// an older testing.cu")
    key = _key("testing")
    assert nvrtc.prebuilt_cubin("testing.cu", "sm_90", key, 13000) is None
    # the right file name with a manifest key of another source: still not used
    stale.rename(stale.parent / nvrtc.prebuilt_file("testing.cu", "sm_90", key))
    manifest = stale.parent / nvrtc.PREBUILT_MANIFEST
    m = json.loads(manifest.read_text())
    (entry,) = m["cubins"].values()
    m["cubins"] = {nvrtc.prebuilt_file("testing.cu", "sm_90", key): entry}
    manifest.write_text(json.dumps(m))
    assert nvrtc.prebuilt_cubin("testing.cu", "sm_90", key, 13000) is None


def test_a_cubin_the_manifest_does_not_list_or_a_damaged_one_is_not_used(ship: Ship) -> None:
    path = ship("testing")
    key = _key("testing")
    path.write_bytes(ELF + b"truncat")                         # not the recorded size
    assert nvrtc.prebuilt_cubin("testing.cu", "sm_90", key, 13000) is None
    (path.parent / nvrtc.PREBUILT_MANIFEST).write_text('{"format": 1, "cubins": {}}')
    assert nvrtc.prebuilt_path("testing.cu", "sm_90", key, 13000) is None


def test_an_unreadable_manifest_disables_the_prebuilt_cubins(
        ship: Ship, caplog: pytest.LogCaptureFixture) -> None:
    path = ship("testing")
    (path.parent / nvrtc.PREBUILT_MANIFEST).write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="onnx_ep"):
        assert nvrtc.prebuilt_manifest() == {}
    assert "ignoring the prebuilt cubins" in caplog.text


def test_onnx_ep_prebuilt_0_disables_the_lookup(ship: Ship,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ship("testing")
    monkeypatch.setenv(nvrtc.PREBUILT_ENV, "0")
    assert nvrtc.prebuilt_cubin("testing.cu", "sm_90", _key("testing"), 13000) is None
    monkeypatch.setenv(nvrtc.PREBUILT_ENV, "1")
    assert nvrtc.prebuilt_cubin("testing.cu", "sm_90", _key("testing"), 13000) is not None


def test_no_prebuilt_directory_means_no_prebuilt_cubins(ship: Ship) -> None:
    assert not nvrtc.PREBUILT_DIR.exists()
    assert nvrtc.prebuilt_manifest() == {}
    assert nvrtc.prebuilt_path("testing.cu", "sm_90", _key("testing"), 13000) is None


def test_a_driver_older_than_the_nvrtc_major_skips_them(ship: Ship) -> None:
    ship("testing", version="13.5")
    assert nvrtc.prebuilt_path("testing.cu", "sm_90", _key("testing"), 12080) is None
    assert nvrtc.prebuilt_path("testing.cu", "sm_90", _key("testing"), 13000) is not None


class FakeModule:
    def __init__(self, cubin: bytes) -> None:
        self.cubin = cubin

    def function(self, name: str) -> tuple[bytes, str]:
        return (self.cubin, name)


class FakeDevice:
    arch, ordinal = "sm_90", 0

    def set_current(self) -> None:
        pass


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """A driver (13.0) that loads any cubin, and an NVRTC 13.0 that records its compiles."""
    from onnx_ep.providers.cuda import driver, launch

    seen: dict[str, list[Any]] = {"compiled": [], "loaded": []}

    def fake_compile(text: str, name: str, options: object, arch: str) -> bytes:
        seen["compiled"].append(name)
        return ELF + b"compiled " + name.encode()

    def fake_load(cubin: bytes) -> FakeModule:
        seen["loaded"].append(cubin)
        return FakeModule(cubin)

    monkeypatch.setattr(nvrtc, "compile_cubin", fake_compile)
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (13, 0))
    monkeypatch.setattr(driver, "driver_version", lambda: 13000)
    monkeypatch.setattr(launch, "load_module", fake_load)
    return seen


def test_get_module_loads_the_prebuilt_cubin_without_nvrtc(
        ship: Ship, fake_gpu: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_nvrtc() -> tuple[int, int]:
        raise ImportError("no NVRTC on this machine")

    monkeypatch.setattr(nvrtc, "nvrtc_version", no_nvrtc)
    ship("testing")
    dev = FakeDevice()
    assert nvrtc.get_function("testing", "fill_f32", dev) == (ELF + b"testing-sm_90",
                                                              "fill_f32")
    nvrtc.get_function("testing", "axpy_f32", dev)
    s = nvrtc.compile_stats()
    assert (s["prebuilt_hits"], s["loads"], s["cache_hits"]) == (1, 1, 0)
    assert fake_gpu["compiled"] == []


def test_get_module_compiles_a_source_whose_prebuilt_cubin_is_stale(
        ship: Ship, fake_gpu: dict[str, list[Any]]) -> None:
    ship("testing", text="// an older testing.cu")
    nvrtc.get_function("testing", "fill_f32", FakeDevice())
    s = nvrtc.compile_stats()
    assert fake_gpu["compiled"] == ["testing.cu"] and s["prebuilt_hits"] == 0
    assert fake_gpu["loaded"] == [ELF + b"compiled testing.cu"]


def test_a_cubin_the_driver_refuses_falls_back_to_the_compile_path(
        ship: Ship, fake_gpu: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_ep.providers.cuda import launch

    ship("testing")
    ship("copies")

    def old_driver(cubin: bytes) -> FakeModule:
        fake_gpu["loaded"].append(cubin)
        if not cubin.startswith(ELF + b"compiled"):
            raise CudaError("cuModuleLoadData failed: CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
                            error_name="CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
        return FakeModule(cubin)

    monkeypatch.setattr(launch, "load_module", old_driver)
    dev = FakeDevice()
    assert nvrtc.get_function("testing", "fill_f32", dev)[0] == ELF + b"compiled testing.cu"
    # the driver refuses every cubin of that build: the next source does not try its own
    assert nvrtc.get_function("copies", "copy_many", dev)[0] == ELF + b"compiled copies.cu"
    s = nvrtc.compile_stats()
    assert (s["prebuilt_refused"], s["prebuilt_hits"], s["loads"]) == (1, 0, 2)
    assert fake_gpu["compiled"] == ["testing.cu", "copies.cu"] and len(fake_gpu["loaded"]) == 3
    # and a new process finds the compiled cubins in the disk cache
    nvrtc.clear_memory_cache()
    nvrtc.get_function("testing", "fill_f32", dev)
    s = nvrtc.compile_stats()
    assert (s["prebuilt_refused"], s["cache_hits"], len(fake_gpu["compiled"])) == (2, 1, 2)


def test_other_load_errors_are_raised_not_hidden(
        ship: Ship, fake_gpu: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_ep.providers.cuda import launch

    ship("testing")

    def out_of_memory(cubin: bytes) -> FakeModule:
        raise CudaError("cuModuleLoadData failed: CUDA_ERROR_OUT_OF_MEMORY",
                        error_name="CUDA_ERROR_OUT_OF_MEMORY")

    monkeypatch.setattr(launch, "load_module", out_of_memory)
    with pytest.raises(CudaError, match="OUT_OF_MEMORY"):
        nvrtc.get_module("testing", FakeDevice())
    assert fake_gpu["compiled"] == []


def test_get_module_ignores_them_under_onnx_ep_prebuilt_0(
        ship: Ship, fake_gpu: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    ship("testing")
    monkeypatch.setenv(nvrtc.PREBUILT_ENV, "0")
    nvrtc.get_module("testing", FakeDevice())
    assert fake_gpu["compiled"] == ["testing.cu"]
    assert nvrtc.compile_stats()["prebuilt_hits"] == 0


def test_precompile_skips_sources_with_a_matching_prebuilt_cubin(
        ship: Ship, fake_gpu: dict[str, list[Any]]) -> None:
    ship("testing")
    ship("copies", text="// an older copies.cu")
    assert nvrtc.precompile(["testing", "copies", "no_such_family"], "sm_90", 13000) == \
        ["copies"]
    assert fake_gpu["compiled"] == ["copies.cu"]
    # a driver too old for their NVRTC (13.0 here): compiled ahead instead
    assert nvrtc.precompile(["testing"], "sm_90", 12080) == ["testing"]


def test_precompile_asks_nothing_of_nvrtc_when_all_is_shipped(
        ship: Ship, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_nvrtc() -> tuple[int, int]:
        raise ImportError("no NVRTC on this machine")

    monkeypatch.setattr(nvrtc, "nvrtc_version", no_nvrtc)
    ship("testing")
    ship("copies")
    assert nvrtc.precompile(["testing", "copies"], "sm_90", 13000) == []


# ---------------------------------------------------------------- scripts/build_cubins.py

def _load_script(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _need_nvrtc() -> None:
    mod = pytest.importorskip("cuda.bindings.nvrtc")
    try:
        err, _major, _minor = mod.nvrtcVersion()
    except Exception as exc:   # noqa: BLE001 - any way the library is missing is a skip
        pytest.skip(f"NVRTC library unavailable ({type(exc).__name__}: {exc})")
    if err:
        pytest.skip(f"nvrtcVersion failed: {err}")


def test_build_cubins_builds_one_source_that_the_lookup_then_finds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _need_nvrtc()
    out = tmp_path / "prebuilt"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "build_cubins.py"),
                           "--source", "testing", "--arch", "sm_90", "--out", str(out)],
                          check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "testing.cu" in proc.stdout and "built 1 cubins" in proc.stdout
    manifest = json.loads((out / nvrtc.PREBUILT_MANIFEST).read_text())
    ((file, entry),) = manifest["cubins"].items()
    major, minor = nvrtc.nvrtc_version()
    assert entry == {"source": "testing.cu", "arch": "sm_90", "key": _key("testing"),
                     "nvrtc": f"{major}.{minor}", "bytes": (out / file).stat().st_size}
    monkeypatch.setattr(nvrtc, "PREBUILT_DIR", out)
    monkeypatch.delenv(nvrtc.PREBUILT_ENV, raising=False)
    cubin = nvrtc.prebuilt_cubin("testing.cu", "sm_90", _key("testing"), major * 1000)
    assert cubin is not None and cubin[:4] == ELF


def test_build_cubins_fails_on_a_source_that_does_not_compile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _need_nvrtc()
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "broken.cu").write_text('extern "C" __global__ void k() { undefined_name = 1; }')
    monkeypatch.setattr(nvrtc, "KERNELS_DIR", kernels)
    script = _load_script(REPO / "scripts" / "build_cubins.py")
    assert script.main(["--source", "broken", "--arch", "sm_90",
                        "--out", str(tmp_path / "out")]) == 1
    assert "undefined_name" in capsys.readouterr().err
    assert script.main(["--source", "broken", "--arch", "sm_1"]) == 2


# ---------------------------------------------------------------- benchmarks/first_run.py

def test_first_run_benchmark_measures_and_reports_on_the_host(tmp_path: Path) -> None:
    bench = _load_script(REPO / "benchmarks" / "first_run.py")
    r = bench.measure(None, "cpu_reference", 1, 8)
    assert r["placement"] == {"cpu_reference": r["placement"]["cpu_reference"]}
    assert r["first_run_s"] == pytest.approx(r["session_s"] + r["run_s"])
    assert set(r["stats"]) >= {"compiles", "prebuilt_hits", "cache_hits", "loads"}
    results = {m: dict(r, mode=m, process_s=1.0) for m in ("prebuilt", "cold", "warm")}
    results["prebuilt"] = dict(results["prebuilt"], first_run_s=r["first_run_s"] + 6)
    text = bench.report(results)
    assert "prebuilt first run: +6.00 s vs warm (goal <= 5 s: missed)" in text
    assert "cold first run: +0.00 s vs warm" in text


def test_first_run_benchmark_runs_a_fresh_process(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load_script(REPO / "benchmarks" / "first_run.py")
    out = tmp_path / "r.json"
    assert bench.main(["--provider", "cpu_reference", "--modes", "prebuilt", "--seq", "4",
                       "--json", str(out)]) == 0
    assert "prebuilt" in capsys.readouterr().out
    res = json.loads(out.read_text())["prebuilt"]
    assert res["process_s"] >= res["first_run_s"] > 0
