"""Source scan: arrows point one way, and no module grows past one concept.

``core/`` is the house every provider and plugin builds on, so it imports none of them: the
built-in providers, policies and admission strategies reach the session only through hooks,
named as plugins in ``core/plugin_manager.BUILTIN_PLUGINS`` the way entry points are. The
providers do not import each other; what both need lives in ``providers/shared``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import onnx_ep
from onnx_ep.core import plugin_manager

PACKAGE = Path(onnx_ep.__file__).parent
REPO = PACKAGE.parent
#: module size past which a second concept is hiding (STYLE.md: split it out)
MAX_LINES = 600


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module an ``import`` / ``from ... import`` names, at any depth (functions too),
    and every ``import_module("...")`` with a literal name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if (name == "import_module" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                out.append((node.lineno, node.args[0].value))
    return out


def _offenders(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{p.relative_to(PACKAGE).as_posix()}:{line} imports {mod}"
            for p in sorted((PACKAGE / folder).rglob("*.py"))
            for line, mod in _imports(p)
            if any(mod == f or mod.startswith(f + ".") for f in forbidden)]


def test_core_imports_no_plugin_and_no_provider():
    bad = _offenders("core", ("onnx_ep.plugins", "onnx_ep.providers", "onnx_ep.testing",
                              "onnx_ep.cli", "onnx_ep.backend", "onnx_ep.demo"))
    assert not bad, "core/ must reach plugins and providers only through hooks: " + \
        "; ".join(bad)


@pytest.mark.parametrize("provider,other", [("cuda", "cpu_reference"),
                                            ("cpu_reference", "cuda")])
def test_providers_do_not_import_each_other(provider, other):
    bad = _offenders(f"providers/{provider}", (f"onnx_ep.providers.{other}",))
    assert not bad, "helpers both providers use belong in providers/shared: " + "; ".join(bad)


def test_shared_helpers_import_no_provider():
    bad = _offenders("providers/shared", ("onnx_ep.providers.cuda",
                                          "onnx_ep.providers.cpu_reference"))
    assert not bad, "; ".join(bad)


def test_the_guard_sees_function_level_and_string_imports(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from onnx_ep.plugins.policies import X\n"
                   "    import_module('onnx_ep.providers.cuda')\n")
    assert [m for _, m in _imports(src)] == ["onnx_ep.plugins.policies.X",
                                             "onnx_ep.providers.cuda"]


def test_builtin_plugins_are_named_not_imported():
    # the core knows the built-ins by name only, like entry points; each one is importable
    # and implements at least one hook
    from importlib import import_module

    for name in plugin_manager.BUILTIN_PLUGINS:
        module = import_module(name)
        assert any(n.startswith("onnx_ep_") for n in dir(module)), name


def test_no_module_over_the_size_limit():
    roots = [PACKAGE, REPO / "scripts"]
    big = [f"{p.relative_to(REPO).as_posix()} has {n} lines"
           for root in roots if root.exists() for p in sorted(root.rglob("*.py"))
           if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not big, f"split by concept (limit {MAX_LINES} lines): " + "; ".join(big)
