"""Suite-wide fixtures only; importable helpers live in tests/helpers/."""

from __future__ import annotations

import os

# tests load no third-party plugins unless a test opts in
os.environ.setdefault("ONNX_EP_PLUGINS", "none")
