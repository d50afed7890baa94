"""Feeds and outputs that live on the session's device: which copies a run skips, and
outputs copied device-to-device into the caller's tensors (``Session.run_with_iobinding``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnx_ep.core.executor import copy_all
from onnx_ep.core.graph import Graph
from onnx_ep.core.planner import Program, program_io
from onnx_ep.core.tensor import Tensor, device_type, output_block
from onnx_ep.errors import FeedError


def device_io(device: Any, program: Program, arrays: list[Any], keep: dict[int, Any],
              wanted: set[int] | None) -> tuple[list[Any], frozenset[int]]:
    """Device feeds as the executor takes them; the downloads to skip (outputs kept on
    the device or not wanted)."""
    io = program_io(program)
    dev = device.device if device is not None else None
    out = list(arrays)
    targets = {id(t) for t in keep.values() if isinstance(t, Tensor)}
    in_place: list[int] = []
    waited = False
    for i, a in enumerate(arrays):
        if not isinstance(a, Tensor):
            continue
        if a.device_type == dev and i not in io.host_read_inputs:
            out[i] = a.value              # the copy step copies it device-to-device
            if id(a) in targets:
                in_place.append(i)
        else:
            if not waited and device is not None and not a.is_host:
                # a run queued without waiting may still be writing it
                device.runtime.synchronize(device.stream)
                waited = True
            out[i] = a.numpy()            # read on the host (or another device)
    skip = {step for p, step in io.downloads.items()
            if p in keep or (wanted is not None and p not in wanted)}
    if in_place:
        skip.update(feeds_in_place(program, in_place))
    return out, frozenset(skip)


def feeds_in_place(program: Program, positions: list[int]) -> list[int]:
    """The upload steps of feeds the caller also bound as an output's target: the plan reads
    the caller's buffer itself (a KV cache bound as past and present).

    The caller asked for that buffer to be overwritten by the output, which is copied into
    it only after every step has run, so reading it in place changes no result; an output
    that is a kernel's in-place view of it (GroupQueryAttention's present) is then written
    where it already is, and a recorded graph replays on the same addresses every step.
    """
    slots = {program.input_slots[i] for i in positions}
    return [i for i in program_io(program).uploads if program.steps[i].in_slots[0] in slots]


def copy_out(device: Any, graph: Graph, program: Program, outs: list[Any],
             keep: dict[int, Any], wait: bool = True) -> list[Any]:
    """Copy device outputs wanted on the device into their own Tensors, then wait (unless
    ``wait`` is false: later work on the session's stream is ordered after the copies)."""
    assert device is not None
    io = program_io(program)
    rt, stream, dev = device.runtime, device.stream, device.device
    outs = list(outs)
    fresh = output_block(rt, [(pos, outs[pos]) for pos, target in keep.items()
                              if pos in io.downloads and not isinstance(target, Tensor)
                              and device_type(target) == dev])
    pairs: list[tuple[Any, Any]] = []
    for pos, target in keep.items():
        if pos not in io.downloads:
            continue                      # produced on the host: handled by the caller
        src = outs[pos]
        name = graph.outputs[pos].name
        if isinstance(target, Tensor):
            if target.device_type != dev:
                raise FeedError(f"output {name!r} is bound to a tensor on {target.device} "
                                f"but is produced on {dev}")
            check_like(target, src, name)
            outs[pos] = target
            if getattr(src, "ptr", None) == target.value.ptr:
                continue                  # written in place (a view of the bound feed)
            dst = target
        else:
            if device_type(target) != dev:
                raise FeedError(f"output {name!r} is wanted on {target!r} but is "
                                f"produced on {dev}; bind it to 'cpu' or {dev!r}")
            dst = fresh.get(pos)
            if dst is None:
                dst = Tensor.empty(src.shape, src.dtype, rt.device, runtime=rt)
        pairs.append((src, dst.value))
        outs[pos] = dst
    copy_all(rt, pairs, stream)
    if wait:
        rt.synchronize(stream)
    return outs


def readback(session: Any, tensor: Tensor) -> Callable[[], np.ndarray]:
    """A reader of ``tensor``, an output of a run of ``session`` queued with
    ``RunOptions(synchronize=False)``: called later, it waits only for the work queued on
    the session's stream before this call (not for runs queued since), then copies
    ``tensor`` to the host. The caller keeps later runs from writing ``tensor`` before it
    is read (a second output buffer, alternated)."""
    device = session._device
    if device is None or tensor.is_host:
        value = tensor.numpy()
        return lambda: value
    rt, stream = device.runtime, device.stream
    if not hasattr(rt, "fence"):
        rt.synchronize(stream)
        return tensor.numpy
    fence = rt.fence(stream)
    got: list[np.ndarray] = []

    def read() -> np.ndarray:
        if not got:
            fence.wait()
            fence.release()
            got.append(tensor.numpy())   # on the Tensor copy stream, not the session's
        return got[0]
    return read


def synchronize(session: Any) -> None:
    """Wait for every run queued on ``session``'s stream (``IOBinding.synchronize_outputs``)."""
    device = session._device
    if device is not None:
        device.runtime.synchronize(device.stream)


def check_like(target: Tensor, value: Any, name: str) -> None:
    tv = target.value
    if tv.shape == value.shape and tv.dtype == value.dtype:
        return              # the common case, read for ~100 bound KV outputs a decode step
    if target.dtype != np.dtype(value.dtype) or target.shape != tuple(value.shape):
        raise FeedError(f"output {name!r} is bound to a tensor of {target.dtype}"
                        f"{list(target.shape)} but the run produces {np.dtype(value.dtype)}"
                        f"{list(value.shape)}")


def into(target: Tensor, value: Any, name: str) -> Tensor:
    """Write a host ``value`` into the preallocated ``target``."""
    check_like(target, value, name)
    target.copy_from(value)
    return target
