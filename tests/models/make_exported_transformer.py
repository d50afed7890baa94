#!/usr/bin/env python3
"""Regenerate ``exported_transformer.onnx``, a real exporter's model for the outside-oracle test.

A small randomly initialised PyTorch transformer (token embedding, learned
positions, ``nn.TransformerEncoder`` with 2 layers, d_model 64, 4 heads, FFN 128,
GELU, batch_first, final LayerNorm, a linear head to 100 classes), in eval mode,
exported with ``torch.onnx.export`` (the TorchScript exporter, ``dynamo=False``)
at opset 17, IR version 8. Input ``input_ids`` int64 [batch, 16] (batch is
dynamic; the exporter bakes the sequence length into the attention Reshapes),
output ``logits`` float32 [batch, 16, 100]. The graph is whatever the exporter writes
(the point is to run onnx-ep on ops and patterns nobody here chose); the test
then compares it with onnxruntime CPU.

torch is NOT a dependency of onnx-ep or of its tests: only this script needs it
(``pip install torch``; it was made with torch 2.13.0+cpu). The committed .onnx
file is what the tests read.

Usage::

    python tests/models/make_exported_transformer.py [--out tests/models/exported_transformer.onnx]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import onnx

HERE = pathlib.Path(__file__).resolve().parent
#: onnxruntime >= 1.20 (the tests' floor) reads opset 21 and IR version 10
OPSET = 17
MAX_IR_VERSION = 10
VOCAB, SEQ, D_MODEL, HEADS, FFN, LAYERS, CLASSES = 1000, 16, 64, 4, 128, 2, 100


def build_module():  # -> torch.nn.Module; torch is imported lazily
    import torch
    from torch import nn

    class TinyEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, D_MODEL)
            self.pos = nn.Parameter(torch.randn(1, SEQ, D_MODEL) * 0.1)
            layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=FFN,
                                               dropout=0.0, activation="gelu",
                                               batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, num_layers=LAYERS,
                                                 enable_nested_tensor=False)
            self.norm = nn.LayerNorm(D_MODEL)
            self.head = nn.Linear(D_MODEL, CLASSES)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            x = self.embed(input_ids) + self.pos[:, : input_ids.shape[1]]
            return self.head(self.norm(self.encoder(x)))

    torch.manual_seed(0)
    return TinyEncoder().eval()


def export(out: pathlib.Path) -> onnx.ModelProto:
    import torch

    module = build_module()
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    # eval + no_grad would take nn.TransformerEncoderLayer's fused fast path
    # (aten::_transformer_encoder_layer_fwd), which the exporter cannot write
    torch.backends.mha.set_fastpath_enabled(False)
    with torch.no_grad():
        torch.onnx.export(module, (ids,), str(out), input_names=["input_ids"],
                          output_names=["logits"], opset_version=OPSET, dynamo=False,
                          # only batch: the exporter bakes seq into the attention Reshapes
                          dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch"}})
    model = onnx.load(str(out))
    if model.ir_version > MAX_IR_VERSION:
        model.ir_version = MAX_IR_VERSION
        onnx.save(model, str(out))
    onnx.checker.check_model(model)
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "exported_transformer.onnx")
    args = ap.parse_args(argv)
    model = export(args.out)
    ops = sorted({n.op_type for n in model.graph.node})
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes): IR {model.ir_version}, "
          f"opset {model.opset_import[0].version}, {len(model.graph.node)} nodes, ops: "
          f"{', '.join(ops)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
