"""CUDA kernel families: ``<family>.cu`` sources and the Python kernel classes that launch them.

Every kernel class derives from :class:`.base.CudaKernel`. Each family module, listed in
:func:`onnx_ep.providers.cuda.kernel_modules`, defines ``KERNELS: list``. Sources (and the
``ep_*.cuh`` headers they include) are compiled by :mod:`onnx_ep.providers.cuda.nvrtc`.
docs/KERNELS.md, "Adding a CUDA op", lists the files a new op touches.
"""
