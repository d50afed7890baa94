"""SessionOptions and RunOptions: frozen configuration values (also read from TOML)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import attrs

from onnx_ep.errors import OptionsError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOG_LEVELS = ("debug", "info", "warning", "error")
#: what ``capture=`` accepts (core/capture.py)
CAPTURE_MODES = ("auto", "off", "require")
#: what ``fusion=`` accepts (core/fusion.py)
FUSION_MODES = ("auto", "off")
#: what a profile's file name starts with unless ``profile_prefix=`` says (core/profiling.py)
PROFILE_PREFIX = "onnx_ep_profile"


def _providers(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    # onnxruntime's ("CUDAExecutionProvider", {options}) form: the name is kept
    return tuple(str(v[0]) if isinstance(v, (tuple, list)) else str(v) for v in value)


def _dim_overrides(value: Any) -> tuple[tuple[str, int], ...]:
    """``{"batch": 1}`` (or pairs) as sorted pairs, so the options stay hashable."""
    pairs = sorted(dict(value or {}).items())
    for name, size in pairs:
        if (not isinstance(name, str) or not isinstance(size, int) or isinstance(size, bool)
                or size < 0):
            raise OptionsError(f"free_dimension_overrides maps a symbolic dim's name (or "
                               f"denotation) to a size >= 0, got {name!r}: {size!r}")
    return tuple(pairs)


def _positive_or_none(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, int) or value <= 0):
        raise OptionsError(f"{attribute.name} must be a positive number of bytes or None, "
                           f"got {value!r}")


def _log_level(inst: Any, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in LOG_LEVELS:
        raise OptionsError(f"log_level must be one of {LOG_LEVELS}, got {value!r}")


def _capture_mode(inst: Any, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in CAPTURE_MODES:
        raise OptionsError(f"{attribute.name} must be one of {CAPTURE_MODES}, got {value!r}")


def _fusion_mode(inst: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in FUSION_MODES:
        raise OptionsError(f"{attribute.name} must be one of {FUSION_MODES}, got {value!r}")


def _flag(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise OptionsError(f"{attribute.name} must be True or False, got {value!r}")


def _seconds(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0
            or value != value):
        raise OptionsError(f"{attribute.name} must be a number of seconds >= 0, got {value!r}")


def _file_prefix(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise OptionsError(f"{attribute.name} must be a non-empty file name prefix, got "
                           f"{value!r}")


def _positive_count(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise OptionsError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class SessionOptions:
    """How a :class:`Session` is built.

    :ivar providers: provider names in priority order (``None``: best available).
    :ivar log_level: ``debug``, ``info``, ``warning`` or ``error``: sets the ``onnx_ep``
        logger's level; ``None`` (default) leaves the application's logging alone.
    :ivar memory_limit: the memory budget in bytes (``vram_limit`` is an alias);
        ``None`` uses the device's free memory.
    :ivar memory_policy: force ``full_resident`` or ``weight_streaming``
        (else the ``onnx_ep_select_memory_policy`` hook decides; the
        ``ONNX_EP_MEMORY_POLICY`` environment variable overrides both).
    :ivar admission: admission strategy name (``strict`` or ``headroom``).
    :ivar headroom_fraction: the fraction of the budget ``headroom`` keeps free.
    :ivar capture: CUDA-graph capture of device plans (docs/CAPTURE.md): ``auto`` (default)
        records each shape signature after its first run where the device can, ``off``
        runs every step eagerly, ``require`` raises :exc:`CaptureError` when a signature
        is planned that cannot be captured entirely.
    :ivar capture_graphs: the most instantiated graphs the session keeps; beyond it the
        least recently run signature's graphs are evicted (and recorded again when it
        runs next).
    :ivar fusion: ``auto`` (default) rewrites node patterns a device provider of the
        session runs as one kernel (an RMS norm, a rotary embedding: core/fusion.py) when
        the session is loaded; ``off`` runs the graph node for node. Host-only sessions
        never fuse.
    :ivar disable_fallback: ``providers=["cuda"]`` behaves like onnxruntime's
        ``["CUDAExecutionProvider"]``: nodes the device cannot run fall back to the CPU
        reference, logged at INFO with the reason. ``True`` refuses them instead
        (:exc:`NoKernelError` naming why each listed provider declined).
    :ivar plan_cache_size: the most shape signatures whose plans (arenas, workspaces,
        captured graphs) the session keeps; beyond it the plan run longest ago is evicted
        and its memory released (planned again if its signature comes back).
    :ivar plan_cache_bytes: also evict while the kept plans' arenas and workspace peaks
        exceed this many bytes (``None``: no bound by bytes).
    :ivar admission_timeout: seconds the ``queue`` admission strategy lets a request wait
        for its turn and its bytes before refusing it with :exc:`TierExhausted`.
    :ivar strict_plugins: an installed plugin (entry point) that fails to load or register
        is disabled with an :class:`~onnx_ep.errors.OnnxEpWarning` naming it, and sessions
        that do not need it work; ``True`` makes that a :exc:`PluginError` instead.
    :ivar profile: record a Chrome trace of the session's load and runs (one event per
        node run, docs/PROFILING.md) until ``Session.end_profiling()``, which writes it and
        returns its path (onnxruntime's ``enable_profiling``).
    :ivar profile_prefix: the trace file is ``<profile_prefix>_<YYYY-MM-DD_HH-MM-SS>.json``;
        a prefix with a directory writes there (onnxruntime's ``profile_file_prefix``).
    :ivar free_dimension_overrides: ``{"batch": 1}``: fixes the symbolic dims of the model's
        inputs and outputs whose name (``dim_param``) or denotation (``DATA_BATCH``) is a
        key, when the model is loaded (onnxruntime's free dimension overrides); a dict or
        pairs, kept as sorted pairs.
    """

    providers: tuple[str, ...] | None = attrs.field(default=None, converter=_providers)
    log_level: str | None = attrs.field(default=None, validator=_log_level)
    memory_limit: int | None = attrs.field(default=None, validator=_positive_or_none)
    memory_policy: str | None = None
    admission: str | None = None
    headroom_fraction: float = 0.1
    capture: str = attrs.field(default="auto", validator=_capture_mode)
    capture_graphs: int = attrs.field(default=64, validator=_positive_count)
    fusion: str = attrs.field(default="auto", validator=_fusion_mode)
    disable_fallback: bool = attrs.field(default=False, validator=_flag)
    strict_plugins: bool = attrs.field(default=False, validator=_flag)
    plan_cache_size: int = attrs.field(default=16, validator=_positive_count)
    plan_cache_bytes: int | None = attrs.field(default=None, validator=_positive_or_none)
    admission_timeout: float = attrs.field(default=10.0, validator=_seconds)
    profile: bool = attrs.field(default=False, validator=_flag)
    profile_prefix: str = attrs.field(default=PROFILE_PREFIX, validator=_file_prefix)
    free_dimension_overrides: tuple[tuple[str, int], ...] = attrs.field(
        default=(), converter=_dim_overrides)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> SessionOptions:
        """Read options from a TOML file: top-level keys or an ``[onnx_ep]`` table.

        ``vram_limit`` is accepted as an alias of ``memory_limit``.

        :raises OptionsError: for unknown keys or invalid values, naming them.
        """
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise OptionsError(f"cannot read options file {os.fspath(path)!r}: {exc}") from exc
        return cls.from_dict(data.get("onnx_ep", data))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionOptions:
        data = dict(data)
        if "vram_limit" in data:
            data.setdefault("memory_limit", data.pop("vram_limit"))
        known = {a.name for a in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise OptionsError(f"unknown option(s) {unknown}; known options: {sorted(known)}")
        return cls(**data)


class RunOptions:
    """Per-run options, like onnxruntime's ``RunOptions``.

    Set :attr:`terminate` (from another thread) to cancel a run between steps;
    the run raises :exc:`RunCancelled` and releases its reservations. Set :attr:`capture`
    to ``"off"`` to run this run eagerly (``None``, the default, follows the session's
    ``capture`` option), e.g. to compare captured and eager runs in one process.

    ``synchronize=False`` (onnxruntime's run config entry
    ``disable_synchronize_execution_providers``) lets ``Session.run_with_iobinding`` return
    once a device run's work is queued on the session's stream: outputs bound to the device
    are complete after ``binding.synchronize_outputs()``, or when a reader from
    ``core.device_io.readback`` returns; outputs bound to the host are complete on return (their
    copy waits). Later runs of the session queue behind it, so the host can prepare the next
    run while the device works. ``Session.run`` always waits (it returns host arrays).
    """

    def __init__(self, *, tag: str = "", terminate: bool = False,
                 capture: str | None = None, synchronize: bool = True) -> None:
        if capture is not None and capture not in ("auto", "off"):
            raise OptionsError(f"RunOptions.capture must be 'auto', 'off' or None, got "
                               f"{capture!r}")
        self.tag = tag
        self.capture = capture
        self.synchronize = bool(synchronize)
        self._terminate = threading.Event()
        if terminate:
            self._terminate.set()

    @property
    def terminate(self) -> bool:
        return self._terminate.is_set()

    @terminate.setter
    def terminate(self, value: bool) -> None:
        if value:
            self._terminate.set()
        else:
            self._terminate.clear()
