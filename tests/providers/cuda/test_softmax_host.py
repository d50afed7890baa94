"""Host-side logic of the CUDA softmax / normalization kernels (no GPU): row geometry per
opset, vector widths, block sizes, supports() and shape inference."""

from __future__ import annotations

import numpy as np

from onnx_ep.core.kernel import NodeMeta, TensorSpec
from onnx_ep.providers.cuda.kernels import softmax as sm


def _meta(op, inputs, opset=17, n_out=1, **attrs):
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(inputs), output_names=tuple(f"y{i}" for i in range(n_out)))


K = {k.key.op_type: k for k in sm.KERNELS}
X = TensorSpec(np.float16, (2, 3, 8))


def test_geometry_flattens_before_opset_13():
    assert sm.softmax_geometry((2, 3, 8), 1, 11) == (2, 24, 1)
    assert sm.softmax_geometry((2, 3, 8), 2, 13) == (6, 8, 1)
    assert sm.softmax_geometry((2, 3, 8), 1, 13) == (2, 3, 8)
    assert sm.softmax_geometry((2, 3, 8), 0, 11) == (1, 48, 1)


def test_vector_width_needs_row_length_and_alignment():
    assert sm.vector_width(4, 1024, (0, 256)) == 4
    assert sm.vector_width(2, 1024, (0, 256)) == 8
    assert sm.vector_width(2, 1020, (0, 256)) == 1
    assert sm.vector_width(4, 1024, (0, 8)) == 1
    assert sm.vector_width(8, 6, (0, 16)) == 2


def test_block_sizes():
    assert [sm.block_for(n) for n in (1, 33, 128, 5000)] == [32, 64, 128, 256]


def test_exp_cache_fits_the_default_shared_memory():
    from onnx_ep.providers.cuda.kernels.base import BLOCK

    assert sm.CACHE_BYTES + 8 * BLOCK <= 48 * 1024


def test_supports():
    assert K["Softmax"].supports(_meta("Softmax", [X], opset=13, axis=1))
    assert not K["Softmax"].supports(_meta("Softmax", [X], opset=13, axis=3))
    assert not K["Softmax"].supports(_meta("Softmax", [TensorSpec(np.int32, (3,))]))
    assert K["LayerNormalization"].supports(
        _meta("LayerNormalization", [X, TensorSpec(np.float16, (8,))]))
    assert not K["LayerNormalization"].supports(
        _meta("LayerNormalization", [X, TensorSpec(np.float16, (8,))], stash_type=11))
    assert not K["LayerNormalization"].supports(
        _meta("LayerNormalization", [X, TensorSpec(np.float32, (8,))]))


def test_infer_outputs():
    assert K["LogSoftmax"].infer_outputs(_meta("LogSoftmax", [X])) == [X]
    outs = K["LayerNormalization"].infer_outputs(
        _meta("LayerNormalization", [X, TensorSpec(np.float16, (3, 8))], n_out=3, axis=1))
    assert outs == [X, TensorSpec(np.float32, (2, 1, 1)), TensorSpec(np.float32, (2, 1, 1))]
    assert len(K["LayerNormalization"].infer_outputs(
        _meta("LayerNormalization", [X, TensorSpec(np.float16, (8,))]))) == 1
    x64 = TensorSpec(np.float64, (4, 5))
    assert K["LayerNormalization"].infer_outputs(
        _meta("LayerNormalization", [x64, x64], n_out=2))[1].dtype == np.float64


def test_parity_per_dtype():
    assert K["Softmax"].bind(_meta("Softmax", [TensorSpec(np.float32, (4,))])).parity == \
        sm.SOFTMAX_PARITY
    assert K["Softmax"].bind(_meta("Softmax", [X])).parity.rtol == 2.0 ** -10
    assert K["LayerNormalization"].parity == sm.NORM_PARITY
