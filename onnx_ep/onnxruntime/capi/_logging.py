"""onnxruntime's global logging functions, on the ``onnx_ep`` logger.

``set_default_logger_severity(n)`` sets that logger's level (0 verbose .. 4 fatal);
``set_default_logger_callback(cb)`` routes its records to
``cb(severity, category, logid, code_location, message)``. Both change process-wide
state, as onnxruntime's do.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any

from onnx_ep.onnxruntime.capi._errors import InvalidArgument

#: onnxruntime severity -> logging level
SEVERITY_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR,
                   4: logging.CRITICAL}
_logger = logging.getLogger("onnx_ep")
_handler: _CallbackHandler | None = None
_verbosity = 0


def _severity(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in SEVERITY_LEVELS:
        raise InvalidArgument(f"Invalid logging severity {value!r}. 0:Verbose, 1:Info, "
                              f"2:Warning, 3:Error, 4:Fatal")
    return value


def severity_of(levelno: int) -> int:
    """The onnxruntime severity of a logging level."""
    return next((s for s, lv in sorted(SEVERITY_LEVELS.items(), reverse=True) if levelno >= lv),
                0)


def set_default_logger_severity(severity: int) -> None:
    """Set the ``onnx_ep`` logger's level from an onnxruntime severity (0..4).

    :raises InvalidArgument: (a RuntimeError) a severity outside 0..4.
    """
    _logger.setLevel(SEVERITY_LEVELS[_severity(severity)])


def set_default_logger_verbosity(verbosity: int) -> None:
    """Recorded: onnx-ep has no verbose sub-levels below DEBUG."""
    global _verbosity
    _verbosity = int(verbosity)


class _CallbackHandler(logging.Handler):
    def __init__(self, callback: Callable[..., Any]) -> None:
        super().__init__()
        self.callback = callback

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.callback(severity_of(record.levelno), record.name, getattr(record, "logid", ""),
                          f"{record.pathname}:{record.lineno} {record.funcName}",
                          record.getMessage())
        except Exception:       # a raising callback must not fail the call that logged
            _report(sys.exc_info(), self.callback)


def _report(exc_info: Any, callback: Any) -> None:
    """Report a callback's exception as an unraisable one, and never raise: through
    ``sys.unraisablehook`` where it has been replaced, else (CPython's default hook takes
    only its own ``UnraisableHookArgs``) printed to stderr as that hook prints it."""
    try:
        if sys.unraisablehook is not sys.__unraisablehook__:
            sys.unraisablehook(_Unraisable(*exc_info, callback))  # type: ignore[arg-type]
            return
    except Exception:
        pass
    try:
        print(f"{_Unraisable.err_msg}: {callback!r}", file=sys.stderr)
        traceback.print_exception(*exc_info, file=sys.stderr)
    except Exception:
        pass


class _Unraisable:
    err_msg = "Exception ignored in the onnxruntime logging callback"

    def __init__(self, exc_type: Any, exc_value: Any, exc_traceback: Any, obj: Any) -> None:
        self.exc_type = exc_type
        self.exc_value = exc_value
        self.exc_traceback = exc_traceback
        self.object = obj


def set_default_logger_callback(callback: Callable[..., Any] | None, severity: int = 2) -> None:
    """Send ``onnx_ep`` log records at ``severity`` and above to ``callback(severity,
    category, logid, code_location, message)``; ``None`` removes the callback (the
    level stays). A callback that raises is reported as an unraisable exception
    (``sys.unraisablehook`` where replaced, else stderr) and the logging call goes on.

    :raises InvalidArgument: (a RuntimeError) a severity outside 0..4 or a callback that is
        not callable.
    """
    global _handler
    level = SEVERITY_LEVELS[_severity(severity)]
    if callback is not None and not callable(callback):
        raise InvalidArgument(f"set_default_logger_callback: the callback must be callable "
                              f"or None, got {type(callback).__name__}")
    if _handler is not None:
        _logger.removeHandler(_handler)
        _handler = None
    if callback is None:
        return
    _handler = _CallbackHandler(callback)
    _logger.addHandler(_handler)
    _logger.setLevel(level)
