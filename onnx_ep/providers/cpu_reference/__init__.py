"""The numpy CPU reference provider: the oracle every other provider is held to.

Kernels live in op-family modules, each exposing a ``KERNELS`` list and listed
by :func:`family_modules`. An op that the CUDA provider implements too sits in
the module of the same name on both sides (``conv``, ``indexing``, ``softmax``,
...). This module registers the kernels through the same hooks a third party
uses. Bodies read like the ONNX spec (see docs/PARITY.md for numerics).
"""

from __future__ import annotations

from types import ModuleType

from onnx_ep.core.hookspecs import RegisterKernel, RegisterProvider, hookimpl
from onnx_ep.core.provider import Provider

NAME = "cpu_reference"

PROVIDER = Provider(name=NAME, device="cpu", priority=0, sealed=True,
                    description="numpy reference kernels (the parity oracle)")


def family_modules() -> tuple[ModuleType, ...]:
    """The op-family modules of this provider; each defines ``KERNELS: list[CpuKernel]``.

    They are imported on the first call, not with the package, so that importing
    the package (for :data:`PROVIDER` and the hooks) stays cheap.
    """
    from onnx_ep.providers.cpu_reference import (
        activation,
        attention,
        cast,
        contrib_attention,
        control_flow,
        conv,
        detection,
        einsum,
        elementwise,
        flex_attention,
        fused,
        fused_gemm,
        gated,
        gemm,
        image,
        indexing,
        linalg,
        loss,
        ml,
        movement,
        normalization,
        optional,
        pool,
        quant_contrib,
        quantize,
        random_ops,
        reduce,
        resize,
        rnn,
        selection,
        sequence,
        shape,
        softmax,
        spectral,
        text,
        tfidf,
        training,
    )

    return (
        activation, attention, cast, control_flow, conv, detection, einsum, elementwise,
        flex_attention, fused, gemm, image, indexing, linalg, loss, ml, movement, normalization,
        optional, pool, quantize, random_ops, reduce, resize, rnn, selection, sequence, shape,
        softmax, spectral, text, tfidf, training,
        fused_gemm, gated, contrib_attention, quant_contrib,
    )


@hookimpl
def onnx_ep_register_providers(register: RegisterProvider) -> None:
    register(PROVIDER)


@hookimpl
def onnx_ep_register_kernels(register: RegisterKernel) -> None:
    for family in family_modules():
        for kernel in family.KERNELS:
            register(kernel, provider=NAME)
