"""Testing tools: the onnx node-suite runner, the parity harness and a pytest plugin."""
