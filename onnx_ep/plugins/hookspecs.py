from onnx_ep.core.hookspecs import *  # noqa  TEMPORARY shim during the move
from onnx_ep.core.hookspecs import hookimpl, hookspec, RegisterKernel, RegisterProvider, PROJECT_NAME  # noqa
