#!/usr/bin/env python3
"""Run onnx's node test suite through onnx_ep.backend; see onnx_ep/testing/node_suite.py."""
import sys

from onnx_ep.testing.node_suite import main

if __name__ == "__main__":
    sys.exit(main())
