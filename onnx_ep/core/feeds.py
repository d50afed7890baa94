"""Feeds: bind a ``run``'s feed dict to the model's inputs, with errors that say what was expected.

A run's *signature* (each input's dtype and shape) keys the session's plan cache; a
signature seen before was validated then, so a cached run does no checks at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.graph import Value
from onnx_ep.core.tensor import HOST, Tensor
from onnx_ep.errors import FeedError

_MISSING: Any = object()


class FeedBinder:
    """Orders feeds like the model's inputs and validates them against the declared types."""

    def __init__(self, inputs: Sequence[Value],
                 defaults: Mapping[str, np.ndarray] | None = None) -> None:
        """:param defaults: the value of an input a run may omit (an overridable initializer)."""
        self.inputs = list(inputs)
        self.index = {v.name: i for i, v in enumerate(self.inputs)}
        self.defaults = dict(defaults or {})

    def index_of(self, name: str) -> int:
        """Position of input ``name``; :raises FeedError: an unknown name, listing the known."""
        idx = self.index.get(name)
        if idx is None:
            known_names = ", ".join(self.index) or "none"
            raise FeedError(f"unknown input {name!r}; the model's inputs are: "
                            f"{known_names}", input_name=name)
        return idx

    def bind(self, feeds: Mapping[str, Any],
             known: Any = ()) -> tuple[list[Any], tuple[Any, ...]]:
        """``(values in input order, signature)``; validates unless ``signature in known``.

        :raises FeedError: naming the input, what was expected and what was given.
        """
        if not isinstance(feeds, Mapping):
            raise FeedError(f"feeds must be a dict of input name -> numpy array, got "
                            f"{type(feeds).__name__}")
        arrays: list[Any] = [_MISSING] * len(self.inputs)
        for name, value in feeds.items():
            arrays[self.index_of(name)] = value
        sig: list[Any] = []
        for i, (v, a) in enumerate(zip(self.inputs, arrays)):
            if type(a) is Tensor and a.device != HOST:
                # a device tensor (a bound KV cache: ~50 of them a decode step): same
                # signature as its host twin, so plans are shared
                sig.append((a.dtype, a.shape))
                continue
            if a is _MISSING and v.name in self.defaults:
                a = arrays[i] = self.defaults[v.name]
            elif isinstance(a, PYTHON_VALUES) and v.kind == "tensor":
                a = arrays[i] = from_python(v, a)
            if isinstance(a, np.generic):       # numpy scalars are 0-d tensors
                a = arrays[i] = np.asarray(a)
            elif isinstance(a, Tensor):
                if a.is_host:
                    a = arrays[i] = a.value
                else:                           # a device tensor: same signature as its
                    sig.append((a.dtype, a.shape))  # host twin, so plans are shared
                    continue
            if a is None and v.kind == "optional":
                sig.append((None, None))        # an empty optional
                continue
            if a is _MISSING or a is None:
                raise FeedError(f"missing feed for input {v.name!r} (expected "
                                f"{describe(v)})", input_name=v.name, expected=describe(v))
            if isinstance(a, np.ndarray):
                sig.append((a.dtype, a.shape))
            else:
                sig.append((type(a), None))
        signature = tuple(sig)
        if signature not in known:
            self.validate(arrays)
        return arrays, signature

    def validate(self, arrays: list[Any]) -> None:
        """Check dtypes, ranks, fixed dims and that shared symbolic dims agree."""
        bound: dict[str, tuple[int, str]] = {}
        for v, a in zip(self.inputs, arrays):
            expected = describe(v)
            # a device Tensor is checked through its dtype and shape like an array
            if v.kind in ("tensor", "unknown") and not isinstance(a, (np.ndarray, Tensor)):
                raise FeedError(f"input {v.name!r} expects a numpy array ({expected}), got "
                                f"{type(a).__name__}; wrap it with np.asarray(..., dtype=...)",
                                input_name=v.name, expected=expected, got=type(a).__name__)
            if not isinstance(a, (np.ndarray, Tensor)) or not v.elem_type:
                continue
            want_dt = np_dtype(v.elem_type)
            if a.dtype != want_dt and not (want_dt == np.dtype(object) and a.dtype.kind in "OUS"):
                raise FeedError(f"input {v.name!r} expects dtype {want_dt} ({v.type_str}), "
                                f"got {a.dtype}", input_name=v.name, expected=expected,
                                got=f"{a.dtype}{list(a.shape)}")
            if v.spec is None:
                continue
            shape = v.spec.shape
            if len(shape) != a.ndim:
                raise FeedError(f"input {v.name!r} expects rank {len(shape)} "
                                f"(shape {shape_str(shape)}), got rank {a.ndim} "
                                f"(shape {list(a.shape)})", input_name=v.name,
                                expected=expected, got=f"{a.dtype}{list(a.shape)}")
            for axis, (want, got) in enumerate(zip(shape, a.shape)):
                if isinstance(want, int) and want != got:
                    raise FeedError(f"input {v.name!r} expects dim {axis} = {want} (shape "
                                    f"{shape_str(shape)}), got {got} (shape {list(a.shape)})",
                                    input_name=v.name, expected=expected,
                                    got=f"{a.dtype}{list(a.shape)}")
                if isinstance(want, str):
                    prev = bound.setdefault(want, (got, v.name))
                    if prev[0] != got:
                        raise FeedError(
                            f"input {v.name!r} dim {axis} is symbolic {want!r} = {got}, but "
                            f"input {prev[1]!r} bound {want!r} = {prev[0]}; inputs sharing a "
                            f"symbolic dim must agree", input_name=v.name, expected=expected,
                            got=f"{a.dtype}{list(a.shape)}")


#: feeds that onnxruntime converts to the input's element type (numpy arrays it never casts)
PYTHON_VALUES = (list, tuple, bool, int, float, str, bytes)


def from_python(v: Value, value: Any) -> np.ndarray:
    """A Python list or scalar fed to a tensor input, as an array of the input's element
    type (onnxruntime converts ``[[1.0, 2.0]]`` for a float input to float32, not float64).

    :raises FeedError: the value does not convert (ragged lists, text for a number).
    """
    dtype = np_dtype(v.elem_type) if v.elem_type else None
    try:
        return np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FeedError(f"input {v.name!r} expects {describe(v)}; the {type(value).__name__} "
                        f"given does not convert to {dtype or 'an array'}: {exc}",
                        input_name=v.name, expected=describe(v),
                        got=type(value).__name__) from exc


def shape_str(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def describe(v: Value) -> str:
    """``tensor(float) [batch, 8]``: what a message says an input expects."""
    if v.spec is None:
        return v.type_str or "any value"
    return f"{v.type_str} {shape_str(v.spec.shape)}"
