"""onnxruntime's exception types, and the translation of onnx-ep's errors into them.

onnxruntime raises ``Fail``, ``InvalidArgument``, ``NoSuchFile``, ... (its status codes);
onnx-ep raises its typed hierarchy (``onnx_ep.errors``). An onnx-ep error that leaves the
compatibility module becomes an instance of a class that derives from both the matching
onnxruntime type and the original onnx-ep type, so ``except InvalidArgument``,
``except onnx_ep.errors.FeedError`` and ``except ValueError`` all catch a bad feed. Every
onnxruntime type here is also a ``RuntimeError`` (onnxruntime's own are plain
``Exception``\\ s; tests that expect ``RuntimeError`` from a failing call pass either way).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from onnx_ep import errors as ep


class OrtStatusError(ep.OnnxEpError, RuntimeError):
    """Base of the onnxruntime status exceptions below: ``code`` and ``status`` are
    onnxruntime's (``[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ...``)."""

    code = 1
    status = "FAIL"

    @classmethod
    def make(cls, message: str) -> OrtStatusError:
        """An instance whose text has onnxruntime's prefix."""
        return cls(f"[ONNXRuntimeError] : {cls.code} : {cls.status} : {message}")


def _status(name: str, code: int, status: str, doc: str) -> type[OrtStatusError]:
    return type(name, (OrtStatusError,), {"code": code, "status": status, "__doc__": doc,
                                          "__module__": __name__})


Fail = _status("Fail", 1, "FAIL", "A call failed (onnxruntime status FAIL).")
InvalidArgument = _status("InvalidArgument", 2, "INVALID_ARGUMENT",
                          "A feed, an option or a name is invalid.")
NoSuchFile = _status("NoSuchFile", 3, "NO_SUCHFILE", "The model file does not exist.")
NoModel = _status("NoModel", 4, "NO_MODEL", "No model was loaded.")
EngineError = _status("EngineError", 5, "ENGINE_ERROR", "An internal engine error.")
RuntimeException = _status("RuntimeException", 6, "RUNTIME_EXCEPTION",
                           "A run failed (memory, a kernel).")
InvalidProtobuf = _status("InvalidProtobuf", 7, "INVALID_PROTOBUF",
                          "The model bytes do not parse as an ONNX model.")
ModelLoaded = _status("ModelLoaded", 8, "MODEL_LOADED", "A model is loaded already.")
NotImplemented = _status("NotImplemented", 9, "NOT_IMPLEMENTED",  # noqa: A001 - onnxruntime's
                         "Not implemented: an op without a kernel, an unsupported feature.")
InvalidGraph = _status("InvalidGraph", 10, "INVALID_GRAPH", "The graph is invalid.")
EPFail = _status("EPFail", 11, "EP_FAIL", "An execution provider failed.")
ModelLoadCanceled = _status("ModelLoadCanceled", 12, "MODEL_LOAD_CANCELED",
                            "Loading the model was canceled.")
ModelRequiresCompilation = _status("ModelRequiresCompilation", 13,
                                   "MODEL_REQUIRES_COMPILATION",
                                   "The model must be compiled first.")
NotFound = _status("NotFound", 14, "NOT_FOUND", "Something named was not found.")

#: onnx-ep error type -> onnxruntime type, most specific first
_MAP: tuple[tuple[type[BaseException], type[OrtStatusError]], ...] = (
    (ep.FeedError, InvalidArgument),
    (ep.OptionsError, InvalidArgument),
    (ep.NoKernelError, NotImplemented),
    (ep.UnsupportedOpError, NotImplemented),
    (ep.MemoryBudgetError, RuntimeException),
    (ep.ProviderUnavailable, EPFail),
    (ep.CudaError, EPFail),
    (ep.ModelError, Fail),
)
_combined: dict[tuple[type[OrtStatusError], type[BaseException]], type] = {}


def ort_type(exc: BaseException) -> type[OrtStatusError]:
    """The onnxruntime type an onnx-ep error maps to (``Fail`` for the rest)."""
    if isinstance(exc, ep.ModelError):
        text = str(exc)
        if "does not exist" in text:
            return NoSuchFile
        if "cannot parse" in text:
            return InvalidProtobuf
    return next((ort for src, ort in _MAP if isinstance(exc, src)), Fail)


def translate(exc: BaseException, kind: type[OrtStatusError] | None = None) -> BaseException:
    """``exc`` as an instance of both its onnxruntime type (or ``kind``) and its own type,
    with the same attributes and onnxruntime's message prefix; errors that are not onnx-ep's
    (or are onnxruntime's already) come back unchanged."""
    if isinstance(exc, OrtStatusError) or not isinstance(exc, ep.OnnxEpError):
        return exc
    ort = kind or ort_type(exc)
    key = (ort, type(exc))
    cls = _combined.get(key)
    if cls is None:
        cls = _combined[key] = type(ort.__name__, (ort, type(exc)),
                                    {"__module__": __name__, "__qualname__": ort.__name__})
    new = cls.__new__(cls)
    new.__dict__.update(exc.__dict__)
    new.args = (f"[ONNXRuntimeError] : {ort.code} : {ort.status} : {exc}",)
    return new.with_traceback(exc.__traceback__)


@contextlib.contextmanager
def ort_errors(kind: type[OrtStatusError] | None = None) -> Iterator[None]:
    """Raise onnx-ep errors from the block as onnxruntime's (see :func:`translate`)."""
    try:
        yield
    except ep.OnnxEpError as exc:
        new = translate(exc, kind)
        if new is exc:
            raise
        raise new from None
