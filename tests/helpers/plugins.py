"""Building blocks for plugin tests: plain kernels, in-process plugins, fake dist-infos."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import onnx_ep
from onnx_ep import CaptureSupport, OpKey, Parity, Provider, Support, WorkspaceRequirement
from tests.helpers.oracle import node_model

#: custom domain of the ops these helpers register, so no built-in kernel ever matches
TEST_DOMAIN = "com.onnx_ep.test"


class PlainKernel:
    """A kernel with no base class: ``outputs[0] = fn(*inputs)``.

    :param key: the OpKey it implements.
    :param fn: numpy body.
    :param decline: if given, ``supports`` calls ``decline(meta)`` and declines with the
        returned reason when it is a non-empty string.
    """

    parity = Parity.EXACT

    def __init__(self, key: OpKey, fn: Callable[..., Any] = lambda x: x, *,
                 decline: Callable[[Any], str | None] | None = None) -> None:
        self.key = key
        self.fn = fn
        self.decline = decline

    def __repr__(self) -> str:
        return f"PlainKernel({self.key}, since={self.key.since})"

    def supports(self, meta: Any) -> Support:
        why = self.decline(meta) if self.decline is not None else None
        return Support.no(why) if why else Support.YES

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.unsupported("host numpy")

    def workspace_requirement(self, meta: Any) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: Any, inputs: Sequence[Any], outputs: list[Any],
                               workspace: Any) -> None:
        outputs[0] = self.fn(*inputs)


class KernelPlugin:
    """An in-process plugin registering ``kernels`` (``[(kernel, provider), ...]``).

    :param providers: providers to register first, through ``onnx_ep_register_providers``.
    :param fail_after: raise ``RuntimeError`` after this many kernel registrations.
    """

    def __init__(self, kernels: Sequence[tuple[Any, str]] = (),
                 providers: Sequence[Provider] = (), *, fail_after: int | None = None,
                 name: str | None = None) -> None:
        self.kernels = list(kernels)
        self.providers = list(providers)
        self.fail_after = fail_after
        if name is not None:
            self.__name__ = name   # the manager names in-process plugins by __name__

    @onnx_ep.hookimpl
    def onnx_ep_register_providers(self, register: Any) -> None:
        for p in self.providers:
            register(p)

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(self, register: Any) -> None:
        for i, (kernel, provider) in enumerate(self.kernels):
            if self.fail_after is not None and i == self.fail_after:
                raise RuntimeError("plugin bug after partial registration")
            register(kernel, provider=provider)
        if self.fail_after is not None and self.fail_after >= len(self.kernels):
            raise RuntimeError("plugin bug after partial registration")


def custom_model(op_type: str, x: np.ndarray, *, domain: str = TEST_DOMAIN,
                 domain_opset: int = 1, **attrs: Any) -> onnx.ModelProto:
    """A one-node model ``y0 = domain::op_type(x)`` importing ``domain`` at ``domain_opset``."""
    model = node_model(op_type, {"x": x}, domain=domain, **attrs)
    for imp in model.opset_import:
        if imp.domain == domain:
            imp.version = domain_opset
    return model


def write_dist_info(root: Path, name: str, entry_points: Mapping[str, str], *,
                    group: str = "onnx_ep", version: str = "0.1.0") -> Path:
    """Create ``root/<name>-<version>.dist-info`` so importlib.metadata sees an installed package.

    Put ``root`` on ``sys.path`` (``monkeypatch.syspath_prepend``) to "install" it;
    ``importlib.invalidate_caches()`` is called so metadata lookups notice it at once.
    """
    dist = root / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    lines = [f"[{group}]"] + [f"{k} = {v}" for k, v in entry_points.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    importlib.invalidate_caches()
    return dist
