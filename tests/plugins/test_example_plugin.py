"""examples/plugin_example, loaded the way users load it: through its ``onnx_ep`` entry point.

The in-process tests "install" the example with a temporary ``*.dist-info`` whose
``entry_points.txt`` is copied from the example's pyproject.toml, so they run
anywhere in milliseconds. ``test_installed_distribution_*`` exercise the real
distribution that .ci/run pip-installs; they skip only when it is not installed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib

import onnx_ep
from onnx_ep import NodeMeta, NoKernelError, TensorSpec, WorkspaceView
from onnx_ep.core import plugin_manager as manager
from onnx_ep.errors import WorkspaceTooSmall
from tests.helpers.oracle import node_model
from tests.helpers.plugins import write_dist_info

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "plugin_example"
DIST_NAME = "onnx-ep-example-plugin"
PACKAGE = "onnx_ep_example_plugin"
DOMAIN = "com.example"


def _pyproject() -> dict:
    with open(EXAMPLE_DIR / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _installed_example() -> metadata.Distribution | None:
    try:
        return metadata.distribution(DIST_NAME)
    except metadata.PackageNotFoundError:
        return None


requires_installed_example = pytest.mark.skipif(
    _installed_example() is None,
    reason=f"distribution {DIST_NAME!r} is not installed; "
           f"run `pip install ./examples/plugin_example` (as .ci/run does)")


def swish2_numpy(x: np.ndarray, beta: float) -> np.ndarray:
    """The independent oracle, in float64."""
    x64 = x.astype(np.float64)
    return x64 / (1.0 + np.exp(-beta * x64))


def swish2_model(x: np.ndarray, beta: float = 1.0):
    return node_model("Swish2", {"x": x}, domain=DOMAIN, beta=beta)


def _forget_example_modules() -> dict[str, object]:
    return {k: sys.modules.pop(k) for k in list(sys.modules)
            if k == PACKAGE or k.startswith(PACKAGE + ".")}


@pytest.fixture
def isolated_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh default plugin-set cache and a fresh import of the example package."""
    monkeypatch.setattr(manager, "_default_plugins", {})
    saved = _forget_example_modules()
    yield
    _forget_example_modules()
    sys.modules.update(saved)


@pytest.fixture
def example_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        isolated_plugins: None) -> Path:
    """"Install" the example: its source on sys.path plus a dist-info with its entry point."""
    eps = _pyproject()["project"]["entry-points"]["onnx_ep"]
    site = tmp_path / "site"
    dist = write_dist_info(site, DIST_NAME, eps)
    monkeypatch.syspath_prepend(str(EXAMPLE_DIR))
    monkeypatch.syspath_prepend(str(site))
    return dist


# ---------------------------------------------------------------- packaging


def test_pyproject_declares_the_entry_point():
    project = _pyproject()["project"]
    assert project["name"] == DIST_NAME
    assert project["entry-points"]["onnx_ep"] == {"example": PACKAGE}
    assert (EXAMPLE_DIR / PACKAGE / "__init__.py").is_file()
    assert (EXAMPLE_DIR / "README.md").is_file()


def test_entry_point_is_discovered_by_importlib_metadata(example_entry_point: Path):
    eps = metadata.entry_points(group=manager.ENTRY_POINT_GROUP)
    (ep,) = [ep for ep in eps if ep.name == "example"]
    assert ep.value == PACKAGE
    assert ep.load().__name__ == PACKAGE


# ---------------------------------------------------------------- running Swish2


@pytest.mark.parametrize("beta", [1.0, 0.5, 1.702, -2.0])
def test_swish2_matches_numpy_when_plugins_unset(example_entry_point: Path,
                                                 monkeypatch: pytest.MonkeyPatch, beta: float):
    monkeypatch.delenv(manager.PLUGINS_ENV, raising=False)   # unset: every entry point loads
    x = np.random.default_rng(0).standard_normal((4, 7)).astype(np.float32) * 4
    (y,) = onnx_ep.Session(swish2_model(x, beta)).run(None, {"x": x})
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, swish2_numpy(x, beta), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-14), (np.float16, 2e-3)])
def test_swish2_keeps_the_input_dtype(example_entry_point: Path,
                                      monkeypatch: pytest.MonkeyPatch, dtype, rtol):
    monkeypatch.setenv(manager.PLUGINS_ENV, "example")
    x = np.linspace(-6, 6, 25).astype(dtype)
    (y,) = onnx_ep.Session(swish2_model(x, 1.25)).run(None, {"x": x})
    assert y.dtype == dtype
    np.testing.assert_allclose(y.astype(np.float64), swish2_numpy(x, 1.25), rtol=rtol,
                               atol=rtol * 1e-3)


def test_swish2_saturates_without_nan_or_warning(example_entry_point: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(manager.PLUGINS_ENV, "example")
    x = np.array([-1e4, -100.0, 0.0, 100.0, 1e4], np.float32)
    with np.errstate(all="raise"):
        (y,) = onnx_ep.Session(swish2_model(x)).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.array([-0.0, -0.0, 0.0, 100.0, 1e4], np.float32))


def test_chained_swish2_uses_workspace_and_allocating_routes(example_entry_point: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    # the first node's input shape is known at plan time (workspace route); the second
    # reads a custom op's output, which shape inference cannot see (allocating route)
    from onnx import TensorProto, helper

    from tests.helpers.oracle import ORACLE_IR_VERSION

    monkeypatch.setenv(manager.PLUGINS_ENV, "example")
    graph = helper.make_graph(
        [helper.make_node("Swish2", ["x"], ["h"], domain=DOMAIN, beta=2.0),
         helper.make_node("Swish2", ["h"], ["y"], domain=DOMAIN, beta=0.5)],
        "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, ir_version=ORACLE_IR_VERSION, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    sess = onnx_ep.Session(model)
    for _ in range(2):   # the second run reuses the cached plan and its workspace
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, swish2_numpy(swish2_numpy(x, 2.0), 0.5), rtol=5e-6,
                                   atol=1e-7)


def test_swish2_declines_integer_input_with_a_reason(example_entry_point: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(manager.PLUGINS_ENV, "example")
    x = np.arange(4, dtype=np.int32)
    with pytest.raises(NoKernelError) as info:
        onnx_ep.Session(swish2_model(x), providers=["cpu_reference"])
    assert "Swish2 needs a float input, got int32" in info.value.tried["cpu_reference"]


# ---------------------------------------------------------------- ONNX_EP_PLUGINS


@pytest.mark.parametrize("value", ["none", "", "some_other_plugin", " none , "])
def test_plugins_env_can_exclude_the_example(example_entry_point: Path,
                                             monkeypatch: pytest.MonkeyPatch, value: str):
    monkeypatch.setenv(manager.PLUGINS_ENV, value)
    x = np.ones(3, np.float32)
    with pytest.raises(NoKernelError) as info:
        onnx_ep.Session(swish2_model(x))
    assert info.value.op == "com.example::Swish2"
    assert info.value.tried == {"cpu_reference": "no kernel"}
    assert "example" not in manager.default_plugins().plugin_names


@pytest.mark.parametrize("value", ["example", "other, example", " example "])
def test_plugins_env_naming_the_example_loads_it(example_entry_point: Path,
                                                 monkeypatch: pytest.MonkeyPatch, value: str):
    monkeypatch.setenv(manager.PLUGINS_ENV, value)
    assert "example" in manager.default_plugins().plugin_names
    x = np.ones(3, np.float32)
    (y,) = onnx_ep.Session(swish2_model(x)).run(None, {"x": x})
    np.testing.assert_allclose(y, swish2_numpy(x, 1.0), rtol=1e-6)


def test_default_plugins_follow_plugins_env_within_one_process(
        example_entry_point: Path, monkeypatch: pytest.MonkeyPatch):
    x = np.ones(2, np.float32)
    monkeypatch.setenv(manager.PLUGINS_ENV, "none")
    with pytest.raises(NoKernelError):
        onnx_ep.Session(swish2_model(x))
    monkeypatch.setenv(manager.PLUGINS_ENV, "example")
    onnx_ep.Session(swish2_model(x)).run(None, {"x": x})
    monkeypatch.setenv(manager.PLUGINS_ENV, "none")
    with pytest.raises(NoKernelError):
        onnx_ep.Session(swish2_model(x))


# ---------------------------------------------------------------- the kernel itself


def _meta(shape, dtype=np.float32, beta: float = 1.0) -> NodeMeta:
    return NodeMeta(name="n", op_type="Swish2", domain=DOMAIN, opset=1, attrs={"beta": beta},
                    inputs=(TensorSpec(dtype, shape),), outputs=(None,))


def test_swish2_satisfies_the_protocol_without_a_base_class(example_entry_point: Path):
    from onnx_ep_example_plugin import Swish2

    from onnx_ep.core.kernel import check_kernel

    assert Swish2.__mro__ == (Swish2, object)
    kernel = Swish2()
    assert isinstance(kernel, onnx_ep.Kernel)
    assert check_kernel(kernel) is None
    assert kernel.key == onnx_ep.OpKey(DOMAIN, "Swish2", 1)


def test_swish2_workspace_is_exact_and_checked(example_entry_point: Path):
    from onnx_ep_example_plugin import Swish2

    from onnx_ep import ExecutionContext

    kernel = Swish2()
    meta = _meta((2, 3))
    req = kernel.workspace_requirement(meta)
    assert req.nbytes == 2 * 3 * 4
    assert kernel.workspace_requirement(_meta(("batch", 3))) == onnx_ep.WorkspaceRequirement.NONE
    x = np.ones((2, 3), np.float32)
    ctx = ExecutionContext(meta, provider="cpu_reference")
    out: list = [None]
    kernel.execute_with_workspace(ctx, [x], out, WorkspaceView(np.empty(24, np.uint8), 24))
    np.testing.assert_allclose(out[0], swish2_numpy(x, 1.0), rtol=1e-6)
    with pytest.raises(WorkspaceTooSmall):
        kernel.execute_with_workspace(ctx, [x], out, WorkspaceView(np.empty(24, np.uint8), 20))


# ---------------------------------------------------------------- the real distribution


@requires_installed_example
def test_installed_distribution_registers_swish2(isolated_plugins: None,
                                                 monkeypatch: pytest.MonkeyPatch):
    dist = _installed_example()
    assert dist is not None
    eps = [ep for ep in dist.entry_points if ep.group == manager.ENTRY_POINT_GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("example", PACKAGE)]
    monkeypatch.setenv(manager.PLUGINS_ENV, "example")
    plugins = manager.default_plugins()
    assert "example" in plugins.plugin_names
    assert [e.plugin for e in plugins.registry.entries("cpu_reference")
            if e.kernel.key.domain == DOMAIN] == ["example"]
    x = np.linspace(-3, 3, 10, dtype=np.float32)
    (y,) = onnx_ep.Session(swish2_model(x, 0.75)).run(None, {"x": x})
    np.testing.assert_allclose(y, swish2_numpy(x, 0.75), rtol=2e-6, atol=1e-7)
