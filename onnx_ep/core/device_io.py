"""Feeds and outputs that live on the session's device: which copies a run skips, and
outputs copied device-to-device into the caller's tensors (``Session.run_with_iobinding``)."""

from __future__ import annotations

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
    for i, a in enumerate(arrays):
        if not isinstance(a, Tensor):
            continue
        if a.device_type == dev and i not in io.host_read_inputs:
            out[i] = a.value              # the copy step copies it device-to-device
            if id(a) in targets:
                in_place.append(i)
        else:
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
             keep: dict[int, Any]) -> list[Any]:
    """Copy device outputs wanted on the device into their own Tensors, then wait."""
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
    rt.synchronize(stream)
    return outs


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
