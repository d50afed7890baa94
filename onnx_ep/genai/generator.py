"""``GeneratorParams`` and ``Generator``: onnxruntime-genai's generation loop on a Session.

The loop has onnxruntime-genai's shape and rules (docs/GENAI.md)::

    params = GeneratorParams(model); params.set_search_options(max_length=64)
    gen = Generator(model, params)           # the KV cache is reserved here
    gen.append_tokens(prompt_ids)            # prefill: runs the model on the prompt
    while not gen.is_done():
        gen.generate_next_token()            # runs the model on the last token, picks one
        print(gen.get_next_tokens())

- **Padding.** A batch is a 2-D array padded with ``pad_token_id`` (left or right), or a
  list of ragged prompts (left-padded here). ``attention_mask`` is 0 on pads and 1 on
  tokens; ``position_ids`` count each row's tokens (pads get 0), and decode steps go on
  from each row's count, so a row's tokens see what they would see alone.
- **Logits.** After a prompt, each row's next token comes from its last real token. The
  logits stay where the model computed them (the device); a greedy step reads the ids of
  the model's added ArgMax output (``Model.greedy_output``), and the logits are downloaded
  only for sampling, ``min_length``'s EOS mask or :meth:`Generator.get_logits`.
- **Stop.** A row is done at one of ``eos_token_id``; afterwards it gets ``pad_token_id``.
  Everything stops at ``max_length`` (prompt included). As in onnxruntime-genai, the step
  that ends the last row at an EOS is not appended to the sequences: ``get_next_tokens``
  returns it, ``get_sequence`` ends before it.
- **One step in flight.** On a device, a greedy decode step whose token is the model's
  argmax (no sampling, no ``min_length`` mask, no row done, room for another token) queues
  the next step before it waits for its own ids: the next step's ``input_ids`` are the ids
  output of this one, on the device, so the host's work on a token overlaps the device's
  work on the next. The queued step ran on exactly the token this one then chooses; if
  that token is the EOS that ends the generation, the queued step is dropped.
- **Feeds.** ``seqlens_k`` (int32 ``[batch]``, each row's tokens - 1) and
  ``total_sequence_length`` (int32 scalar) are computed per step when the graph has them
  as inputs. With a shared KV buffer the decode steps' ``attention_mask`` is
  ``[batch, max_length]`` (zeros after the current length), as onnxruntime-genai lays it
  out for graph capture, so every decode step has the same shape signature.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.device_io import readback, synchronize
from onnx_ep.core.options import RunOptions
from onnx_ep.core.tensor import Tensor
from onnx_ep.errors import FeedError, ModelError
from onnx_ep.genai import search as srch
from onnx_ep.genai.config import SearchOptions
from onnx_ep.genai.kv_cache import ConvStates, GrowingKV, KVCache, SharedKV
from onnx_ep.genai.stats import GenerationStats, OpenStep


class GeneratorParams:
    """Search options for one :class:`Generator`, starting from the config's ``search``."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.search: SearchOptions = model.config.search

    def set_search_options(self, **options: Any) -> None:
        """``max_length``, ``min_length``, ``do_sample``, ``temperature``, ``top_k``,
        ``top_p``, ``random_seed``, ``batch_size``, ``past_present_share_buffer``,
        ``num_beams`` (1 only). :raises ModelError: a value onnx-ep cannot search with."""
        if "seed" in options:
            options["random_seed"] = options.pop("seed")
        self.search = self.search.evolve(**options)


def as_batch(tokens: Any, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids as ``[batch, length]`` int64 and their mask (1: a token, 0: padding).

    A 1-D sequence is one row; a 2-D array keeps its padding (mask 0 where the id is
    ``pad``, onnxruntime-genai's rule); a list of ragged lists is left-padded.
    """
    if isinstance(tokens, np.ndarray) or (tokens and not isinstance(tokens[0], (list, tuple,
                                                                               np.ndarray))):
        arr = np.asarray(tokens, dtype=np.int64)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] == 0:
            raise FeedError(f"tokens must be 1-D or 2-D [batch, length] ids, got shape "
                            f"{list(arr.shape)}")
        return arr, (arr != pad).astype(np.int64)
    rows = [np.asarray(r, dtype=np.int64).reshape(-1) for r in tokens]
    width = max((r.size for r in rows), default=0)
    if width == 0:
        raise FeedError("no tokens to append")
    arr = np.full((len(rows), width), pad, np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for b, r in enumerate(rows):
        arr[b, width - r.size:] = r
        mask[b, width - r.size:] = 1
    return arr, mask


@attrs.define
class _Queued:
    """A model run queued on the session and not yet collected."""

    start: int                          #: the columns it runs on
    end: int
    outs: dict[str, Any]                #: its outputs by name (device Tensors until read)
    wait: Callable[[], np.ndarray]      #: waits for the run; its ids (or logits) on the host
    ids: Any                            #: its ids output on the device (a decode step)
    step: OpenStep
    conv: dict[str, Any] | None = None  #: the convolution states it read (its pasts)


class Generator:
    """One generation: its sequences, its KV cache and its per-step statistics.

    :raises CapacityUnavailable: the KV cache for ``batch_size`` x ``max_length`` can never
        fit the session's budget (raised here, before any step).
    """

    def __init__(self, model: Any, params: GeneratorParams) -> None:
        self.model = model
        cfg = model.config
        s = params.search
        self.search = s
        self.max_length = s.max_length or cfg.context_length
        if not self.max_length:
            raise ModelError("max_length is 0 and genai_config.json has no context_length: "
                             "set_search_options(max_length=...)")
        if cfg.context_length and self.max_length > cfg.context_length:
            raise ModelError(f"max_length {self.max_length} exceeds the model's "
                             f"context_length {cfg.context_length}")
        self.batch = s.batch_size
        self.pad = cfg.pad_token_id
        self.eos = np.array(cfg.eos_token_ids or (-1,), np.int64)
        self.rng = np.random.default_rng(None if s.random_seed < 0 else s.random_seed)
        kind = SharedKV if s.past_present_share_buffer else GrowingKV
        self.kv: KVCache = kind(model, self.batch, self.max_length)
        #: convolution layers' states (LFM2), fed back from each run to the next
        self.conv = ConvStates(model, self.batch) if cfg.decoder.conv_layers else None
        self.stats = GenerationStats(model.session)
        self.sequences = np.full((self.batch, self.max_length), self.pad, np.int64)
        self.mask = np.zeros((self.batch, self.max_length), np.int64)
        self.length = 0                                   #: padded length (columns used)
        self.fed = 0                                      #: columns the model has seen
        self.counts = np.zeros(self.batch, np.int64)      #: each row's real tokens
        self.done = np.zeros(self.batch, bool)
        self._next = np.zeros(self.batch, np.int64)
        self._ready = False                 # the model has run on every column
        self._raw_logits: Any = None        # the last run's logits output (maybe on device)
        self._rows: Any = None              # each row's index into it (None: the last)
        self._host_logits: np.ndarray | None = None
        self._greedy: np.ndarray | None = None              # [batch] from the model's ArgMax
        self._logits_target: Any = None     # a device tensor decode steps' logits go to
        self._device = model.device         # "cpu", or the device the session runs on
        self._binding: Any = None
        self._kv_signature = ""
        #: queue a greedy decode step before waiting for the previous one (module doc);
        #: False waits for each step first (to compare, or to debug)
        self.queue_ahead = True
        self._queued: list[_Queued] = []     # runs queued, oldest first (two at most)
        self._ids_targets: list[Tensor] = []  # decode steps' ids, alternately
        self._decode_runs = 0
        # a device run returns once queued; the generator waits for what it reads
        self._options = RunOptions(synchronize=False) if self._device != "cpu" else None
        self._drain = weakref.finalize(self, synchronize, model.session)

    # ------------------------------------------------------------ onnxruntime-genai's API
    def append_tokens(self, tokens: Any) -> None:
        """Add prompt tokens and run the model on them (prefill). Batch 1 may append again
        later (continuous decoding); a batch appends once, before generating.

        :raises FeedError: wrong batch, or more tokens than ``max_length``.
        """
        arr, mask = as_batch(tokens, self.pad)
        if arr.shape[0] != self.batch:
            raise FeedError(f"append_tokens got {arr.shape[0]} rows but the generator's "
                            f"batch_size is {self.batch} (set_search_options(batch_size=))")
        if self.length and self.batch > 1:
            raise FeedError("a batch appends its prompts once, before generating; only "
                            "batch 1 appends again (continuous decoding)")
        if self.length + arr.shape[1] > self.max_length:
            raise FeedError(f"{self.length} tokens so far + {arr.shape[1]} appended exceed "
                            f"max_length {self.max_length}")
        while self._queued:               # a step queued on the last token: it stands
            self._collect()
        end = self.length + arr.shape[1]
        self.sequences[:, self.length:end] = arr
        self.mask[:, self.length:end] = mask
        self.length = end
        self.done[:] = False
        self._run()

    def generate_next_token(self) -> None:
        """Run the model on the last generated token (when it has not seen it) and choose
        the next token of every row.

        :raises FeedError: no prompt appended yet, or the generator is done.
        """
        if self.length == 0:
            raise FeedError("append_tokens(prompt) before generate_next_token()")
        if self.is_done():
            raise FeedError("the generator is done (EOS in every row, or max_length)")
        if not self._ready:
            if not self._queued:
                self._launch(self.fed, self.length)
            ids = self._ahead()
            if ids is not None:       # queue the next step before waiting for this one
                self.mask[:, self.length] = 1
                self._launch(self.length, self.length + 1, ids)
            self._collect()
        s = self.search
        masked = self.length < s.min_length
        if not s.do_sample and not masked and self._greedy is not None:
            nxt = self._greedy
        else:
            logits = self.logits
            assert logits is not None
            if masked:
                logits = logits.copy()
                logits[:, self.eos[self.eos >= 0]] = -np.inf
            if s.do_sample:
                nxt = srch.sample(logits, self.rng, temperature=s.temperature, top_k=s.top_k,
                                  top_p=s.top_p)
            else:
                nxt = srch.greedy(logits)
        nxt = np.where(self.done, self.pad, nxt)
        self._next = nxt
        self._ready = False
        self._raw_logits = self._host_logits = self._greedy = None
        done = self.done | np.isin(nxt, self.eos)
        if done.all():
            # onnxruntime-genai's rule: the step that ends the last row at an EOS is not
            # appended to the sequences (get_next_tokens still returns it), and the model
            # never takes it: a later append_tokens goes on from the token before
            self.done = done
            self._drop_ahead()
            return
        self.sequences[:, self.length] = nxt
        self.mask[:, self.length] = 1
        self.length += 1
        self.done = done

    def get_next_tokens(self) -> np.ndarray:
        """The token each row got from the last :meth:`generate_next_token` (``[batch]``)."""
        return self._next.copy()

    def get_sequence(self, index: int) -> np.ndarray:
        """Row ``index``: prompt (with its padding) and generated tokens so far."""
        return self.sequences[index, :self.length].copy()

    def get_logits(self) -> np.ndarray | None:
        """The logits the next token will be chosen from (``[batch, vocab]``), if computed."""
        logits = self.logits
        return None if logits is None else logits.copy()

    @property
    def logits(self) -> np.ndarray | None:
        """``[batch, vocab]`` float32 logits of each row's last token, once the model has
        run and until a token is chosen (downloaded from the device on first use)."""
        if self._host_logits is None and self._raw_logits is not None:
            raw = self._raw_logits
            raw = raw.numpy() if hasattr(raw, "numpy") else np.asarray(raw)
            if self._rows is not None:
                raw = raw[np.arange(self.batch), self._rows]
            elif raw.ndim == 3:
                raw = raw[:, -1]
            self._host_logits = np.asarray(raw, np.float32)
        return self._host_logits

    def is_done(self) -> bool:
        return bool(self.done.all()) or self.length >= self.max_length

    def token_count(self) -> int:
        """Tokens in each row's sequence so far (prompt and padding included)."""
        return self.length

    def rewind_to(self, length: int) -> None:
        """Forget the tokens after the first ``length`` (batch 1, as onnxruntime-genai):
        ``append_tokens`` or ``generate_next_token`` then go on from there. The model runs
        again on the last kept token (a shared cache keeps the rest; a growing one is run
        from the start); 0 starts over.

        :raises FeedError: a batch, a ``length`` beyond the sequence, or a window-sized
            cache that no longer holds the positions the rewind would keep.
        """
        if self.batch != 1:
            raise FeedError(f"rewind_to takes batch 1, the generator has {self.batch} rows")
        if not 0 <= length <= self.length:
            raise FeedError(f"rewind_to({length}): the sequence has {self.length} tokens")
        dec = self.model.config.decoder
        window_rows = [self.kv.rows[i] for i in dec.window_layers]
        if length and window_rows and self.length > min(window_rows):
            raise FeedError(f"cannot rewind to {length}: a window-sized cache of "
                            f"{min(window_rows)} rows holds only the last positions of "
                            f"{self.length}; raise sliding_window.cache_slack")
        while self._queued:
            self._collect()
        self.sequences[:, length:] = self.pad
        self.mask[:, length:] = 0
        self.length = length
        self.counts = self.mask[:, :max(length - 1, 0)].sum(axis=1)
        self.fed = max(length - 1, 0)
        if not self.kv.shared or self.conv is not None:
            # growing pasts hold every fed column, a convolution state the last ones: run
            # the kept columns again from the start
            self.kv.reset()
            if self.conv is not None:
                self.conv.reset()
            self.fed, self.counts[:] = 0, 0
        self.done[:] = False
        self._ready = False
        self._raw_logits = self._host_logits = self._greedy = None
        self._next = np.zeros(self.batch, np.int64)

    def close(self) -> None:
        """Wait for queued runs, then release the KV cache's bytes (also done when the
        generator is collected)."""
        self._queued.clear()
        self._drain()
        self.kv.close()

    # ------------------------------------------------------------ one model run
    def feeds(self, start: int, end: int) -> dict[str, np.ndarray]:
        """The non-KV inputs of a run over columns ``start:end`` (what the model reads)."""
        m, dec = self.model, self.model.config.decoder
        ids = self.sequences[:, start:end]
        chunk = self.mask[:, start:end]
        out = {dec.input_ids: ids.astype(m.input_dtype(dec.input_ids))}
        if m.has_input(dec.attention_mask):
            decode = self.kv.shared and start > 0 and end - start == 1
            mask = self.mask if decode else self.mask[:, :end]
            out[dec.attention_mask] = mask.astype(m.input_dtype(dec.attention_mask))
        if m.has_input(dec.position_ids):
            pos = np.where(chunk == 1, self.counts[:, None] + np.cumsum(chunk, axis=1) - 1, 0)
            out[dec.position_ids] = pos.astype(m.input_dtype(dec.position_ids))
        if m.has_input(dec.seqlens_k):
            seqlens = self.mask[:, :end].sum(axis=1) - 1
            out[dec.seqlens_k] = seqlens.astype(m.input_dtype(dec.seqlens_k))
        if m.has_input(dec.total_sequence_length):
            out[dec.total_sequence_length] = np.array(
                end, m.input_dtype(dec.total_sequence_length))
        return out

    def _run(self) -> None:
        """Run the model on the columns it has not seen and wait for it."""
        self._launch(self.fed, self.length)
        self._collect()

    def _launch(self, start: int, end: int, ids: Any = None) -> None:
        """Queue a run over columns ``start:end`` (``ids``: its input_ids, on the device)."""
        session = self.model.session
        binding = self._binding
        if binding is None or not self.kv.shared:
            # a shared cache is bound once: its buffers never move, and rebinding ~100
            # tensors per token would cost more host time than a captured step's launch
            if binding is None:
                binding = self._binding = session.io_binding()
            self._kv_signature = _signature(self.kv.bind(binding))
        conv = self.conv.bind(binding) if self.conv is not None else None
        columns = end - start
        self._bind_logits(binding, columns)
        greedy = self.model.greedy_output
        if greedy is not None:
            binding.bind_output(greedy, self._ids_target(columns))
        bound: dict[str, Any] = self.feeds(start, end)
        if ids is not None:
            bound[self.model.config.decoder.input_ids] = ids
        for name, value in bound.items():
            binding.bind_input(name, value)
        step = self.stats.begin("prefill" if start == 0 or columns > 1 else "decode",
                                tokens=int(self.mask[:, start:end].sum()),
                                signature=f"{_signature(bound)}, {self._kv_signature}",
                                ahead=ids is not None)
        session.run_with_iobinding(binding, self._options)
        self.stats.queued(step)
        outs = dict(zip([n for n, _ in binding.output_requests()], binding.get_outputs()))
        if self.conv is not None:     # the next run (perhaps queued before this one is
            self.conv.update(outs)    # collected) reads this one's states
        read = outs[greedy] if greedy is not None else outs[self.model.config.decoder.logits]
        decode_ids = outs[greedy] if greedy is not None and columns == 1 else None
        self._queued.append(_Queued(start, end, outs, readback(session, read), decode_ids,
                                    step, conv))
        if columns == 1:
            if decode_ids is not None and self._device != "cpu" and not self._ids_targets:
                self._ids_targets = [decode_ids, Tensor.empty(
                    decode_ids.shape, decode_ids.dtype, decode_ids.device,
                    runtime=getattr(decode_ids, "_runtime", None))]
            self._decode_runs += 1
        self.counts += self.mask[:, start:end].sum(axis=1)
        self.fed = end

    def _collect(self) -> None:
        """Wait for the oldest queued run; its logits (and ids) become the current ones."""
        q = self._queued.pop(0)
        host = q.wait()
        self.stats.end(q.step)
        self.kv.update(q.outs)
        raw = q.outs[self.model.config.decoder.logits]
        start, end = q.start, q.end
        chunk = self.mask[:, start:end]
        self._rows = None
        if len(raw.shape) == 3 and raw.shape[1] == end - start and end - start > 1:
            # each row's last real token in the chunk (right padding ends in pads)
            self._rows = (end - start - 1) - np.argmax(chunk[:, ::-1], axis=1)
        self._raw_logits, self._host_logits, self._greedy = raw, None, None
        if self.model.greedy_output is not None:
            ids = np.asarray(host, np.int64)
            if ids.ndim == 2:
                ids = ids[np.arange(self.batch), self._rows] if self._rows is not None \
                    else ids[:, -1]
            self._greedy = ids.reshape(self.batch)
        if self._device == "cpu":
            _ = self.logits               # on the host already: no reason to wait
        elif end - start == 1 and self._logits_target is None:
            self._logits_target = raw
        self._ready = True

    def _drop_ahead(self) -> None:
        """Forget a step queued on a token that is not appended: it ran, and its writes to
        the shared KV buffer's column are overwritten by whatever is appended there next,
        but the model has not seen that column."""
        while self._queued and self._queued[-1].start >= self.length:
            q = self._queued.pop()
            self.counts -= self.mask[:, q.start:q.end].sum(axis=1)
            self.mask[:, q.start:q.end] = 0
            self.fed = q.start
            if self.conv is not None and q.conv is not None:
                self.conv.pasts = dict(q.conv)      # the states before it ran

    def _ahead(self) -> Any:
        """The queued decode step's ids on the device when the next step may be queued
        before they are read: the token they give is the one chosen (greedy, no
        ``min_length`` mask, no row done) and another token can follow."""
        if (not self.queue_ahead or len(self._queued) != 1 or self._queued[0].ids is None
                or not self.kv.shared or self._device == "cpu"):  # a host run ends at return
            return None
        s, ids = self.search, self._queued[0].ids
        if s.do_sample or self.length < s.min_length or self.done.any() \
                or self.length + 1 >= self.max_length:
            return None
        dec = self.model.config.decoder
        if tuple(ids.shape) != (self.batch, 1) or ids.dtype != self.model.input_dtype(
                dec.input_ids):
            return None
        return ids

    def _ids_target(self, columns: int) -> Any:
        """Where a run's ids go: the host for a host session; on the device, one of two
        tensors kept for decode steps (a queued step never writes the ids being read)."""
        if self._device == "cpu":
            return "cpu"
        if columns != 1 or not self._ids_targets:
            return self._device
        return self._ids_targets[self._decode_runs % 2]

    def _bind_logits(self, binding: Any, columns: int) -> None:
        """Logits stay on the session's device; a decode step's go to one tensor kept for
        them (no new block per token)."""
        name = self.model.config.decoder.logits
        target = self._logits_target
        if columns == 1 and target is not None:
            binding.bind_output(name, target)
        else:
            binding.bind_output(name, self._device)


def _signature(bound: dict[str, Any]) -> str:
    """Input names, dtypes and shapes of a run, as one string."""
    return _signature_text(tuple((n, v.dtype, tuple(v.shape)) for n, v in bound.items()))


@functools.lru_cache(maxsize=64)
def _signature_text(key: tuple[tuple[str, Any, tuple[int, ...]], ...]) -> str:
    # formatting dtypes costs more than hashing them, and decode steps repeat one key
    return ", ".join(f"{n}:{np.dtype(dt)}{list(shape)}" for n, dt, shape in key)
