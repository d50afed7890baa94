"""Every Python example in README.md and docs/ parses and imports only public names.

Plugin authors copy these examples, so an example that reaches into an internal module
(``onnx_ep.core.admission``, ``onnx_ep.plugins.policies``) teaches them to depend on
something that may move. The public modules are the package itself, ``onnx_ep.errors``,
the contract files (``core/kernel.py``, ``core/provider.py``, ``core/hookspecs.py``,
``core/fusion.py``), the
CUDA provider's package and the parity harness.
"""

from __future__ import annotations

import ast
import re
from importlib import import_module
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PUBLIC = {"onnx_ep", "onnx_ep.errors", "onnx_ep.core.kernel", "onnx_ep.core.provider",
          "onnx_ep.core.hookspecs", "onnx_ep.core.fusion", "onnx_ep.providers.cuda",
          "onnx_ep.testing", "onnx_ep.testing.parity", "onnx_ep.onnxruntime"}
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, int, str]]:
    out = []
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 2
            out.append((path.relative_to(REPO).as_posix(), line, m.group(1)))
    return out


BLOCKS = _blocks()


def test_the_docs_have_python_examples():
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("where,line,code", BLOCKS,
                         ids=[f"{w}:{n}" for w, n, _ in BLOCKS])
def test_example_imports_only_public_names(where: str, line: int, code: str):
    tree = ast.parse(code, filename=f"{where}:{line}")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module == "onnx_ep" or (node.module or "").startswith("onnx_ep.")):
            assert node.module in PUBLIC, \
                f"{where}:{line + node.lineno - 1} imports internal module {node.module}"
            module = import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), \
                    f"{where}:{line + node.lineno - 1}: {node.module} has no {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "onnx_ep" or alias.name.startswith("onnx_ep."):
                    assert alias.name in PUBLIC, \
                        f"{where}:{line + node.lineno - 1} imports internal {alias.name}"
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "onnx_ep"):
            assert hasattr(import_module("onnx_ep"), node.attr), \
                f"{where}:{line + node.lineno - 1}: onnx_ep has no {node.attr}"
