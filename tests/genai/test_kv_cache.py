"""The KV cache is reserved once per generator, under role kv_cache, and refused up front."""

from __future__ import annotations

import gc

import pytest

from onnx_ep import SessionOptions, genai
from onnx_ep.errors import AdmissionRefused, CapacityUnavailable
from onnx_ep.genai.kv_cache import capacity_bytes
from tests.helpers import genai_models as gm


def _model(folder, extra):
    probe = genai.Model(folder)
    weights = probe.session.resources()["weights_bytes"]
    probe.close()
    return genai.Model(folder, options=SessionOptions(memory_limit=weights + extra))


@pytest.mark.parametrize("layout", ["growing", "shared"])
def test_a_cache_that_cannot_fit_is_refused_before_any_step(folders, layout):
    m = _model(folders[layout], 40_003)
    params = genai.GeneratorParams(m)
    params.set_search_options(max_length=128, batch_size=4)    # 4 x 128 x 256 B = 128 KiB
    with pytest.raises(CapacityUnavailable, match="KV cache for batch 4 x max_length 128") as e:
        genai.Generator(m, params)
    assert isinstance(e.value, AdmissionRefused) and e.value.http_status == 429
    assert e.value.requested == capacity_bytes([128] * 2, 4, 2, 8, "float32")
    assert m.session.stats["runs"] == 0                       # no step ran
    assert m.authority.ledger()["by_role"]["kv_cache"] == 0
    with pytest.raises(CapacityUnavailable):                   # the one-call API refuses too
        genai.generate(m, [[1, 2, 3]] * 4, max_new_tokens=125)
    assert m.session.stats["runs"] == 0
    m.close()


@pytest.mark.parametrize("layout", ["growing", "shared"])
def test_the_cache_is_reserved_under_kv_cache_and_released(folders, layout):
    m = _model(folders[layout], 400_009)
    params = genai.GeneratorParams(m)
    params.set_search_options(max_length=32, batch_size=2)
    gen = genai.Generator(m, params)
    nbytes = capacity_bytes([32] * 2, 2, 2, 8, "float32")
    ledger = m.authority.ledger()
    assert ledger["by_role"]["kv_cache"] == m.authority.round_up(nbytes)
    assert ledger["by_holder"][gen.kv.holder] == {"kv_cache": m.authority.round_up(nbytes)}
    gen.append_tokens([[5, 9], [3, 7]])
    gen.generate_next_token()
    gen.close()
    assert m.authority.ledger()["by_role"]["kv_cache"] == 0
    gen2 = genai.Generator(m, params)
    del gen2
    gc.collect()                                               # collected: released too
    assert m.authority.ledger()["by_role"]["kv_cache"] == 0
    m.close()


def test_shared_buffers_are_allocated_once_and_written_in_place(folders):
    m = genai.Model(folders["shared"])
    params = genai.GeneratorParams(m)
    params.set_search_options(max_length=16)
    gen = genai.Generator(m, params)
    key = gen.kv.buffers[0][0]
    ptr = key.data_ptr
    gen.append_tokens([5, 9, 3])
    for _ in range(3):
        gen.generate_next_token()
    gen.generate_next_token()        # runs the model on the third token: 6 positions written
    assert gen.kv.buffers[0][0] is key and key.data_ptr == ptr
    arr = key.numpy()
    assert arr.shape == (1, 2, 16, 8)
    assert (abs(arr[:, :, :6]).sum(axis=(0, 1, 3)) > 0).all()
    assert not arr[:, :, 6:].any()                              # nothing past the length
    gen.close()
    m.close()


def test_capacity_formula_matches_the_layout():
    assert capacity_bytes([256] * 24, 1, 2, 64, "float16") == 24 * 2 * 1 * 2 * 256 * 64 * 2
    assert gm.CFG["layers"] == 2
