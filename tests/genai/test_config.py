"""genai_config.json is read as onnxruntime-genai writes it; what onnx-ep cannot run is refused."""

from __future__ import annotations

import json

import pytest

from onnx_ep import genai
from onnx_ep.errors import ModelError
from tests.helpers import genai_models as gm


def _write(tmp_path, **changes):
    cfg = gm.genai_config()
    for path, value in changes.items():
        node = cfg
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    (tmp_path / "genai_config.json").write_text(json.dumps(cfg))
    return tmp_path


def test_fields_are_read(tmp_path):
    c = genai.load_config(_write(tmp_path, model__eos_token_id=[3, 47],
                                 model__decoder__session_options={"provider_options":
                                                                  [{"cuda": {}}]}))
    assert c.eos_token_ids == (3, 47) and c.pad_token_id == 0 and c.bos_token_id == 1
    assert c.decoder.num_key_value_heads == 2 and c.decoder.head_size == 8
    assert c.decoder.past_names(3) == ("past_key_values.3.key", "past_key_values.3.value")
    assert c.decoder.present_names(0) == ("present.0.key", "present.0.value")
    assert c.onnx_ep_providers() == ["cuda"]
    assert c.search.max_length == 128 and not c.search.past_present_share_buffer


def test_no_provider_means_the_cpu_reference(tmp_path):
    assert genai.load_config(_write(tmp_path)).onnx_ep_providers() == ["cpu_reference"]


def test_beam_search_is_refused_clearly(tmp_path):
    with pytest.raises(ModelError, match="num_beams=4.*beam search is not implemented"):
        genai.load_config(_write(tmp_path, search__num_beams=4))


def test_missing_files_and_fields_name_what_is_wrong(tmp_path):
    with pytest.raises(ModelError, match="has no genai_config.json"):
        genai.load_config(tmp_path)
    cfg = gm.genai_config()
    del cfg["model"]["decoder"]["head_size"]
    (tmp_path / "genai_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="head_size"):
        genai.load_config(tmp_path)
    _write(tmp_path)
    with pytest.raises(ModelError, match="names model.decoder.filename 'model.onnx'"):
        genai.Model(tmp_path)


def test_a_model_that_does_not_match_its_config_is_refused(tmp_path):
    gm.write_folder(tmp_path)
    _write(tmp_path, model__decoder__num_hidden_layers=3)
    with pytest.raises(ModelError, match="past_key_values.2.key"):
        genai.Model(tmp_path)


def test_sliding_window_is_read(tmp_path):
    window = {"window_size": 16, "slide_key_value_cache": False, "slide_inputs": False,
              "layers": [1], "cache_slack": 0}
    c = genai.load_config(_write(tmp_path, model__decoder__sliding_window=window))
    assert (c.decoder.window_size, c.decoder.window_layers, c.decoder.cache_slack) == \
        (16, (1,), 0)
    every = genai.load_config(_write(tmp_path, model__decoder__sliding_window=window | {
        "layers": [], "cache_slack": 4}))
    assert every.decoder.window_layers == (0, 1) and every.decoder.cache_slack == 4


@pytest.mark.parametrize("change,match", [
    ({"slide_key_value_cache": True}, "slide_key_value_cache"),
    ({"layers": [2]}, "layers indices of the model's 2 layers"),
    ({"cache_slack": -1}, "must be >= 0"),
])
def test_sliding_window_refusals(tmp_path, change, match):
    window = {"window_size": 16, "layers": [0], "cache_slack": 0} | change
    with pytest.raises(ModelError, match=match):
        genai.load_config(_write(tmp_path, model__decoder__sliding_window=window))


def test_attention_layer_types_are_read(tmp_path):
    c = genai.load_config(_write(tmp_path, model__decoder__layer_types=[
        "full_attention", "sliding_attention"]))
    assert c.decoder.num_hidden_layers == 2


def test_convolution_layers_are_read(tmp_path):
    """LFM2 as onnxruntime-genai's builder writes it: a convolution layer, its state names,
    and the attention layers' KV names only for those layers."""
    c = genai.load_config(_write(
        tmp_path, model__decoder__layer_types=["conv", "full_attention"],
        model__decoder__conv_cache_size=2,
        model__decoder__inputs__past_conv_names="past.%d.conv",
        model__decoder__outputs__present_conv_names="present.%d.conv"))
    d = c.decoder
    assert (d.kv_layers, d.conv_layers, d.conv_cache_size) == ((1,), (0,), 2)
    assert d.conv_names(0) == ("past.0.conv", "present.0.conv")


@pytest.mark.parametrize("kinds,match", [
    (["linear_attention", "full_attention"], "linear_attention"),
    (["conv"], "1 entries for 2 layers"),
])
def test_other_layer_types_are_refused(tmp_path, kinds, match):
    with pytest.raises(ModelError, match=match):
        genai.load_config(_write(tmp_path, model__decoder__layer_types=kinds))
