"""onnxruntime's block-quantized weight ops on CUDA, the family of
cpu_reference/quant_contrib.py: ``com.microsoft::MatMulNBits`` (:mod:`.nbits`: a gemv for
decode steps, dequantize + cuBLASLt beyond) and ``com.microsoft::GatherBlockQuantized``
(:mod:`.nbits_gather`), both compiled from ``nbits.cu``."""

from __future__ import annotations

from onnx_ep.providers.cuda.kernels.base import CudaKernel
from onnx_ep.providers.cuda.kernels.nbits import MatMulNBits
from onnx_ep.providers.cuda.kernels.nbits_gather import GatherBlockQuantized

KERNELS: list[CudaKernel] = [MatMulNBits(), GatherBlockQuantized()]
