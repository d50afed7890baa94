"""The KV cache of one generator: its bytes reserved once, under role ``kv_cache``.

Capacity is ``2 x batch x kv_heads x rows x head_size`` elements of the model's past dtype
per layer, ``rows`` being ``max_length`` (:func:`layer_rows`: a layer whose attention keeps
a window-sized cache holds ``window + slack`` rows instead, when that is fewer), reserved
in the session's memory authority (its device and ``memory_limit``) when the generator is
made, before any step runs: a batch and
``max_length`` that can never fit raise :exc:`~onnx_ep.errors.CapacityUnavailable` then
(HTTP 429), one that does not fit now :exc:`~onnx_ep.errors.TierExhausted`. The bytes are
released when the generator is closed or collected (docs/GENAI.md, docs/MEMORY.md).

Two layouts, as ``past_present_share_buffer`` in genai_config.json says:

- :class:`SharedKV`: one buffer ``[batch, kv_heads, max_length, head_size]`` per layer and
  key/value, allocated once inside the reservation (on the session's device when it runs on
  one, else on the host), zeroed, and bound through an :class:`~onnx_ep.IOBinding` as both
  the past input and the present output of every step: the model writes the new tokens'
  keys and values into it (GroupQueryAttention in place) and the buffers never move, so
  every decode step has one shape signature.
- :class:`GrowingKV`: standard-op exports that ``Concat`` past and new: each step's
  presents (``[batch, kv_heads, total, head_size]``) become the next step's pasts, kept on
  the session's device between steps. The reservation is the bound the cache may grow to.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import Fit, Reservation, Role, align_up, allocate_host
from onnx_ep.core.tensor import HOST, Tensor, device_runtime
from onnx_ep.errors import CapacityUnavailable, ModelError

_ids = itertools.count(1)
#: offsets of the shared buffers inside their block
ALIGNMENT = 256


#: rows a window-sized cache holds beyond its window when genai_config.json does not say
#: (onnxruntime-genai's CPU default): the cache reclaims that many at once, not one a token
WINDOW_SLACK = 16


def layer_rows(decoder: Any, max_length: int) -> list[int]:
    """Rows of each layer's cache: ``max_length``, or for a layer listed in the config's
    ``sliding_window`` (its GroupQueryAttention keeps a window-sized cache) the window plus
    ``cache_slack`` (:data:`WINDOW_SLACK` when 0) when fewer, and never below the window
    (the operator's least capacity)."""
    rows = [max_length] * decoder.num_hidden_layers
    if decoder.window_size > 0:
        window = decoder.window_size
        cap = max(window, min(max_length, window + (decoder.cache_slack or WINDOW_SLACK)))
        for i in decoder.window_layers:      # indices checked when the config was read
            rows[i] = cap
    return rows


def layout(rows: list[int], batch: int, kv_heads: int, head_size: int,
           dtype: Any) -> tuple[list[TensorSpec], list[int], int]:
    """The cache's buffers in one block: key and value of layer i (``rows[i]`` rows each),
    one after the other, each at an :data:`ALIGNMENT` offset; ``(specs, offsets, bytes)``."""
    specs = [TensorSpec(np.dtype(dtype), (batch, kv_heads, r, head_size))
             for r in rows for _ in range(2)]
    offsets, end = [], 0
    for spec in specs:
        offsets.append(end)
        end += align_up(spec.nbytes, ALIGNMENT)
    return specs, offsets, end


def capacity_bytes(rows: list[int], batch: int, kv_heads: int, head_size: int,
                   dtype: Any) -> int:
    """Bytes of a full KV cache of ``rows[i]`` rows in layer i: THE formula the reservation
    and the docs use (:func:`layout`'s)."""
    return layout(rows, batch, kv_heads, head_size, dtype)[2]


class KVCache:
    """The reservation both layouts share; :meth:`close` releases it (idempotent)."""

    shared = False

    def __init__(self, model: Any, batch: int, max_length: int) -> None:
        dec = model.config.decoder
        self.layers = len(dec.kv_layers)
        self.shape = (batch, dec.num_key_value_heads, max_length, dec.head_size)
        #: rows of each layer's cache, by layer index; ``kv_rows`` those of the KV layers
        self.rows = layer_rows(dec, max_length)
        self.kv_rows = [self.rows[i] for i in dec.kv_layers]
        self.dtype = np.dtype(model.kv_dtype)
        self.device = model.device
        self.runtime = getattr(model, "runtime", None)
        self.nbytes = capacity_bytes(self.kv_rows, batch, dec.num_key_value_heads,
                                     dec.head_size, self.dtype)
        self.holder = f"{model.session.holder}/generator-{next(_ids)}"
        self.reservation = _reserve(model, self.nbytes, self.holder, batch, max_length)
        self._finalizer = weakref.finalize(self, self.reservation.release)
        self.names = [(dec.past_names(i), dec.present_names(i)) for i in dec.kv_layers]

    def close(self) -> None:
        self._finalizer()

    def bind(self, binding: Any) -> dict[str, Tensor]:
        """Bind the pasts (and, shared, the presents) to ``binding``; the pasts by name."""
        raise NotImplementedError

    def update(self, outputs: dict[str, Tensor]) -> None:
        """After a run: take the presents the binding returned (by name)."""

    def reset(self) -> None:
        """Forget every fed column, before the kept ones run again (a shared buffer needs
        nothing: those columns are written again in place)."""


def _reserve(model: Any, nbytes: int, holder: str, batch: int,
             max_length: int) -> Reservation:
    authority = model.authority
    # the session's own bytes (its weights) stay while the generator lives: what they leave
    # of the budget is the most the cache can ever have
    view = authority.view(model.session.holder)
    charged = authority.round_up(nbytes)
    if view.fit(charged) is Fit.NEVER:
        raise CapacityUnavailable(
            f"the KV cache for batch {batch} x max_length {max_length} needs {charged} bytes "
            f"on {authority.device}, which can never fit: the budget is {authority.budget} "
            f"bytes and the session holds {view.held} of them (weights); lower max_length "
            f"or the batch, or raise memory_limit to at least {charged + view.held}",
            requested=charged, available=max(0, authority.budget - view.held), holder=holder)
    return authority.reserve(nbytes, Role.KV_CACHE, holder)


class SharedKV(KVCache):
    """Past and present in one fixed buffer per layer and key/value."""

    shared = True

    def __init__(self, model: Any, batch: int, max_length: int) -> None:
        super().__init__(model, batch, max_length)
        specs, offsets, _ = layout(self.kv_rows, *self.shape[:2], self.shape[3], self.dtype)
        try:
            if not specs:                   # no attention layer: nothing to hold
                views = []
            elif self.device == HOST:
                block = allocate_host(self.nbytes, self.reservation)
                block[:] = 0
                views = [Tensor(block[o:o + spec.nbytes].view(self.dtype).reshape(spec.shape))
                         for o, spec in zip(offsets, specs)]
            else:
                views = self._on_device(specs, offsets)
        except BaseException:
            self.close()
            raise
        self.buffers = [(views[2 * i], views[2 * i + 1]) for i in range(self.layers)]

    def _on_device(self, specs: list[TensorSpec], offsets: list[int]) -> list[Tensor]:
        rt = self.runtime or device_runtime(self.device)
        alloc = rt.allocate(self.reservation)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _free, alloc, self.reservation)
        stream = rt.new_stream()
        zeros = {r: np.zeros((*self.shape[:2], r, self.shape[3]), self.dtype)
                 for r in set(self.kv_rows)}
        views = []
        for o, spec in zip(offsets, specs):
            t = Tensor(rt.tensor(alloc, o, spec), rt.device, rt)
            rt.upload(zeros[spec.shape[2]], t.value, stream)
            views.append(t)
        rt.synchronize(stream)
        return views

    def bind(self, binding: Any) -> dict[str, Tensor]:
        bound = {}
        for (past, present), pair in zip(self.names, self.buffers):
            for name_in, name_out, t in zip(past, present, pair):
                binding.bind_input(name_in, t)
                binding.bind_output(name_out, t)
                bound[name_in] = t
        return bound


class GrowingKV(KVCache):
    """Presents fed back as pasts; empty (``total`` 0) before the first step."""

    def __init__(self, model: Any, batch: int, max_length: int) -> None:
        if model.config.decoder.window_size > 0:
            raise ModelError("genai_config.json's sliding_window layers keep a window-sized "
                             "cache of fixed capacity: set past_present_share_buffer true")
        super().__init__(model, batch, max_length)
        self.reset()

    def reset(self) -> None:
        """Empty pasts, as before the first step."""
        empty = Tensor(np.zeros((*self.shape[:2], 0, self.shape[3]), self.dtype))
        self.pasts: dict[str, Tensor] = {n: empty for past, _ in self.names for n in past}

    def bind(self, binding: Any) -> dict[str, Tensor]:
        for past, present in self.names:
            for name_in, name_out in zip(past, present):
                binding.bind_input(name_in, self.pasts[name_in])
                binding.bind_output(name_out, self.device)
        return dict(self.pasts)

    def update(self, outputs: dict[str, Tensor]) -> None:
        for past, present in self.names:
            for name_in, name_out in zip(past, present):
                self.pasts[name_in] = outputs[name_out]


class ConvStates:
    """The convolution layers' states (LFM2): zeros before the first step, then each step's
    presents, which the next step reads as its pasts (kept where the session wrote them, on
    its device). A few kilobytes a layer: they are the session's outputs, not part of the
    KV reservation."""

    def __init__(self, model: Any, batch: int) -> None:
        dec = model.config.decoder
        self.names = [dec.conv_names(i) for i in dec.conv_layers]
        # [batch, channels, length], the last two known (Model checked them at load)
        self.shapes = {past: (batch, *model.input_shape(past)[1:]) for past, _ in self.names}
        self.dtypes = {past: model.input_dtype(past) for past, _ in self.names}
        self.device = model.device
        self.reset()

    def reset(self) -> None:
        """Zero states, as before the first step."""
        self.pasts: dict[str, Tensor] = {
            past: Tensor(np.zeros(self.shapes[past], self.dtypes[past]))
            for past, _ in self.names}

    def bind(self, binding: Any) -> dict[str, Tensor]:
        for past, present in self.names:
            binding.bind_input(past, self.pasts[past])
            binding.bind_output(present, self.device)
        return dict(self.pasts)

    def update(self, outputs: dict[str, Tensor]) -> None:
        for past, present in self.names:
            self.pasts[past] = outputs[present]


def _free(alloc: Any, reservation: Reservation) -> None:
    alloc.free()
    reservation.release()
