"""Device selection, seeding, and the rule that no function creates a tensor off its inputs' device."""

import random

import pytest
import torch

import llama_course
from llama_course import embed, get_device, next_token_loss, seed_everything
from llama_course.attention import causal_mask, padding_mask, scaled_dot_product_attention, softmax
from llama_course.ffn import swiglu
from llama_course.norm import layer_norm, rms_norm
from llama_course.rope import RotaryEmbedding, apply_rope


def test_get_device_prefers_accelerators(monkeypatch):
    monkeypatch.delenv("LLAMA_COURSE_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert get_device().type == expected


def test_get_device_environment_override(monkeypatch):
    monkeypatch.setenv("LLAMA_COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    monkeypatch.setenv("LLAMA_COURSE_DEVICE", "not-a-device")
    with pytest.raises(ValueError, match="LLAMA_COURSE_DEVICE"):
        get_device()
    if not torch.cuda.is_available():
        monkeypatch.setenv("LLAMA_COURSE_DEVICE", "cuda")
        with pytest.raises(ValueError, match="CUDA is not available"):
            get_device()


def test_seed_everything_reproduces_every_generator():
    def draw():
        return random.random(), torch.rand(3).tolist()

    seed_everything(123)
    first = draw()
    generator = seed_everything(123)
    assert draw() == first
    assert generator.initial_seed() == 123
    with pytest.raises(TypeError, match="seed"):
        seed_everything(1.5)
    with pytest.raises(ValueError, match="seed"):
        seed_everything(-1)


# Every reference function that takes tensors, called on `meta` inputs: it must return meta
# tensors. A function that creates a tensor without device= would put it on the CPU and fail
# (meta and cpu tensors do not mix). Later chapters add their functions here.
META_CASES = {
    "next_token_loss": lambda: next_token_loss(torch.empty(2, 5, 11, device="meta"),
                                               torch.empty(2, 5, dtype=torch.long, device="meta")),
    "embed": lambda: embed(torch.empty(1, 6, dtype=torch.long, device="meta"),
                           torch.empty(32000, 4096, device="meta")),  # LLaMA-2 7B's table, no memory
    "rms_norm": lambda: rms_norm(torch.empty(2, 3, 8, device="meta", dtype=torch.bfloat16),
                                 torch.empty(8, device="meta", dtype=torch.bfloat16)),
    "layer_norm": lambda: layer_norm(torch.empty(2, 8, device="meta"), torch.empty(8, device="meta"),
                                     torch.empty(8, device="meta")),
    "softmax": lambda: softmax(torch.empty(2, 5, device="meta", dtype=torch.float16)),
    "causal_mask": lambda: causal_mask(3, 5, device="meta"),
    "padding_mask": lambda: padding_mask(torch.empty(2, 5, dtype=torch.long, device="meta")),
    "scaled_dot_product_attention": lambda: scaled_dot_product_attention(
        *(torch.empty(2, 4, 5, 8, device="meta") for _ in range(3)), causal_mask(5, device="meta")),
    "scaled_dot_product_attention_sdpa": lambda: scaled_dot_product_attention(
        *(torch.empty(2, 4, 5, 8, device="meta") for _ in range(3)), causal_mask(5, device="meta"), backend="sdpa"),
    "apply_rope": lambda: apply_rope(torch.empty(2, 4, 5, 8, device="meta", dtype=torch.bfloat16),
                                     torch.empty(2, 5, dtype=torch.long, device="meta"), layout="half"),
    "RotaryEmbedding": lambda: RotaryEmbedding(8, 16, device="meta")(
        torch.empty(1, 2, 5, 8, device="meta"), torch.empty(1, 2, 5, 8, device="meta"),
        torch.empty(5, dtype=torch.long, device="meta")),
    "swiglu": lambda: swiglu(torch.empty(2, 3, 8, device="meta"), torch.empty(20, 8, device="meta"),
                             torch.empty(20, 8, device="meta"), torch.empty(8, 20, device="meta")),
}


@pytest.mark.parametrize("name", sorted(META_CASES))
def test_reference_functions_stay_on_the_meta_device(name):
    out = META_CASES[name]()
    tensors = out if isinstance(out, (tuple, list)) else [out]
    assert all(t.device.type == "meta" for t in tensors)


def test_meta_device_catches_a_stray_cpu_tensor():
    """The meta check above can fail: a function that forgets device= is caught."""
    def careless(x):
        return x + torch.ones(x.shape[-1])  # created on the CPU

    with pytest.raises((RuntimeError, NotImplementedError), match="device"):
        careless(torch.empty(2, 3, device="meta"))


def test_public_api_is_exported():
    for name in ("get_device", "seed_everything", "LlamaConfig", "PRESETS", "ffn_hidden_dim",
                 "count_parameters", "next_token_loss", "embed", "__version__"):
        assert hasattr(llama_course, name), name


def test_embed_on_every_device(device):
    weight = torch.randn(10, 4, device=device, dtype=torch.float16 if device.type != "cpu" else torch.bfloat16)
    out = embed(torch.tensor([[3, 9]], device=device), weight)
    assert out.device.type == device.type and out.dtype == weight.dtype and out.shape == (1, 2, 4)
    with pytest.raises(ValueError, match="token_ids"):
        embed(torch.tensor([10], device=device), weight)
    with pytest.raises(TypeError, match="token_ids"):
        embed(torch.tensor([1.0], device=device), weight)


def test_device_helpers_live_in_one_module():
    from llama_course import device

    assert device.available_devices()[0] == "cpu"
    assert get_device().type in device.available_devices()
    device.synchronize("cpu")                                  # nothing queued on a CPU: returns at once
    assert llama_course.synchronize is device.synchronize and llama_course.get_device is device.get_device


def test_embed_rejects_mixed_devices():
    with pytest.raises(ValueError, match="one device"):
        embed(torch.tensor([1, 2]), torch.empty(10, 4, device="meta"))
    with pytest.raises(ValueError, match="one device"):
        embed(torch.tensor([1, 2], device="meta"), torch.empty(10, 4))
