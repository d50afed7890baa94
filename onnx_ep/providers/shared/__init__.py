"""Op semantics shared by every provider (window geometry, ...).

Modules here compute what the ONNX definition of an op fixes (pads, output sizes),
so that all providers agree by construction. This package imports nothing from any
provider; providers import from it.
"""
