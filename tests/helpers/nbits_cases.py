"""Random com.microsoft::MatMulNBits and GatherBlockQuantized nodes for the CUDA tests (host
and GPU): quantized weights whose products are of unit scale (what the CUDA promise is
stated for), packed as onnxruntime lays them out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_ep.core.dtypes import onnx_elem_type
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET

MS = "com.microsoft"
I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes ``[..., L]`` packed ``8 / bits`` per byte along the last axis, low bits first."""
    per = 8 // bits
    pad = (-codes.shape[-1]) % per
    c = np.concatenate([codes, np.zeros(codes.shape[:-1] + (pad,), codes.dtype)], -1)
    c = c.astype(np.uint8).reshape(c.shape[:-1] + (-1, per))
    out = np.zeros(c.shape[:-1], np.uint8)
    for i in range(per):
        out |= (c[..., i] << (i * bits)).astype(np.uint8)
    return out


def one_node(op: str, inputs: Sequence[tuple[str, np.ndarray | None]], feeds: Sequence[str],
             **attrs: Any) -> onnx.ModelProto:
    """One com.microsoft node; inputs not in ``feeds`` are initializers, ``None`` missing."""
    node = helper.make_node(op, [n if v is not None else "" for n, v in inputs], ["y"],
                            domain=MS, name=op.lower(), **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, onnx_elem_type(v.dtype), v.shape)
         for n, v in inputs if v is not None and n in feeds],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[numpy_helper.from_array(v, n) for n, v in inputs
                     if v is not None and n not in feeds])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", ORACLE_OPSET),
                                            helper.make_opsetid(MS, 1)])


class NBitsCase:
    """A random MatMulNBits node: A fed, B, scales, zero points and bias initializers.

    Codes are uniform, scales uniform in ``[0.01, 0.41] * 2^(3 - bits) / sqrt(K)``: outputs
    of about unit scale. ``zp``: ``None``, ``"packed"`` (uint8) or ``"typed"`` (A's dtype,
    fractional).
    """

    def __init__(self, *, k: int, n: int, block: int, bits: int = 4,
                 a_shape: Sequence[int] | None = None, dtype: Any = np.float32,
                 zp: str | None = None, bias: bool = False, flat: bool = False,
                 level: int = 0, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        dtype = np.dtype(dtype)
        nb = -(-k // block)
        codes = rng.integers(0, 1 << bits, (n, nb * block))
        self.b = pack(codes.reshape(n, nb, block), bits)
        unit = 2.0 ** (3 - bits) / np.sqrt(k)
        self.scales = ((rng.random((n, nb)) * 0.4 + 0.01) * unit).astype(dtype)
        self.a = rng.standard_normal(tuple(a_shape or (1, k))).astype(dtype)
        self.zp = None
        if zp == "packed":
            self.zp = pack(rng.integers(0, 1 << bits, (n, nb)), bits)
        elif zp == "typed":
            self.zp = (rng.random((n, nb)) * (1 << bits)).astype(dtype)
        self.bias = (rng.standard_normal(n) * 0.5).astype(dtype) if bias else None
        scales, zpi = self.scales, self.zp
        if flat:
            scales = scales.reshape(-1)
            zpi = None if zpi is None else zpi.reshape(-1)
        self.inputs = [("a", self.a), ("b", self.b), ("scales", scales), ("zp", zpi),
                       ("g_idx", None), ("bias", self.bias)]
        while self.inputs[-1][1] is None:
            self.inputs.pop()
        self.k, self.n, self.block, self.bits, self.dtype = k, n, block, bits, dtype
        self.model = one_node("MatMulNBits", self.inputs, ["a"], K=k, N=n, bits=bits,
                              block_size=block, accuracy_level=level)

    @property
    def feeds(self) -> dict[str, np.ndarray]:
        return {"a": self.a}


class GbqCase:
    """A random GatherBlockQuantized node over logical codes, indices fed.

    ``data``: ``"int4"``, ``"uint4"`` or ``"uint8"`` (``bits`` per code, packed).
    """

    def __init__(self, shape: Sequence[int], data: str, gather_axis: int, quantize_axis: int,
                 block: int, *, zp: bool = False, scale_dtype: Any = np.float32,
                 indices: np.ndarray | None = None, bits: int = 4, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        shape = tuple(shape)
        rank = len(shape)
        qa, ga = quantize_axis % rank, gather_axis % rank
        packed = data == "uint8"
        lo, hi = (0, 1 << bits) if packed else ((-8, 8) if data == "int4" else (0, 16))
        codes = rng.integers(lo, hi, shape)
        grid = shape[:qa] + (-(-shape[qa] // block),) + shape[qa + 1:]
        self.scales = (rng.random(grid) + 0.5).astype(scale_dtype)
        zq = rng.integers(lo, hi, grid) if zp else None
        if packed:
            values, zp_in = pack(codes, bits), (None if zq is None else pack(zq, bits))
        else:
            dt = I4 if data == "int4" else U4
            values, zp_in = codes.astype(dt), (None if zq is None else zq.astype(dt))
        if indices is None:
            indices = rng.integers(-shape[ga], shape[ga], (2, 3)).astype(np.int64)
        self.data, self.indices, self.zp = values, indices, zp_in
        self.model = one_node("GatherBlockQuantized",
                              [("data", values), ("indices", indices),
                               ("scales", self.scales), ("zp", zp_in)], ["indices"],
                              gather_axis=gather_axis, quantize_axis=quantize_axis,
                              block_size=block, bits=bits)

    @property
    def feeds(self) -> dict[str, np.ndarray]:
        return {"indices": self.indices}
