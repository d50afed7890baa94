"""Provider names: onnxruntime's (``CPUExecutionProvider``) <-> onnx-ep's (``cpu_reference``),
the module-level provider and device queries, and provider-argument normalization."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from onnx_ep.core.plugin_manager import PROVIDER_ALIASES, default_plugins

#: onnx-ep name -> onnxruntime name; providers without one keep their own name
ORT_NAMES = {native: ort for ort, native in PROVIDER_ALIASES.items()}
CPU = "CPUExecutionProvider"


def ort_name(native: str) -> str:
    return ORT_NAMES.get(native, native)


def native_name(name: str) -> str:
    return PROVIDER_ALIASES.get(name, name)


def _cpu_last(names: list[str]) -> list[str]:
    return [n for n in names if n != CPU] + ([CPU] if CPU in names else [])


def get_available_providers() -> list[str]:
    """Providers that run here, onnxruntime-named, best first, ``CPUExecutionProvider`` last."""
    return _cpu_last([ort_name(p) for p in default_plugins().registry.available()])


def get_all_providers() -> list[str]:
    """Every registered provider, available here or not, ``CPUExecutionProvider`` last."""
    reg = default_plugins().registry
    names = [ort_name(p) for p in sorted(reg.providers, key=lambda p: -reg.providers[p].priority)]
    return _cpu_last(names)


def get_device() -> str:
    """``"GPU"`` when a CUDA provider can run here, else ``"CPU"``."""
    return "GPU" if "CUDAExecutionProvider" in get_available_providers() else "CPU"


def check_and_normalize_provider_args(providers: Any, provider_options: Any,
                                      available_provider_names: Sequence[str]
                                      ) -> tuple[list[str], list[dict[str, str]]]:
    """Validate ``providers`` (names or ``(name, options)`` tuples) and ``provider_options``
    (one dict per name), as onnxruntime does: ``(names, options)`` with string keys and
    values; a duplicate name is ignored and a name not in ``available_provider_names``
    is kept, both with a warning.

    :raises ValueError: arguments of the wrong shape or type.
    """
    if providers is None:
        return [], []
    if isinstance(providers, str) or not isinstance(providers, Sequence):
        raise ValueError("'providers' should be a sequence.")
    pairs: list[tuple[Any, Any]]
    if provider_options is not None:
        if isinstance(provider_options, str) or not isinstance(provider_options, Sequence):
            raise ValueError("'provider_options' should be a sequence.")
        if len(providers) != len(provider_options):
            raise ValueError("'providers' and 'provider_options' should be the same length if "
                             "both are given.")
        if not all(isinstance(p, str) for p in providers):
            raise ValueError("Only string values for 'providers' are supported if "
                             "'provider_options' is given.")
        if not all(isinstance(o, dict) for o in provider_options):
            raise ValueError("'provider_options' values must be dicts.")
        pairs = list(zip(providers, provider_options))
    else:
        pairs = []
        for p in providers:
            if isinstance(p, str):
                pairs.append((p, {}))
            elif (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                  and isinstance(p[1], dict)):
                pairs.append(p)
            else:
                raise ValueError("'providers' values must be either strings or (string, dict) "
                                 "tuples.")
    out: dict[str, dict[str, str]] = {}
    for name, options in pairs:
        if name not in available_provider_names:
            warnings.warn(f"Specified provider '{name}' is not in available provider names."
                          f"Available providers: '{', '.join(available_provider_names)}'",
                          stacklevel=3)
        if name in out:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", stacklevel=3)
            continue
        out[name] = {str(k): str(v) for k, v in options.items()}
    return list(out), list(out.values())
