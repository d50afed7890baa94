"""``onnx.backend.base.Backend`` for onnx-ep, so onnx's own node test suite runs against us.

Device ``"CPU"`` runs on ``cpu_reference``; device ``"CUDA"`` on ``cuda`` with
``cpu_reference`` as the fallback. See ``onnx_ep.testing.node_suite`` for the
runner that reports pass counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from onnx_ep.core.session import Session

DEVICE_PROVIDERS = {"CPU": ["cpu_reference"], "CUDA": ["cuda", "cpu_reference"]}


def _device_name(device: str) -> str:
    dev = Device(device)
    return "CUDA" if dev.type == DeviceType.CUDA else "CPU"


class OnnxEpRep(BackendRep):
    """A prepared model: a :class:`Session` plus positional input binding."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._input_names = [i.name for i in session.get_inputs()]
        self._output_names = [o.name for o in session.get_outputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(self._input_names, inputs))
        outputs = self.session.run(None, feeds)
        return namedtupledict("Outputs", self._output_names)(*outputs)


class OnnxEpBackend(Backend):
    """onnx's backend interface over :class:`onnx_ep.Session`."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return True

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU",
                **kwargs: Any) -> OnnxEpRep:
        super().prepare(model, device, **kwargs)
        providers = kwargs.pop("providers", None) or DEVICE_PROVIDERS[_device_name(device)]
        return OnnxEpRep(Session(model, providers=providers))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, Any]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """Run a single node: wrap it in a one-node model with the default opset."""
        super().run_node(node, inputs, device=device, outputs_info=outputs_info)
        arrays = [np.asarray(x) for x in inputs]
        graph_inputs = [
            onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for name, a in zip(node.input, arrays) if name]
        graph = onnx.helper.make_graph(
            [node], "run_node", graph_inputs,
            [onnx.helper.make_empty_tensor_value_info(o) for o in node.output if o])
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        imports = [onnx.helper.make_opsetid("", opset)]
        if node.domain not in ("", "ai.onnx"):
            imports.append(onnx.helper.make_opsetid(node.domain, 1))
        model = onnx.helper.make_model(graph, opset_imports=imports)
        feeds = [a for name, a in zip(node.input, arrays) if name]
        return cls.run_model(model, feeds, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        name = _device_name(device)
        if name == "CPU":
            return True
        from onnx_ep import available_providers

        return "cuda" in available_providers()


prepare = OnnxEpBackend.prepare
run_model = OnnxEpBackend.run_model
run_node = OnnxEpBackend.run_node
supports_device = OnnxEpBackend.supports_device
