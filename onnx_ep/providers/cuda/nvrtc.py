"""NVRTC compilation of the ``kernels/*.cu`` sources to cubin: prebuilt cubins, a disk cache.

Sources compile straight to SASS for the device (``-arch=sm_90``): a cubin loads in a
fraction of a millisecond, while PTX would add ~100 ms of driver JIT per module at every
process start. :func:`get_module` finds a source's cubin in this order:

1. the module already loaded on this device in this process;
2. a **prebuilt** cubin shipped in the wheel (``prebuilt/``, made by the packaging step
   ``scripts/build_cubins.py``), named by :func:`prebuilt_key`: source, local headers,
   options without include paths, and architecture. One whose key does not match the
   current source is never loaded; one the driver refuses (a driver older than the NVRTC
   that built it) is counted and skipped. ``ONNX_EP_PREBUILT=0`` turns this step off;
3. the disk cache, ``~/.cache/onnx_ep/cubin`` (``$ONNX_EP_CACHE_DIR/cubin`` when set),
   keyed by :func:`cache_key`: the above plus the driver and NVRTC versions, so any change
   recompiles and nothing stale is ever loaded;
4. NVRTC, storing the result in the disk cache.

:func:`compile_stats` counts compiles, prebuilt and cache hits for the first-run
benchmark (``benchmarks/first_run.py``). Failures raise :exc:`onnx_ep.errors.NvrtcError`
with the compiler log attached.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import site
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from onnx_ep.errors import CudaError, NvrtcError

#: where the ``.cu`` family sources live
KERNELS_DIR = Path(__file__).resolve().parent / "kernels"
#: options every compile gets; ``-arch`` and include dirs are added per device
DEFAULT_OPTIONS: tuple[str, ...] = ("--std=c++17", "--fmad=false")
#: environment variable that moves the cache root (cubins go to ``<root>/cubin``)
CACHE_ENV = "ONNX_EP_CACHE_DIR"
#: where the packaging step (``scripts/build_cubins.py``) puts the cubins the wheel ships
PREBUILT_DIR = Path(__file__).resolve().parent / "prebuilt"
#: the prebuilt cubins' index, in :data:`PREBUILT_DIR`: ``{"format": 1, "cubins": {file:
#: {"source", "arch", "key", "nvrtc", "bytes"}}}``; a cubin it does not list is not used
PREBUILT_MANIFEST = "manifest.json"
#: environment variable: ``0`` ignores the prebuilt cubins (to measure a cold compile)
PREBUILT_ENV = "ONNX_EP_PREBUILT"
_HEADER_SUFFIXES = (".cuh", ".h", ".hpp")
_INCLUDE_OPTIONS = ("-I", "--include-path")
#: what the driver answers for a cubin it cannot run (made by a newer NVRTC than it knows,
#: or for another device); a prebuilt cubin refused so falls back to the compile path
_REFUSED_IMAGE_ERRORS = frozenset({
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_INVALID_IMAGE",
    "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_INVALID_SOURCE",
})

_log = logging.getLogger("onnx_ep")
_lock = threading.RLock()
_functions: dict[tuple[str, str, tuple[str, ...], int], Any] = {}
_modules: dict[tuple[str, int], Any] = {}   # (prebuilt key, device ordinal) -> launch.Module
_refused_archs: set[str] = set()            # archs whose prebuilt cubins the driver refused
_manifest_cache: tuple[tuple[str, int, int], dict[str, dict[str, Any]]] | None = None
_stats = {"compiles": 0, "cache_hits": 0, "prebuilt_hits": 0, "prebuilt_refused": 0,
          "loads": 0, "compile_seconds": 0.0}


def nvrtc() -> ModuleType:
    """``cuda.bindings.nvrtc``, imported on first use."""
    return importlib.import_module("cuda.bindings.nvrtc")


# ---------------------------------------------------------------- statistics

def compile_stats() -> dict[str, float]:
    """Counters since the last :func:`reset_compile_stats`.

    ``compiles``: NVRTC runs; ``cache_hits``: cubins read from the disk cache instead;
    ``prebuilt_hits``: modules loaded from a prebuilt cubin; ``prebuilt_refused``: prebuilt
    cubins the driver would not load (the source then took the disk cache / compile path);
    ``loads``: modules loaded into a context; ``compile_seconds``: NVRTC time.
    """
    with _lock:
        return dict(_stats)


def reset_compile_stats() -> None:
    with _lock:
        for k in _stats:
            _stats[k] = 0.0 if k == "compile_seconds" else 0


def clear_memory_cache() -> None:
    """Forget loaded modules and functions of this process (the disk cache stays), and
    which architectures' prebuilt cubins the driver refused.

    For the benchmark's warm-start measurement; modules stay loaded in the context.
    """
    with _lock:
        _functions.clear()
        _modules.clear()
        _refused_archs.clear()


# ---------------------------------------------------------------- paths and keys

def cache_dir() -> Path:
    """The cubin cache directory (not created here)."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser() / "cubin"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "onnx_ep" / "cubin"


def include_dirs() -> list[str]:
    """Include directories for ``cuda_fp16.h`` / ``cuda_bf16.h``: the first that has them.

    Searched in order: ``nvidia/cu13/include`` (then ``cu12``) in every
    site-packages (the pip CUDA headers that come with cuda-bindings' NVIDIA
    dependencies), ``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda/include``,
    then ``cuda.pathfinder``'s answer. Only one is used, so headers of two
    CUDA versions never mix.
    """
    return list(_include_dirs())


_include_cache: tuple[str, ...] | None = None


def _include_dirs() -> tuple[str, ...]:
    global _include_cache
    if _include_cache is None:
        _include_cache = tuple(d for d in [_find_cuda_include()] if d)
    return _include_cache


def _candidate_include_dirs() -> list[Path]:
    roots: list[str] = []
    try:
        roots.extend(site.getsitepackages())
    except AttributeError:  # some virtualenv builds lack it
        pass
    roots.append(site.getusersitepackages())
    roots.extend(p for p in sys.path if p.endswith("site-packages"))
    out: list[Path] = []
    for sub in ("cu13", "cu12"):
        out.extend(Path(r) / "nvidia" / sub / "include" for r in roots)
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            out.append(Path(os.environ[env]) / "include")
    out.append(Path("/usr/local/cuda/include"))
    return out


def _find_cuda_include() -> str | None:
    for d in _candidate_include_dirs():
        if (d / "cuda_fp16.h").is_file():
            return str(d)
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:
        return None
    found = find_nvidia_header_directory("cudart")
    if found and (Path(found) / "cuda_fp16.h").is_file():
        return str(found)
    return None


def full_options(arch: str, options: Sequence[str] = ()) -> tuple[str, ...]:
    """Default options, ``-arch=<arch>``, include dirs (kernels/ first), then ``options``."""
    incs = [f"-I{KERNELS_DIR}"] + [f"-I{d}" for d in _include_dirs()]
    return (*DEFAULT_OPTIONS, f"-arch={arch}", *incs, *options)


def local_headers() -> dict[str, bytes]:
    """``{name: contents}`` of the headers in kernels/ (they are part of every cache key)."""
    if not KERNELS_DIR.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(KERNELS_DIR.iterdir())
            if p.suffix in _HEADER_SUFFIXES and p.is_file()}


def _digest(fields: Iterable[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for tag, data in fields:
        # length-prefixed fields, so ("ab", "c") and ("a", "bc") never collide
        h.update(tag.encode() + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def cache_key(source_text: str, options: Sequence[str], arch: str, driver_version: int,
              nvrtc_version: tuple[int, int], headers: dict[str, bytes] | None = None) -> str:
    """sha256 hex digest naming a cubin in the disk cache: equal keys mean interchangeable
    cubins.

    Include-directory options name paths, not contents; the NVRTC version
    stands in for the CUDA headers and ``headers`` for the local ones.
    """
    return _digest([
        ("source", source_text.encode()),
        *(("option", opt.encode()) for opt in options),
        ("arch", arch.encode()),
        ("driver", str(int(driver_version)).encode()),
        ("nvrtc", f"{nvrtc_version[0]}.{nvrtc_version[1]}".encode()),
        *(("header:" + name, data) for name, data in sorted((headers or {}).items())),
    ])


def portable_options(options: Sequence[str]) -> tuple[str, ...]:
    """``options`` without the include-directory ones (``-I<dir>``, ``--include-path=<dir>``):
    those name paths of the machine that compiles, not what is compiled."""
    return tuple(o for o in options if not o.startswith(_INCLUDE_OPTIONS))


def prebuilt_key(source_text: str, options: Sequence[str], arch: str,
                 headers: dict[str, bytes] | None = None) -> str:
    """sha256 hex digest naming a prebuilt cubin: what determines its code and nothing else.

    The source, the local ``headers`` (every ``ep_*.cuh``), the options less their include
    paths (:func:`portable_options`; the build machine's paths are not the user's) and the
    architecture. Not the driver version, which a cubin does not depend on (whether this
    driver can load it is asked of the driver), nor the NVRTC version, which the manifest
    records: a cubin from any NVRTC is valid code for its architecture.
    """
    return _digest([
        ("prebuilt", b"1"),
        ("source", source_text.encode()),
        *(("option", opt.encode()) for opt in portable_options(options)),
        ("arch", arch.encode()),
        *(("header:" + name, data) for name, data in sorted((headers or {}).items())),
    ])


def nvrtc_version() -> tuple[int, int]:
    """``(major, minor)`` of the NVRTC library in use."""
    major, minor = _check(nvrtc().nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


# ---------------------------------------------------------------- compile

def _check(result: tuple[Any, ...], what: str, log: str = "") -> Any:
    err = result[0]
    if err:
        mod = nvrtc()
        try:
            _e, text = mod.nvrtcGetErrorString(err)
            name = text.decode() if isinstance(text, bytes) else str(text)
        except RuntimeError:
            name = f"nvrtcResult({int(err)})"
        raise NvrtcError(f"{what} failed: {name}", log=log, error_name=name)
    return result[1] if len(result) == 2 else (result[1:] if len(result) > 2 else None)


def _read_bytes(getter: Any, prog: Any, size: int) -> bytes:
    # a private buffer of >= 2 bytes: bytes of length 0 or 1 are shared CPython singletons
    # and NVRTC writes into the buffer we pass
    buf = bytes(max(int(size), 2))
    _check(getter(prog, buf), getter.__name__)
    return buf[:int(size)]


def compile_cubin(source_text: str, name: str, options: Sequence[str], arch: str) -> bytes:
    """Compile CUDA C++ ``source_text`` with NVRTC straight to a cubin for ``arch``.

    :param name: file name for diagnostics (``"elementwise.cu"``).
    :param options: NVRTC options; ``-arch=<arch>`` is added unless present.
    :raises NvrtcError: compilation failed; ``.log`` holds the compiler log.
    """
    mod = nvrtc()
    opts = list(options)
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in opts):
        opts.append(f"-arch={arch}")
    prog = _check(mod.nvrtcCreateProgram(source_text.encode(), name.encode(), 0, [], []),
                  f"nvrtcCreateProgram({name})")
    try:
        t0 = time.perf_counter()
        (err,) = mod.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        elapsed = time.perf_counter() - t0
        with _lock:
            _stats["compiles"] += 1
            _stats["compile_seconds"] += elapsed
        log_size = _check(mod.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = ""
        if log_size > 1:
            log = _read_bytes(mod.nvrtcGetProgramLog, prog, log_size).rstrip(b"\0").decode(
                errors="replace")
        if err:
            _check((err,), f"NVRTC compile of {name} for {arch} with {' '.join(opts)}", log=log)
        size = _check(mod.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        if not size:
            raise NvrtcError(f"NVRTC produced no cubin for {name}: -arch={arch} must be a real "
                             f"architecture (sm_XX), not a virtual one", log=log)
        return _read_bytes(mod.nvrtcGetCUBIN, prog, size)
    finally:
        mod.nvrtcDestroyProgram(prog)


def cubin_path(name: str, arch: str, key: str) -> Path:
    """Where the cubin of cache key ``key`` lives in :func:`cache_dir`."""
    return cache_dir() / f"{Path(name).stem}-{arch}-{key[:32]}.cubin"


def cached_cubin(source_text: str, name: str, options: Sequence[str], arch: str,
                 driver_version: int, key: str | None = None) -> tuple[bytes, str]:
    """The cubin for these inputs from the disk cache, compiling and storing it on a miss.

    :param key: the :func:`cache_key` of these inputs when the caller has it already.
    :returns: ``(cubin, cache key)``.
    """
    if key is None:
        key = cache_key(source_text, options, arch, driver_version, nvrtc_version(),
                        local_headers())
    path = cubin_path(name, arch, key)
    try:
        data = path.read_bytes()
    except OSError:
        data = b""
    if data[:4] == b"\x7fELF":
        with _lock:
            _stats["cache_hits"] += 1
        return data, key
    cubin = compile_cubin(source_text, name, options, arch)
    _store(path, cubin)
    return cubin, key


def _store(path: Path, data: bytes) -> None:
    # write to a temporary file and rename: concurrent processes never read half a cubin
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".cubin")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:  # a read-only cache only costs a recompile next time
        import warnings

        from onnx_ep.errors import OnnxEpWarning
        warnings.warn(f"could not write cubin cache {path}: {e}", OnnxEpWarning, stacklevel=3)


# ---------------------------------------------------------------- prebuilt cubins

def prebuilt_enabled() -> bool:
    """False when :data:`PREBUILT_ENV` is ``0`` (or ``false``, ``no``, ``off``)."""
    return os.environ.get(PREBUILT_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def prebuilt_file(name: str, arch: str, key: str) -> str:
    """File name, in :data:`PREBUILT_DIR`, of the cubin of ``kernels/<name>`` for ``arch``
    whose :func:`prebuilt_key` is ``key``."""
    return f"{Path(name).stem}-{arch}-{key[:32]}.cubin"


def prebuilt_manifest() -> dict[str, dict[str, Any]]:
    """``{file name: entry}`` from :data:`PREBUILT_MANIFEST`; empty when there is none (a
    source checkout) or it cannot be read (logged). Read again only when the file changes."""
    global _manifest_cache
    path = PREBUILT_DIR / PREBUILT_MANIFEST
    try:
        st = path.stat()
    except OSError:
        return {}
    stamp = (str(path), st.st_mtime_ns, st.st_size)
    with _lock:
        if _manifest_cache is not None and _manifest_cache[0] == stamp:
            return _manifest_cache[1]
        try:
            data = json.loads(path.read_text())
            cubins = data["cubins"] if data["format"] == 1 else {}
            if not isinstance(cubins, dict):
                raise TypeError(f"'cubins' is a {type(cubins).__name__}, not an object")
        except (OSError, ValueError, KeyError, TypeError) as e:
            _log.warning("ignoring the prebuilt cubins: cannot read %s (%s: %s)",
                         path, type(e).__name__, e)
            cubins = {}
        _manifest_cache = (stamp, cubins)
        return cubins


def _driver_can_load(entry: dict[str, Any], driver_version: int) -> bool:
    # a cubin from NVRTC 13.x needs a 13.x driver; within a major version the driver decides
    # (a refusal falls back at load time), but across one precompile must not count on it
    try:
        major = int(str(entry["nvrtc"]).split(".")[0])
    except (KeyError, ValueError):
        return True
    return int(driver_version) // 1000 >= major


def prebuilt_path(name: str, arch: str, key: str, driver_version: int) -> Path | None:
    """The shipped cubin of ``kernels/<name>`` for ``arch`` with :func:`prebuilt_key`
    ``key``, or None: prebuilt cubins are off (``ONNX_EP_PREBUILT=0``), the manifest lists
    none under this key (a stale cubin is never returned), the driver refused this arch's
    cubins earlier in this process, or it is older than the NVRTC major version that
    built it."""
    if arch in _refused_archs or not prebuilt_enabled():
        return None
    file = prebuilt_file(name, arch, key)
    entry = prebuilt_manifest().get(file)
    if not isinstance(entry, dict) or entry.get("key") != key or entry.get("arch") != arch:
        return None
    if not _driver_can_load(entry, driver_version):
        return None
    path = PREBUILT_DIR / file
    return path if path.is_file() else None


def prebuilt_cubin(name: str, arch: str, key: str, driver_version: int) -> bytes | None:
    """The bytes at :func:`prebuilt_path`, or None (also for a file that is not the ELF
    of the size its manifest entry records)."""
    path = prebuilt_path(name, arch, key, driver_version)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    expected = prebuilt_manifest().get(path.name, {}).get("bytes")
    if data[:4] != b"\x7fELF" or (expected is not None and expected != len(data)):
        return None
    return data


def _load_prebuilt(source: str, arch: str, key: str, driver_version: int) -> Any | None:
    """Load the prebuilt cubin of ``source`` into the current context, or None when there
    is none or the driver refuses it (counted; the arch's cubins are then skipped)."""
    from onnx_ep.providers.cuda import launch

    cubin = prebuilt_cubin(f"{source}.cu", arch, key, driver_version)
    if cubin is None:
        return None
    try:
        module = launch.load_module(cubin)
    except CudaError as e:
        if e.error_name not in _REFUSED_IMAGE_ERRORS:
            raise
        # the driver would refuse every cubin of that build: ask it once per process
        _refused_archs.add(arch)
        _stats["prebuilt_refused"] += 1
        _log.warning("the CUDA driver (%d) refused the prebuilt %s cubin of %s.cu (%s); "
                     "this process compiles its %s kernels with NVRTC instead. Update the "
                     "driver, or set %s=0 to skip the attempt", int(driver_version), arch,
                     source, e.error_name, arch, PREBUILT_ENV)
        return None
    _stats["prebuilt_hits"] += 1
    return module


def precompile(sources: Iterable[str], arch: str, driver_version: int,
               options: Sequence[str] = (), workers: int | None = None) -> list[str]:
    """Compile, in parallel threads, the cubins of ``kernels/<source>.cu`` for ``arch`` that
    neither the prebuilt cubins nor the disk cache have; the sources compiled, in order.

    A session's kernels otherwise compile one family at a time as each first launches, and a
    cold first run waits for the sum of them; NVRTC runs outside the GIL, so here it waits
    for about the slowest one. Unknown sources are skipped; a source that does not compile
    is left for its first launch, which raises the error with the node that needs it.
    """
    opts = full_options(arch, options)
    headers = local_headers()
    version: tuple[int, int] | None = None   # NVRTC is asked only when something compiles
    todo: list[tuple[str, str, str]] = []
    for source in sorted(set(sources)):
        try:
            text = source_path(source).read_text()
        except FileNotFoundError:
            continue
        pkey = prebuilt_key(text, opts, arch, headers)
        if prebuilt_path(f"{source}.cu", arch, pkey, driver_version) is not None:
            continue
        if version is None:
            version = nvrtc_version()
        key = cache_key(text, opts, arch, driver_version, version, headers)
        if not cubin_path(f"{source}.cu", arch, key).is_file():
            todo.append((source, text, key))
    if not todo:
        return []

    def build(job: tuple[str, str, str]) -> str:
        source, text, key = job
        try:
            cached_cubin(text, f"{source}.cu", opts, arch, driver_version, key=key)
        except NvrtcError:
            pass
        return source

    n = workers or min(len(todo), os.cpu_count() or 1, 16)
    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(build, todo))


# ---------------------------------------------------------------- functions

def source_path(source: str) -> Path:
    """``kernels/<source>.cu``; :raises FileNotFoundError: naming the available sources."""
    path = KERNELS_DIR / f"{source}.cu"
    if not path.is_file():
        have = sorted(p.stem for p in KERNELS_DIR.glob("*.cu"))
        raise FileNotFoundError(f"no kernel source {path.name} in {KERNELS_DIR}; "
                                f"available: {', '.join(have) or 'none'}")
    return path


def get_module(source: str, device: Any, options: Sequence[str] = ()) -> Any:
    """The loaded :class:`~onnx_ep.providers.cuda.launch.Module` of ``kernels/<source>.cu``.

    Loaded once per process and device, from the first of: a prebuilt cubin for the
    device's arch and this source's :func:`prebuilt_key`, the disk cache, an NVRTC compile
    (stored in the disk cache).

    :raises NvrtcError: the source does not compile (log attached).
    """
    from onnx_ep.providers.cuda import driver as cuda_driver
    from onnx_ep.providers.cuda import launch

    text = source_path(source).read_text()
    arch = device.arch
    opts = full_options(arch, options)
    headers = local_headers()
    pkey = prebuilt_key(text, opts, arch, headers)
    with _lock:
        # a module already loaded on this device is reused without touching the disk:
        # only the first symbol of a source reads (or compiles) its cubin
        mkey = (pkey, device.ordinal)
        module = _modules.get(mkey)
        if module is None:
            device.set_current()
            driver = cuda_driver.driver_version()
            module = _load_prebuilt(source, arch, pkey, driver)
            if module is None:
                key = cache_key(text, opts, arch, driver, nvrtc_version(), headers)
                cubin, _ = cached_cubin(text, f"{source}.cu", opts, arch, driver, key=key)
                module = launch.load_module(cubin)
            _modules[mkey] = module
            _stats["loads"] += 1
        return module


def get_function(source: str, symbol: str, device: Any, options: Sequence[str] = ()) -> Any:
    """The kernel ``symbol`` of ``kernels/<source>.cu`` compiled for ``device``.

    The first call per (source, symbol, options, device) compiles or reads the
    cache and loads the module; later calls are a dict lookup.

    :raises NvrtcError: the source does not compile (log attached).
    :raises CudaError: CUDA_ERROR_NOT_FOUND when ``symbol`` is not in the cubin.
    """
    fkey = (source, symbol, tuple(options), device.ordinal)
    fn = _functions.get(fkey)
    if fn is None:
        with _lock:
            fn = _functions.get(fkey)
            if fn is None:
                fn = get_module(source, device, options).function(symbol)
                _functions[fkey] = fn
    return fn
