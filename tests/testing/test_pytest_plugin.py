"""The pytest plugin (onnx_ep/testing/pytest_plugin.py), run inside pytester's own pytest sessions.

The inner sessions load the plugin the way a plugin author's project does: through the
``pytest11`` entry point of the installed onnx-ep, with no conftest.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

HEADER = '''
import numpy as np
import pytest
from onnx import helper

from onnx_ep import Provider, Support, hookimpl
from tests.helpers.fake_provider import PLUGIN

A = np.linspace(0.5, 2.0, 8, dtype=np.float32)
FEEDS = {"a": A, "b": A[::-1].copy()}


class GpuOnly:
    """A provider that is registered but cannot run here."""

    __name__ = "gpu_only"

    @hookimpl
    def onnx_ep_register_providers(self, register):
        register(Provider("gpu_only", device="cuda", is_available=lambda: Support.no("no GPU")))
'''


def test_fixture_and_marker_test_a_kernel_in_three_lines(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HEADER + '''
@pytest.mark.parity(provider="fake", plugins=[PLUGIN])
def test_add_within_one_ulp(parity):
    report = parity(helper.make_node("Add", ["a", "b"], ["y"]), FEEDS)
    assert report.outputs[0].max_ulp == 1 and report.outputs[0].kept

@pytest.mark.parity(provider="fake", plugins=[PLUGIN], per_node=True)
def test_mul_beyond_one_ulp(parity):
    parity(helper.make_node("Mul", ["a", "b"], ["y"]), FEEDS)

def test_keywords_override_the_marker(parity):
    parity(helper.make_node("Neg", ["a"], ["y"]), FEEDS, provider="fake", plugins=[PLUGIN],
           opset=17)

@pytest.mark.parity(provider="gpu_only", plugins=[GpuOnly()])
def test_unavailable_provider_skips(parity):
    parity(helper.make_node("Neg", ["a"], ["y"]), FEEDS)

@pytest.mark.parity(provider="no_such_provider")
def test_unknown_provider_fails(parity):
    parity(helper.make_node("Neg", ["a"], ["y"]), FEEDS)
''')
    result = pytester.runpytest("--strict-markers", "-rs")
    result.assert_outcomes(passed=2, failed=2, skipped=1)
    result.stdout.fnmatch_lines([
        "*ParityFailed: parity of Mul_parity: fake against cpu_reference*",
        "*BROKEN: first node breaking its promise: 'Mul_0' (Mul on fake, promise <= 1 ulp): "
        "max ulp 3*",
    ])
    result.stdout.fnmatch_lines(["*SKIPPED*provider 'gpu_only' is unavailable: no GPU*"])
    result.stdout.fnmatch_lines(["*ProviderUnavailable: provider 'no_such_provider'*"])


def test_command_line_option_sets_the_default_provider(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HEADER + '''
def test_div_declares_exact(parity):
    with pytest.raises(AssertionError) as info:
        parity(helper.make_node("Div", ["a", "b"], ["y"]), FEEDS, plugins=[PLUGIN])
    assert info.value.report.provider == "fake"
    assert not info.value.report.outputs[0].kept
''')
    pytester.runpytest("--onnx-ep-provider=fake").assert_outcomes(passed=1)


def test_bad_marker_arguments_fail_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pytest

@pytest.mark.parity(providers=["fake"])
def test_typo(parity):
    pass
''')
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*@pytest.mark.parity takes the keywords provider, reference,*"
                                 "got providers*"])


def test_marker_is_registered_and_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.parity(provider='cuda'*"])
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--onnx-ep-provider=P*"])


def _modules_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return set(out.split())


def test_loading_the_plugin_imports_no_harness_module() -> None:
    loaded = _modules_after_import("onnx_ep.testing.pytest_plugin")
    assert not {"onnx_ep.testing.parity", "onnx_ep.testing.rewrite",
                "onnx_ep.testing.ulp"} & loaded


def test_loading_the_plugin_imports_neither_numpy_nor_onnx() -> None:
    loaded = _modules_after_import("onnx_ep.testing.pytest_plugin")
    assert not {"numpy", "onnx"} & loaded
