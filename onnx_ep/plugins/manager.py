# TEMPORARY shim while the providers move to onnx_ep.core.registry.register_kernel_modules
from importlib import import_module

from onnx_ep.core.registry import register_kernel_modules as _r


def register_kernel_modules(register, package, modules, provider):
    _r(register, [import_module(f"{package}.{m}") for m in modules], provider)
