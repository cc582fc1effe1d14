"""The cost model: hand-checked numbers for Llama-2 7B and Mixtral, the roofline, a measurement."""

import pytest

from llama_course import PRESETS
from llama_course.cost import (
    ACCELERATORS,
    arithmetic_intensity,
    decode_bytes,
    flops_per_token,
    kv_cache_bytes,
    measure_accelerator,
    prefill_flops,
    roofline_time,
)


def test_cost_numbers():
    llama2 = PRESETS["llama2-7b"]
    assert kv_cache_bytes(llama2) == 524_288 and kv_cache_bytes(llama2, 4096) == 2 * 2**30
    # 2 FLOPs per weight used in a product: blocks (attention + FFN) and the head; attention over 1 position
    weights = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096
    assert flops_per_token(llama2, 1) == 2 * weights + 4 * 32 * 4096
    assert 13.1e9 < decode_bytes(llama2, 1) < 13.3e9                # about 13.2 GB per decode step in fp16
    assert arithmetic_intensity(llama2, 1) == pytest.approx(1.0, abs=0.01)   # 2 FLOPs per 2-byte weight
    assert arithmetic_intensity(llama2, 1, batch_size=64) > 50               # batching reuses the weights
    assert prefill_flops(llama2, 10) > 10 * flops_per_token(llama2, 1)
    mixtral = PRESETS["mixtral-8x7b"]
    assert flops_per_token(mixtral, 1) < 0.3 * 2 * 46.7e9                   # only 2 of 8 experts run
    h100 = next(a for a in ACCELERATORS if "H100" in a.name)
    assert roofline_time(flops_per_token(llama2, 1), decode_bytes(llama2, 1), h100) == \
        pytest.approx(decode_bytes(llama2, 1) / 3.35e12)                     # decode is memory-bound
    measured = measure_accelerator("cpu", size=256, copy_mb=8, repeats=2)
    assert measured.tflops > 0 and measured.bandwidth_gbs > 0


def test_kv_cache_bytes_match_the_published_per_token_caches():
    """One function counts every cache kind; the oracles are the papers' own formulas and figures."""
    # Llama-2 7B: a key and a value of 32 heads x 128 in each of 32 layers, fp16: 512 KiB per token.
    assert kv_cache_bytes(PRESETS["llama2-7b"]) == 2 * 32 * 32 * 128 * 2 == 524_288
    # Mistral 7B v0.1 (Jiang et al. 2023, section 2): 8 KV heads, so 128 KiB per token; with W = 4096 the
    # rolling cache "reduces the cache memory usage by 8x" for a 32k-token sequence.
    mistral = PRESETS["mistral-7b"]
    assert kv_cache_bytes(mistral) == 2 * 32 * 8 * 128 * 2 == 131_072
    full = mistral.replace(sliding_window=None, attention="full")
    assert kv_cache_bytes(full, 32_768) == 8 * kv_cache_bytes(mistral, 32_768)
    # DeepSeek-V3: MLA caches (d_c + d_h^R) * l numbers per token (DeepSeek-V2, Table 1) with d_c = 512,
    # d_h^R = 64, l = 61 (DeepSeek-V3 report, section 4.2): 70,272 bytes in BF16, not 2 * 128 heads' keys.
    assert kv_cache_bytes(PRESETS["deepseek-v3"]) == (512 + 64) * 61 * 2 == 70_272


def test_decode_bytes_read_the_cache_each_model_really_keeps():
    mistral, v3 = PRESETS["mistral-7b"], PRESETS["deepseek-v3"]
    assert decode_bytes(mistral, 32_768) == decode_bytes(mistral, 4096)          # the window caps the cache
    assert decode_bytes(mistral, 4096) - decode_bytes(mistral, 4095) == 131_072
    assert decode_bytes(v3, 1000) - decode_bytes(v3, 999) == 70_272              # one more latent per layer


def test_bad_input():
    llama2 = PRESETS["llama2-7b"]
    with pytest.raises(ValueError, match="seq_len"):
        kv_cache_bytes(llama2, 0)
    with pytest.raises(TypeError, match="seq_len"):            # a count of tokens, not 2.5 tokens
        kv_cache_bytes(llama2, 2.5)
    with pytest.raises(TypeError, match="batch_size"):
        prefill_flops(llama2, 8, batch_size=1.5)
    with pytest.raises(ValueError, match="bytes_per_value"):
        kv_cache_bytes(llama2, 8, bytes_per_value=0)
    assert kv_cache_bytes(llama2, 8, bytes_per_value=0.5) == kv_cache_bytes(llama2, 8, bytes_per_value=2) // 4
    with pytest.raises(TypeError, match="config"):
        kv_cache_bytes({"n_layers": 32}, 1)
    with pytest.raises(TypeError, match="context"):
        flops_per_token(llama2, "1")
    with pytest.raises(ValueError, match="repeats"):
        measure_accelerator("cpu", size=8, copy_mb=1, repeats=0)
