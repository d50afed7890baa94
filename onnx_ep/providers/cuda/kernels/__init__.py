"""CUDA kernel families: ``<family>.cu`` sources and the Python kernel classes that launch them.

Each Python module listed in ``onnx_ep.providers.cuda.MODULES`` defines
``KERNELS: list``. Sources are compiled by :mod:`onnx_ep.providers.cuda.nvrtc`.
"""
