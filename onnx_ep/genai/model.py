"""``Model(folder)``: a genai_config.json folder opened as one :class:`onnx_ep.Session`.

The session's inputs are checked against the config once, here: which of the optional
inputs the model reads (``attention_mask``, ``position_ids``, and ``seqlens_k`` /
``total_sequence_length`` when they are graph inputs rather than computed inside the
graph), their integer types, and the KV inputs and outputs of every layer with their dtype.

The session runs the folder's model with one node added: ``ArgMax`` of the logits over the
vocabulary, output :data:`GREEDY_OUTPUT`. A greedy step then downloads ``[batch]`` token ids
instead of ``[batch, vocab]`` logits, and on a device the choice is part of the captured
graph; the logits stay where they were computed until something asks for them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.graph import load_model
from onnx_ep.core.memory import DeviceMemoryAuthority, authority_for
from onnx_ep.errors import ModelError
from onnx_ep.genai.config import GenaiConfig, load_config

#: the added output: the first maximum of each logits row over the vocabulary (int64, the
#: logits' shape without its last axis)
GREEDY_OUTPUT = "onnx_ep.genai.greedy_ids"


class Model:
    """A decoder model folder (onnxruntime-genai's format) and the session that runs it.

    :param folder: a folder holding ``genai_config.json`` and the ONNX file it names.
    :param providers: onnx-ep provider names; default: the config's ``provider_options``
        (``cuda`` -> ``cuda``; none -> ``cpu_reference``).
    :param options: :class:`onnx_ep.SessionOptions` (``memory_limit``, ``capture``...).
    :param plugins: plugin objects for the session (third-party providers and kernels).
    :raises ModelError: a malformed config, or a model whose inputs and outputs do not
        match it. Session errors (``NoKernelError``, ``ProviderUnavailable``) pass through.
    """

    def __init__(self, folder: str | os.PathLike[str], providers: list[str] | None = None,
                 options: Any = None, plugins: Any = ()) -> None:
        from onnx_ep.core.session import Session

        self.folder = Path(folder)
        self.config: GenaiConfig = load_config(self.folder)
        path = self.config.model_path
        if not path.is_file():
            raise ModelError(f"{self.config.folder / 'genai_config.json'} names "
                             f"model.decoder.filename {self.config.decoder.filename!r}, "
                             f"which is not in {self.folder}")
        proto = load_model(path)
        with_greedy_output(proto, self.config.decoder.logits)
        self.session = Session(proto, providers=providers or
                               self.config.onnx_ep_providers(), options=options,
                               plugins=plugins)
        self._inputs = {v.name: v for v in self.session.graph.inputs}
        self._outputs = {v.name for v in self.session.graph.outputs}
        self._check()
        self._tokenizer: Any = None

    # ------------------------------------------------------------ what the graph reads
    def _check(self) -> None:
        dec = self.config.decoder
        missing = [n for n in (dec.input_ids,) if n not in self._inputs]
        pasts = [n for i in dec.kv_layers for n in dec.past_names(i)]
        presents = [n for i in dec.kv_layers for n in dec.present_names(i)]
        convs = [dec.conv_names(i) for i in dec.conv_layers]
        missing += [n for n in pasts + [p for p, _ in convs] if n not in self._inputs]
        missing_out = [n for n in [dec.logits] + presents + [p for _, p in convs]
                       if n not in self._outputs]
        if missing or missing_out:
            raise ModelError(
                f"{self.config.model_path} does not match genai_config.json: inputs "
                f"{missing or 'ok'}, outputs {missing_out or 'ok'} not found; the model's "
                f"inputs are {sorted(self._inputs)}")
        for past, _ in convs:
            dims = self.input_shape(past)
            if len(dims) != 3 or not all(isinstance(d, int) for d in dims[1:]):
                raise ModelError(f"{past} has shape {list(dims)}: a convolution state is "
                                 f"[batch, channels, conv_cache_size] with the last two known")
            if dec.conv_cache_size and dims[2] != dec.conv_cache_size:
                raise ModelError(f"{past} holds {dims[2]} positions but genai_config.json "
                                 f"says conv_cache_size {dec.conv_cache_size}")
        if not dec.kv_layers:
            self.kv_dtype = np.dtype(np.float32)
            return
        first = dec.past_names(dec.kv_layers[0])[0]
        self.kv_dtype = self.input_dtype(first)
        dims = self.input_shape(first)
        if len(dims) == 4:
            for axis, want, what in ((1, dec.num_key_value_heads, "num_key_value_heads"),
                                     (3, dec.head_size, "head_size")):
                if isinstance(dims[axis], int) and dims[axis] != want:
                    raise ModelError(f"{first} has {dims[axis]} on axis "
                                     f"{axis} but genai_config.json says {what} {want}")

    @property
    def greedy_output(self) -> str | None:
        """The added ArgMax output's name, or None when the model could not take one."""
        return GREEDY_OUTPUT if GREEDY_OUTPUT in self._outputs else None

    def has_input(self, name: str) -> bool:
        return name in self._inputs

    def input_dtype(self, name: str) -> np.dtype:
        v = self._inputs[name]
        return np_dtype(v.elem_type) if v.elem_type else np.dtype(np.float32)

    def input_shape(self, name: str) -> tuple[Any, ...]:
        """The input's dims as the graph declares them (ints, names or None; () unknown)."""
        spec = self._inputs[name].spec
        return tuple(spec.shape) if spec is not None else ()

    # ------------------------------------------------------------ resources
    @property
    def device(self) -> str:
        """Where the session's memory authority is: ``"cpu"``, or ``"cuda:0"`` when the
        session runs on a device (its KV cache lives there too)."""
        return str(self.session.resources()["device"])

    @property
    def runtime(self) -> Any:
        """The device runtime the session runs on (None on the host): the KV cache and the
        generator's device tensors are made with it, so a plugin's device works too."""
        device = self.session._device
        return device.runtime if device is not None else None

    @property
    def authority(self) -> DeviceMemoryAuthority:
        """The session's memory authority (the same quota: device and ``memory_limit``); the
        KV cache is reserved here under role ``kv_cache``."""
        return authority_for(self.device, self.session.options.memory_limit)

    @property
    def has_tokenizer(self) -> bool:
        """Whether the folder has tokenizer.json (text in and out)."""
        from onnx_ep.genai.tokenizer import has_tokenizer

        return has_tokenizer(self.folder)

    @property
    def tokenizer(self) -> Any:
        """The folder's :class:`~onnx_ep.genai.tokenizer.Tokenizer` (made on first use)."""
        if self._tokenizer is None:
            from onnx_ep.genai.tokenizer import Tokenizer

            self._tokenizer = Tokenizer(self)
        return self._tokenizer

    def close(self) -> None:
        self.session.close()

    def __repr__(self) -> str:
        d = self.config.decoder
        return (f"onnx_ep.genai.Model({str(self.folder)!r}, {d.num_hidden_layers} layers, "
                f"{d.num_attention_heads}/{d.num_key_value_heads} heads, providers "
                f"{self.session.get_providers()})")


def with_greedy_output(proto: onnx.ModelProto, logits: str) -> None:
    """Add ``ArgMax(logits, axis=-1, keepdims=0)`` as output :data:`GREEDY_OUTPUT` (in
    place). Nothing is added when the graph has no such output, already uses the name, or
    imports an opset before 11 (no negative axis)."""
    g = proto.graph
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                default=0)
    outputs = {o.name for o in g.output}
    taken = outputs | {i.name for i in g.input} | {t.name for t in g.initializer} | {
        n for node in g.node for n in node.output}
    if opset < 11 or logits not in outputs or GREEDY_OUTPUT in taken:   # axis -1: opset 11
        return
    g.node.append(onnx.helper.make_node("ArgMax", [logits], [GREEDY_OUTPUT], axis=-1,
                                        keepdims=0, name=GREEDY_OUTPUT))
    t = next(o for o in g.output if o.name == logits).type.tensor_type
    dims = [d.dim_param or (d.dim_value if d.HasField("dim_value") else None)
            for d in t.shape.dim][:-1] if t.HasField("shape") and t.shape.dim else None
    g.output.append(onnx.helper.make_tensor_value_info(GREEDY_OUTPUT, onnx.TensorProto.INT64,
                                                       dims))
