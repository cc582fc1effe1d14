"""The KV cache: in-place writes, crop/reset/capacity, the decode step against a full forward, bad input."""

import numpy as np
import pytest
import torch

from llama_course import LlamaConfig
from llama_course.grade.testing import realistic_weights_
from llama_course.kv_cache import KVCache
from llama_course.model import Llama

CONFIG = LlamaConfig(vocab_size=53, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64)


def tiny(seed=0, device="cpu", dtype=None):
    torch.manual_seed(seed)
    m = Llama(CONFIG, device=device, dtype=dtype).eval()
    realistic_weights_(m, std=0.3)
    return m


def test_the_decode_step_sees_the_whole_cache():
    m = tiny(3)
    cache = KVCache(CONFIG, 1, 16)
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 7]])
    with torch.no_grad():
        m(ids[:, :6], cache=cache)                                 # the 6-token example prompt
        assert cache.length == 6
        step = m(ids[:, 6:], cache=cache)                          # its position is 6
        full = m(ids)
    assert cache.length == 7 and cache.keys[0].shape == (1, 2, 16, 8)
    # the new token attends to all 7 positions, at position 6: exactly the full forward's last logits
    torch.testing.assert_close(step[:, -1], full[:, -1], rtol=1e-5, atol=1e-5)


def test_cache_writes_in_place_crop_reset_capacity():
    cache = KVCache(CONFIG, 1, 4)
    pointer = cache.keys[0].data_ptr()
    k = torch.randn(1, 2, 3, 8)
    cache.update(0, k, k)
    cache.advance()
    assert cache.keys[0].data_ptr() == pointer and torch.equal(cache.keys[0][:, :, :3], k)
    cache.crop(1)
    assert cache.length == 1
    with pytest.raises(ValueError, match="capacity"):
        cache.update(0, torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8))
    cache.reset()
    assert cache.length == 0
    assert cache.nbytes() == 2 * 2 * 1 * 2 * 4 * 8 * 4


def test_cache_dtype_device_and_integer_types():
    model = tiny(4)
    with pytest.raises(TypeError, match="cache holds torch.bfloat16 but the model computes in torch.float32"):
        model(torch.tensor([[1, 2, 3]]), cache=KVCache(CONFIG, 1, 8, dtype=torch.bfloat16))   # the model checks once
    with pytest.raises(TypeError, match="k is torch.float32 but the cache holds torch.bfloat16"):  # update on its own
        KVCache(CONFIG, 1, 8, dtype=torch.bfloat16).update(0, *(torch.zeros(1, 2, 1, 8),) * 2)
    with pytest.raises(ValueError, match="cache must be made for this model and batch"):
        model(torch.tensor([[1, 2, 3], [4, 5, 6]]), cache=KVCache(CONFIG, 1, 8))
    with pytest.raises(ValueError, match="one device"):
        KVCache(CONFIG, 1, 8).update(0, *(torch.empty(1, 2, 1, 8, device="meta"),) * 2)
    cache = KVCache(CONFIG, np.int64(1), np.int32(8))           # NumPy integers are integers
    assert cache.keys[0].shape == (1, 2, 8, 8) and type(cache.max_seq_len) is int
    with pytest.raises(TypeError, match="batch_size must be an int"):
        KVCache(CONFIG, 1.0)
    with pytest.raises(TypeError, match="layer must be an int"):
        cache.update("0", torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8))
