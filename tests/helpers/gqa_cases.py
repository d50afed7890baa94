"""One-node com.microsoft::GroupQueryAttention models and their feeds, the way
onnxruntime-genai drives them: first prompts (right-padded batches), subsequent prompts and
decode steps over a shared (fixed-capacity) or growing KV cache.

``total_sequence_length`` (and the rotary caches and head_sink) are initializers, so a plan
knows the present length; ``seqlens_k`` is fed. A shared buffer holds each entry's past rows
and zeros after them (what genai's zeroed buffer holds), so the in-place update and the
reference's fresh present agree on every row.
"""

from __future__ import annotations

from typing import Any

import attrs
import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from tests.helpers.oracle import ORACLE_IR_VERSION

MS = "com.microsoft"
INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k",
          "total_sequence_length", "cos_cache", "sin_cache", "position_ids",
          "attention_bias", "head_sink")
#: fed at run time (the rest are initializers)
FED = frozenset({"query", "key", "value", "past_key", "past_value", "seqlens_k",
                 "position_ids", "attention_bias"})
BF16 = np.dtype(ml_dtypes.bfloat16)


@attrs.frozen
class GqaCase:
    """One call. ``lengths``: tokens of each entry after the call (``seqlens_k + 1``).

    ``cache``: None (no past), ``"shared"`` (past and present ``capacity`` rows) or
    ``"growing"`` (past ``capacity`` rows, present ``total``). ``total`` defaults to
    ``max(lengths)``, or ``capacity`` for a shared decode step (genai's static mask).
    """

    q_len: int
    lengths: tuple[int, ...]
    dtype: Any = np.float32
    hq: int = 14
    hkv: int = 2
    head: int = 64
    cache: str | None = "shared"
    capacity: int = 0
    total: int | None = None
    packed: bool = False
    rotary: int | None = None          #: None: no rotary, else rotary_interleaved
    rotary_dim: int | None = None      #: default: the head size
    position_ids: str | None = None    #: "int64" / "int32": fed position_ids
    bias: bool = False
    sink: bool = False
    outputs: tuple[str, ...] = ("y", "present_key", "present_value")
    attrs: dict[str, Any] = attrs.field(factory=dict)
    seed: int = 0

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def total_len(self) -> int:
        if self.total is not None:
            return self.total
        if self.cache == "shared" and self.q_len == 1:
            return self.capacity
        return max(self.lengths)

    @property
    def first_prompt(self) -> bool:
        return self.q_len == self.total_len

    @property
    def pasts(self) -> np.ndarray:
        lengths = np.array(self.lengths, np.int64)
        return np.zeros_like(lengths) if self.first_prompt else lengths - self.q_len

    @property
    def past_len(self) -> int:
        return self.capacity if self.cache else 0

    @property
    def present_len(self) -> int:
        return max(self.total_len, self.past_len)

    def check_valid(self) -> None:
        """The reference's conditions on seqlens_k (it fails the node otherwise)."""
        p, t = self.pasts, np.array(self.lengths)
        assert (p >= 0).all() and (p + self.q_len <= self.present_len).all()
        assert (t <= self.present_len).all() and self.present_len <= self.past_len + self.q_len
        if not self.first_prompt:
            assert (p <= self.past_len).all()
        if self.cache == "growing":
            assert self.present_len > self.past_len, "a growing cache must grow"

    # ------------------------------------------------------------ data
    def _x(self, rng: np.random.Generator, *shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32).astype(self.dtype)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every input by name (missing optionals left out)."""
        self.check_valid()
        rng = np.random.default_rng(self.seed)
        b, s, d, hq, hkv = self.batch, self.q_len, self.head, self.hq, self.hkv
        out: dict[str, np.ndarray] = {}
        if self.packed:
            out["query"] = self._x(rng, b, s, (hq + 2 * hkv) * d)
        else:
            out["query"] = self._x(rng, b, s, hq * d)
            out["key"] = self._x(rng, b, s, hkv * d)
            out["value"] = self._x(rng, b, s, hkv * d)
        if self.cache:
            for name in ("past_key", "past_value"):
                past = self._x(rng, b, hkv, self.capacity, d)
                if self.cache == "shared":     # zeros after each entry's past rows ...
                    for i, p in enumerate(self.pasts):
                        past[i, :, int(p) + s:] = 0   # ... the new rows' slots hold garbage
                out[name] = past
        out["seqlens_k"] = (np.array(self.lengths) - 1).astype(np.int32)
        out["total_sequence_length"] = np.array(self.total_len, np.int32)
        if self.rotary is not None:
            half = (self.rotary_dim or d) // 2
            rows = self.present_len + 16
            theta = rng.uniform(0, 1, half) ** 2
            angles = np.arange(rows)[:, None] * theta[None, :]
            out["cos_cache"] = np.cos(angles).astype(self.dtype)
            out["sin_cache"] = np.sin(angles).astype(self.dtype)
            if self.position_ids:
                pid = rng.integers(0, rows - s, (b, s)).astype(self.position_ids)
                out["position_ids"] = pid
        if self.bias:
            out["attention_bias"] = self._x(rng, b, 1, s, self.total_len)
        if self.sink:
            out["head_sink"] = self._x(rng, hq)
        return out

    def feeds(self) -> dict[str, np.ndarray]:
        return {n: a for n, a in self.arrays().items() if n in FED}

    def model(self) -> onnx.ModelProto:
        arrays = self.arrays()
        names = [n if n in arrays else "" for n in INPUTS]
        while not names[-1]:
            names.pop()
        attrs_ = dict(num_heads=self.hq, kv_num_heads=self.hkv, **self.attrs)
        if self.rotary is not None:
            attrs_.update(do_rotary=1, rotary_interleaved=self.rotary)
        node = helper.make_node("GroupQueryAttention", names, list(self.outputs), domain=MS,
                                name="gqa")
        node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs_.items())
        fed = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                             list(a.shape))
               for n, a in arrays.items() if n in FED]
        inits = [numpy_helper.from_array(a, n) for n, a in arrays.items() if n not in FED]
        graph = helper.make_graph([node], "gqa", fed,
                                  [onnx.ValueInfoProto(name=o) for o in self.outputs if o],
                                  initializer=inits)
        return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                                 opset_imports=[helper.make_opsetid("", 21),
                                                helper.make_opsetid(MS, 1)])


def decode(lengths: tuple[int, ...], capacity: int, **kw: Any) -> GqaCase:
    """A decode step over a shared buffer of ``capacity`` rows."""
    return GqaCase(1, tuple(lengths), cache="shared", capacity=capacity, **kw)


def decode_growing(lengths: tuple[int, ...], **kw: Any) -> GqaCase:
    """A decode step whose past is the longest entry's past (present one row longer)."""
    past = max(lengths) - 1
    return GqaCase(1, tuple(lengths), cache="growing", capacity=past, total=past + 1, **kw)


def first_prompt(lengths: tuple[int, ...], capacity: int = 0, **kw: Any) -> GqaCase:
    """A right-padded first prompt of ``max(lengths)`` tokens (shared buffer when
    ``capacity``, else no past)."""
    s = max(lengths)
    return GqaCase(s, tuple(lengths), cache="shared" if capacity else None,
                   capacity=capacity, total=s, **kw)


def next_prompt(q_len: int, lengths: tuple[int, ...], capacity: int = 0,
                **kw: Any) -> GqaCase:
    """A subsequent prompt of ``q_len`` tokens: over a shared buffer of ``capacity`` rows,
    or (capacity 0) a growing past of ``max(lengths) - q_len`` rows."""
    if capacity:
        return GqaCase(q_len, tuple(lengths), cache="shared", capacity=capacity, **kw)
    past = max(lengths) - q_len
    return GqaCase(q_len, tuple(lengths), cache="growing", capacity=past,
                   total=past + q_len, **kw)
