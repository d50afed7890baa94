"""Free dimension overrides: fix a model's symbolic dims to sizes when it is loaded.

``SessionOptions(free_dimension_overrides={"batch": 1})`` is onnxruntime's
``add_free_dimension_override_by_name`` (and ``_by_denotation``: a key also matches a dim's
denotation, such as ``DATA_BATCH``). The dims are fixed in the declared types of the main
graph's inputs, outputs and value_info before the graph is built, so shape inference, the
static plan made at load and ``get_inputs()`` all see the sizes; a feed of another size is
then refused like any feed that contradicts a fixed dim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx


def fix_free_dimensions(model: onnx.ModelProto, overrides: Iterable[tuple[str, int]] |
                        Mapping[str, int], *, copy: bool = True) -> onnx.ModelProto:
    """``model`` with every symbolic dim named (or denoted) by a key of ``overrides`` fixed.

    :param copy: leave ``model`` untouched and change a copy (when ``model`` is the caller's
        ModelProto); ``False`` changes ``model`` itself (one the session loaded itself).
    :returns: ``model`` itself when no dim matches.
    """
    sizes = dict(overrides.items() if isinstance(overrides, Mapping) else overrides)
    if not sizes:
        return model
    graph = model.graph
    declared = [*graph.input, *graph.output, *graph.value_info]
    if not any(_matches(d, sizes) is not None for vi in declared for d in _dims(vi)):
        return model
    if copy:
        fixed = onnx.ModelProto()
        fixed.CopyFrom(model)
        return fix_free_dimensions(fixed, sizes, copy=False)
    for vi in declared:
        for dim in _dims(vi):
            size = _matches(dim, sizes)
            if size is not None:
                denotation = dim.denotation
                dim.Clear()
                dim.dim_value = size
                if denotation:
                    dim.denotation = denotation
    return model


def _dims(vi: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension]:
    tp = vi.type
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return []
    return list(tp.tensor_type.shape.dim)


def _matches(dim: onnx.TensorShapeProto.Dimension, sizes: Mapping[str, int]) -> int | None:
    if dim.HasField("dim_value"):
        return None         # a fixed dim stays what the model says
    if dim.dim_param and dim.dim_param in sizes:
        return sizes[dim.dim_param]
    return sizes.get(dim.denotation) if dim.denotation else None
