"""What docs/OPERATORS.md says of onnxruntime's contrib operators beyond the registry's
table: the attributes and inputs each provider takes, and what it declines (the node then
fails at load on cpu_reference, or falls back to cpu_reference from cuda). Kept beside the
kernels' own checks: ``contrib_attention.py`` and ``quant_contrib.py`` of both providers,
``cuda/kernels/gqa.py``, ``cuda/kernels/nbits.py`` and cpu_reference's ``conv.py``."""

from __future__ import annotations

CONTRIB_NOTES = """\
### Attributes and inputs of the contrib operators

onnxruntime's ContribOperators.md defines these ops; onnxruntime CPU is the comparison in
the tests (`tests/providers/cpu_reference/test_contrib_*.py`, and
`tests/genai/test_builder_parity.py` on onnxruntime-genai's builder models).

| op | attributes | inputs / outputs | cpu_reference declines | cuda declines (falls back) |
|---|---|---|---|---|
| GroupQueryAttention | `num_heads`, `kv_num_heads`, `scale`, `softcap`, `local_window_size`, `do_rotary`, `rotary_interleaved`, `smooth_softmax` | query (packed QKV or separate key/value), past_key/past_value (shared buffer or growing), seqlens_k, total_sequence_length, cos_cache, sin_cache, position_ids, attention_bias, head_sink; output, present_key, present_value | inputs 12-16 (quantized-KV scales, Q/K norms, query_seqlens), `qk_output`, `k_quant_type`/`v_quant_type` | the same, plus `sliding_window_cache` (a window-sized cache), mixed dtypes, head size > 256; a decode step (one token) with head 64 or 128 runs a one-block decode kernel over present buffers of at most 256 rows and a split-key decode kernel over longer ones, anything else the prompt kernel; at a shared buffer the presents are the pasts, written in place |
| MultiHeadAttention | `num_heads`, `scale`, `mask_filter_value`, `unidirectional` | separate 3-D query/key/value, bias, key_padding_mask (int32), attention_bias, past_key/past_value; output, present_key, present_value | packed QKV / packed KV, past_sequence_length, cache_indirection, the qk output | the same, plus 4-D key/value, the (3 x batch + 2) mask form, a head too large for shared memory |
| RotaryEmbedding | `interleaved`, `num_heads`, `rotary_embedding_dim`, `scale` | input (3-D or 4-D), position_ids (int64, (1,) offset or (batch, seq)), cos_cache, sin_cache | `is_packed_batching=1` | the same, plus non-int64 position_ids |
| SkipLayerNormalization | `epsilon` | input, skip, gamma, beta, bias; output, mean, inv_std_var, input_skip_bias_sum | - | float64, gamma/beta/bias not of shape (hidden,), skip shapes onnxruntime does not take |
| SkipSimplifiedLayerNormalization | `epsilon` | input, skip, gamma, bias; output, mean, inv_std_var, input_skip_bias_sum | - | float64 |
| MatMulNBits | `K`, `N`, `bits` (2, 4, 8), `block_size` (a power of two >= 16), `accuracy_level` | A, B (uint8 [N, blocks, blob]), scales, zero_points (packed uint8 or of A's type), g_idx, bias | - (every `accuracy_level` accumulates exactly: onnxruntime's level 4 quantizes A to int8, docs/PARITY.md) | g_idx, prepacked weights, float64 A; M <= 8 rows read the packed weights directly (gemv; 4-bit codes with float16/bfloat16 A and enough rows of B on tensor cores), more rows dequantize into the workspace and multiply with cuBLASLt |
| GatherBlockQuantized | `gather_axis`, `quantize_axis`, `block_size`, `bits` | data (int4, uint4, or uint8 packing 2/4/8-bit codes), indices, scales, zero_points | - | - |
| FusedMatMul | `alpha`, `transA`, `transB` | A, B | - | - |
| CausalConvWithState | `ndim` (1), `activation` (`none`, `silu`, `swish`), `dilation`, `channels_last` | input, weight (channels, 1, k), bias, past_state; output, present_state (the last (k - 1) * dilation positions) | `ndim` 2 or 3, `state_window` > 0, onnxruntime's CUDA-only extended attributes (`state_update_capacity`, `state_length`, `input_channel_offset`, `input_channels`, a `state_channels_last` other than the layout's) and the `state_update` output | every node (no cuda kernel: it runs on cpu_reference) |

`SimplifiedLayerNormalization` (`axis`, `epsilon`; in the default domain, an onnxruntime op)
is listed under ai.onnx above.
"""
