"""``onnx_ep.Tensor`` and ``IOBinding``: values that live on a device between runs.

A :class:`Tensor` is a numpy array (``device="cpu"``) or a device provider's tensor
(``"cuda:0"``), with ``from_numpy`` / ``numpy()`` copies and zero-copy DLPack in both
directions, so torch and cupy share memory with onnx-ep. Device bytes of a Tensor are
reserved in the device's memory authority (holder ``"onnx_ep.Tensor"``, role
activations) before they are allocated, and released when the Tensor is collected.

:class:`IOBinding` is onnxruntime's ``io_binding`` shape: bind inputs (numpy arrays,
Tensors, or any DLPack producer such as a ``torch.Tensor`` on the GPU) and outputs (to
the host, to the session's device, or into a preallocated Tensor), then
``Session.run_with_iobinding(binding)``. Device inputs are copied device-to-device into
the plan's buffers and device outputs are copied device-to-device out of them, so a
decode loop that feeds outputs back as inputs never round-trips the host.

Ordering: device work runs on the session's stream. ``Tensor.from_numpy``,
``Tensor.from_dlpack`` and ``run_with_iobinding`` wait for their copies before they
return (one stream synchronization each), so a Tensor is always ready to be read from
any stream or library.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import align_up
from onnx_ep.errors import FeedError, ProviderUnavailable

HOST = "cpu"
#: DLPack device types (dlpack.h): CPU, CUDA, CUDA pinned host memory
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3
#: the ledger holder of bytes owned by Tensors
HOLDER = "onnx_ep.Tensor"


def device_type(device: str) -> str:
    return device.split(":", 1)[0]


def device_runtime(device: str) -> Any:
    """The :class:`~onnx_ep.core.provider.DeviceRuntime` of ``device`` (``"cuda"``, ``"cuda:0"``).

    :raises ProviderUnavailable: no available provider runs on that device type.
    """
    from onnx_ep.core.plugin_manager import default_plugins

    registry = default_plugins().registry
    kind = device_type(device)
    tried = []
    for prov in sorted(registry.providers.values(), key=lambda p: -p.priority):
        if prov.device != kind or prov.runtime is None:
            continue
        ok = prov.is_available()
        if not ok:
            tried.append(f"{prov.name}: {ok.reason}")
            continue
        rt = prov.runtime()
        if device not in (kind, rt.device):
            raise ProviderUnavailable(prov.name, f"it runs on {rt.device!r}, not {device!r}",
                                      registry.available())
        return rt
    why = "; ".join(tried) if tried else f"no registered provider runs on device {kind!r}"
    raise ProviderUnavailable(kind, why, registry.available())


class Tensor:
    """A tensor on the host (a numpy array) or on a device provider's device.

    Build one with :meth:`from_numpy`, :meth:`empty` or :meth:`from_dlpack`; read it with
    :meth:`numpy`. ``value`` is the provider-native object (a numpy array, or e.g. a
    CUDA ``DeviceTensor``) for kernel and plugin authors.

    :ivar device: ``"cpu"`` or the device's ledger name (``"cuda:0"``).
    """

    __slots__ = ("value", "device", "_runtime", "_finalizer", "__weakref__")

    def __init__(self, value: Any, device: str = HOST, runtime: Any = None) -> None:
        self.value = value
        self.device = device
        self._runtime = runtime
        self._finalizer: Any = None

    def __repr__(self) -> str:
        return f"onnx_ep.Tensor({self.device}, {self.dtype}, {list(self.shape)})"

    # ------------------------------------------------------------ metadata
    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.value.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        s = self.value.shape
        # numpy's and DeviceTensor's shapes are tuples of ints already (read on every run
        # for every bound tensor: no copy)
        return s if type(s) is tuple else tuple(int(d) for d in s)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return TensorSpec(self.dtype, self.shape).nbytes

    @property
    def is_host(self) -> bool:
        return self.device == HOST

    @property
    def device_type(self) -> str:
        """``"cpu"``, ``"cuda"``: the device a provider declares (``Provider.device``)."""
        return device_type(self.device)

    @property
    def data_ptr(self) -> int:
        """Address of element 0 (host or device)."""
        if self.is_host:
            return int(self.value.ctypes.data)
        return int(self.value.ptr)

    # ------------------------------------------------------------ construction
    @classmethod
    def empty(cls, shape: Sequence[int], dtype: Any, device: str = HOST,
              runtime: Any = None) -> Tensor:
        """An uninitialized tensor; device bytes are reserved in the device's authority first.

        :param runtime: the device's runtime; default: the available provider's for
            ``device`` (pass it for a provider registered in-process through ``plugins=``).
        :raises TierExhausted: the device budget cannot hold it now.
        :raises ProviderUnavailable: no provider runs on ``device`` here.
        """
        spec = TensorSpec(np.dtype(dtype), tuple(int(d) for d in shape))
        if device == HOST:
            return cls(np.empty(spec.shape, spec.dtype))
        rt = runtime if runtime is not None else device_runtime(device)
        from onnx_ep.core.memory import Role, authority_for

        authority = authority_for(rt.device, None, rt.granularity, budget=rt.budget)
        reservation = authority.reserve(max(spec.nbytes, 1), Role.ACTIVATIONS, HOLDER)
        try:
            alloc = rt.allocate(reservation)
        except BaseException:
            reservation.release()
            raise
        t = cls(rt.tensor(alloc, 0, spec), rt.device, rt)
        t._finalizer = weakref.finalize(t, _free, alloc, reservation)
        return t

    @classmethod
    def from_numpy(cls, array: Any, device: str = HOST, runtime: Any = None) -> Tensor:
        """A copy of ``array`` on ``device`` (``"cpu"``: the array itself, made C-contiguous).

        :param runtime: as for :meth:`empty`.
        """
        host = np.asarray(array, order="C")
        if device == HOST:
            return cls(host)
        t = cls.empty(host.shape, host.dtype, device, runtime)
        t.copy_from(host)
        return t

    def copy_from(self, array: Any) -> None:
        """Overwrite this tensor with host ``array`` (same dtype and shape); waits for it."""
        if self.is_host:
            np.copyto(self.value, array)
            return
        stream = _io_stream(self._runtime)
        self._runtime.upload(np.asarray(array, order="C"), self.value, stream)
        self._runtime.synchronize(stream)

    @classmethod
    def from_dlpack(cls, obj: Any) -> Tensor:
        """Wrap a DLPack producer (torch, cupy, numpy, another Tensor) without copying.

        Host producers become numpy arrays; CUDA producers become device tensors that keep
        ``obj`` alive. The producer's pending work is waited for before this returns.

        :raises TypeError: a device or layout onnx-ep cannot wrap (the message says which).
        """
        if isinstance(obj, Tensor):
            return obj
        dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (_DL_CPU, 0)
        kind = int(dev[0])
        if kind in (_DL_CPU, _DL_CUDA_HOST):
            return cls(np.from_dlpack(obj))
        if kind != _DL_CUDA:
            raise TypeError(f"from_dlpack: DLPack device type {kind} is not supported "
                            f"(onnx-ep wraps CPU ({_DL_CPU}) and CUDA ({_DL_CUDA}) tensors)")
        rt = device_runtime(f"cuda:{int(dev[1])}")
        native = rt.from_dlpack(obj)
        rt.synchronize(rt.default_stream())
        return cls(native, rt.device, rt)

    # ------------------------------------------------------------ reading
    def numpy(self) -> np.ndarray:
        """The values as a numpy array (a copy from a device; the array itself on the host)."""
        if self.is_host:
            return self.value
        return self._runtime.download(self.value, _io_stream(self._runtime))

    def to(self, device: str) -> Tensor:
        """This tensor on ``device`` (``self`` when it is there already)."""
        if device in (self.device, device_type(self.device)):
            return self
        return Tensor.from_numpy(self.numpy(), device)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if not self.is_host:
            raise TypeError(f"{self!r} lives on {self.device}; call .numpy() to copy it to "
                            f"the host")
        return self.value if dtype is None else self.value.astype(dtype)

    def __dlpack_device__(self) -> tuple[int, int]:
        if self.is_host:
            return (_DL_CPU, 0)
        return self.value.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.value.__dlpack__(**kwargs)


def _free(alloc: Any, reservation: Any) -> None:
    alloc.free()
    reservation.release()


_io_streams: dict[int, Any] = {}


def _io_stream(rt: Any) -> Any:
    """One stream per device runtime for Tensor copies outside sessions."""
    s = _io_streams.get(id(rt))
    if s is None:
        s = _io_streams[id(rt)] = rt.new_stream()
    return s


def as_tensor(value: Any) -> Tensor:
    """A Tensor from a Tensor, a numpy array / scalar, or a DLPack producer."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        return Tensor(np.asarray(value))
    if hasattr(value, "__dlpack__"):
        return Tensor.from_dlpack(value)
    raise FeedError(f"expected a numpy array, an onnx_ep.Tensor or a DLPack tensor (torch, "
                    f"cupy), got {type(value).__name__}")


class IOBinding:
    """Inputs and outputs bound for :meth:`Session.run_with_iobinding` (onnxruntime's shape).

    Outputs not bound are not returned; when no output is bound, every output comes
    back on the host.
    """

    def __init__(self, session: Any) -> None:
        self.session = session
        self._inputs: dict[str, Tensor] = {}
        #: output name -> device string or a preallocated Tensor
        self._outputs: dict[str, str | Tensor] = {}
        self._results: list[Tensor] | None = None

    def bind_input(self, name: str, value: Any) -> None:
        """Bind a numpy array, an ``onnx_ep.Tensor`` or a DLPack tensor to input ``name``."""
        self.session._feeds.index_of(name)
        self._inputs[name] = as_tensor(value)

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        self.bind_input(name, np.asarray(array))

    def bind_output(self, name: str, device: str | Tensor = HOST, device_id: int = 0, *,
                    device_type: str | None = None) -> None:
        """Return output ``name`` on ``device`` (``"cpu"``, ``"cuda"``) or write it into a
        preallocated Tensor of the output's dtype and shape.

        ``device_type=`` / ``device_id`` are onnxruntime's spelling of the same
        (``bind_output("y", device_type="cuda", device_id=0)``).
        """
        if device_type is not None:
            device = device_type if device_type == HOST else f"{device_type}:{device_id}"
        self.session._output_positions([name])     # an unknown name: FeedError, as run()
        if not isinstance(device, (str, Tensor)):
            raise FeedError(f"bind_output({name!r}) takes a device string or an "
                            f"onnx_ep.Tensor, got {type(device).__name__}")
        self._outputs[name] = device

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: bound device inputs were ready when they were bound."""

    def synchronize_outputs(self) -> None:
        """Wait for the outputs of runs queued with ``RunOptions(synchronize=False)``
        (otherwise ``run_with_iobinding`` has waited for them before returning)."""
        from onnx_ep.core.device_io import synchronize

        synchronize(self.session)

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def get_outputs(self) -> list[Tensor]:
        """The bound outputs of the last run, in binding order (all outputs if none bound)."""
        if self._results is None:
            raise FeedError("no run yet: call session.run_with_iobinding(binding) first")
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [t.numpy() for t in self.get_outputs()]

    # for the session
    def output_requests(self) -> list[tuple[str, str | Tensor]]:
        if self._outputs:
            return list(self._outputs.items())
        return [(name, HOST) for name in self.session._output_index]


def output_block(rt: Any, outs: list[tuple[int, Any]]) -> dict[int, Tensor]:
    """Device Tensors for ``outs`` (``(position, device value)``): views of one pooled block
    of ``rt`` (its optional ``pooled``), not an allocation each; empty when it cannot."""
    if len(outs) < 2 or not hasattr(rt, "pooled"):
        return {}
    offsets, total = [], 0
    for _, v in outs:
        offsets.append(total)
        total += align_up(TensorSpec(v.dtype, v.shape).nbytes, 256)
    block = rt.pooled(total, HOLDER)
    return {pos: Tensor(rt.tensor(block, off, TensorSpec(v.dtype, v.shape)), rt.device, rt)
            for (pos, v), off in zip(outs, offsets)}
