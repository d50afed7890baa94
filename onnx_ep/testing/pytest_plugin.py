"""pytest plugin (entry point ``pytest11``): the ``parity`` fixture and ``parity`` marker.

A kernel plugin's test in three lines::

    @pytest.mark.parity(provider="cuda")
    def test_gelu(parity):
        parity(onnx.helper.make_node("Gelu", ["x"], ["y"]), {"x": np.ones((4, 8), np.float32)})

``parity(model_or_node, feeds, ...)`` runs :func:`onnx_ep.testing.parity.compare`,
fails the test with the report's table when a promise is broken, and returns the
report. Settings come from the call's keywords, else the test's ``parity`` marker,
else ``--onnx-ep-provider``, else ``cuda``. A provider that is registered but cannot
run on this machine (no GPU) skips the test with its reason; an unknown provider name
fails it. See docs/PARITY.md, "The harness".

pytest loads this module at startup in every project of an environment where onnx-ep
is installed, so it imports nothing from onnx-ep until a test calls the fixture.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

#: the provider under test when neither the call, the marker nor the option names one
DEFAULT_PROVIDER = "cuda"
_SETTINGS = ("provider", "reference", "per_node", "plugins", "opset")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("onnx-ep")
    group.addoption("--onnx-ep-provider", default=None, metavar="P",
                    help="provider the 'parity' fixture tests when neither the call nor a "
                         f"parity marker names one (default: {DEFAULT_PROVIDER})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "parity(provider='cuda', reference='cpu_reference', per_node=False, plugins=(), "
        "opset=None): defaults for the onnx-ep 'parity' fixture in this test")


class ParityFailed(AssertionError):
    """A promise is broken; ``.report`` is the :class:`~onnx_ep.testing.parity.ParityReport`."""

    def __init__(self, report: Any) -> None:
        super().__init__(str(report))
        self.report = report


class ParityChecker:
    """The ``parity`` fixture's value: call it to compare and assert (see module docstring)."""

    def __init__(self, defaults: Mapping[str, Any]) -> None:
        self.defaults = dict(defaults)

    def __call__(self, model_or_node: Any, feeds: Mapping[str, Any], *,
                 provider: str | None = None, reference: str | None = None,
                 per_node: bool | None = None, plugins: Sequence[Any] | None = None,
                 opset: int | None = None,
                 initializers: Mapping[str, Any] | None = None) -> Any:
        """Compare ``model_or_node`` on ``provider`` and the reference; fail on a broken promise.

        :param model_or_node: a model (path, bytes, ``ModelProto``) or a bare
            ``onnx.NodeProto``, wrapped in a one-node model typed from ``feeds``.
        :param feeds: input name -> numpy array (for a bare node, names it does not
            read are ignored).
        :param opset: ai.onnx opset of the model around a bare node (default: newest).
        :param initializers: constant inputs of a bare node (name -> array).
        :returns: the :class:`~onnx_ep.testing.parity.ParityReport`.
        :raises ParityFailed: (an ``AssertionError``) when a promise is broken.
        """
        __tracebackhide__ = True
        import onnx

        from onnx_ep.testing.parity import compare
        from onnx_ep.testing.rewrite import single_node_model

        given = {"provider": provider, "reference": reference, "per_node": per_node,
                 "plugins": plugins, "opset": opset}
        s = {k: v if v is not None else self.defaults.get(k) for k, v in given.items()}
        prov = s["provider"] or DEFAULT_PROVIDER
        ref = s["reference"] or "cpu_reference"
        plugs = tuple(s["plugins"] or ())
        _skip_if_unavailable(prov, plugs)
        model = model_or_node
        if isinstance(model_or_node, onnx.NodeProto):
            model = single_node_model(model_or_node, feeds, opset=s["opset"],
                                      initializers=initializers)
            # a bare node takes what it reads, so tests can share one feeds dict
            reads = set(model_or_node.input) - set(initializers or ())
            feeds = {k: v for k, v in feeds.items() if k in reads}
        report = compare(model, feeds, provider=prov, reference=ref,
                         per_node=bool(s["per_node"]), plugins=plugs)
        if not report.ok:
            raise ParityFailed(report)
        return report


def _skip_if_unavailable(provider: str, plugins: Sequence[Any]) -> None:
    """Skip when ``provider`` is registered but cannot run here; unknown names fail later."""
    from onnx_ep.core.plugin_manager import plugins_for

    registered = plugins_for(plugins).registry.providers.get(provider)
    if registered is None:
        return
    verdict = registered.is_available()
    if not verdict:
        pytest.skip(f"provider {provider!r} is unavailable: {verdict.reason}")


@pytest.fixture
def parity(request: pytest.FixtureRequest) -> ParityChecker:
    """Compare a model or node on a provider against the reference and assert the promises.

    ``parity(model_or_node, feeds, provider=..., reference=..., per_node=..., plugins=...)``
    returns the report; defaults come from ``@pytest.mark.parity(...)`` and
    ``--onnx-ep-provider``.
    """
    defaults: dict[str, Any] = {"provider": request.config.getoption("onnx_ep_provider")}
    marker = request.node.get_closest_marker("parity")
    if marker is not None:
        unknown = sorted(set(marker.kwargs) - set(_SETTINGS))
        if unknown or marker.args:
            pytest.fail(f"@pytest.mark.parity takes the keywords {', '.join(_SETTINGS)}; "
                        f"got {', '.join(unknown) or repr(marker.args)}", pytrace=False)
        defaults.update({k: v for k, v in marker.kwargs.items() if v is not None})
    return ParityChecker(defaults)
