"""What inference costs (Chapter 8): FLOPs, bytes, the KV cache, and the roofline.

    KV cache per token      = 2 (K, V) * n_layers * n_kv_heads * head_dim * bytes_per_value
                              (MLA: (kv_lora_rank + qk_rope_head_dim) per layer; a sliding layer
                              stops growing at its window)
    FLOPs per token         ~ 2 * (parameters used per token, without the embedding lookup)
                              + 4 * n_layers * context * n_heads * head_dim     (q.k and weights.v)
    bytes per decode step   ~ every weight once + the KV cache of every row
    arithmetic intensity    = FLOPs / bytes;  time >= max(FLOPs / peak FLOP/s, bytes / bandwidth)

A decode step multiplies each weight matrix by one vector per row: about 2 FLOPs per weight read,
far below what accelerators can do per byte (hundreds), so decode is bound by memory bandwidth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .checks import check_positive_int, check_positive_number, check_type
from .config import LlamaConfig, count_parameters, is_sliding_layer
from .device import synchronize


def _check_config(config: LlamaConfig, **counts) -> None:
    """TypeError unless ``config`` is a LlamaConfig and every count an int; ValueError unless each is >= 1."""
    check_type("config", config, LlamaConfig)
    for name, value in counts.items():
        check_positive_int(name, value)


def kv_cache_bytes(config: LlamaConfig, seq_len: int = 1,
                   batch_size: int = 1, bytes_per_value: float = 2) -> int:
    """Bytes of the KV cache after ``seq_len`` tokens of ``batch_size``
    sequences.

    Each position leaves a key and a value per KV head in every layer:
    2 * H_kv * d_head numbers. Llama-2 7B in fp16: 2 * 32 * 32 * 128 * 2 =
    524,288 bytes (512 KiB) per token; 2 GiB at 4096. Two Chapter 12 caches
    store less, chosen by one visible ``if`` each: MLA keeps one latent and
    one shared RoPE key per position (DeepSeek-V3: (512 + 64) * 61 * 2 =
    70,272 bytes per token), and a sliding-window layer keeps at most its
    window (Mistral 7B v0.1 stops growing at 4096).
    """
    _check_config(config, seq_len=seq_len, batch_size=batch_size)
    check_positive_number("bytes_per_value", bytes_per_value)
    # a key and a value per KV head
    per_position = 2 * config.n_kv_heads * config.head_dim
    if config.kv_lora_rank is not None:  # MLA (Chapter 12): latent + RoPE key
        per_position = config.kv_lora_rank + config.qk_rope_head_dim
    positions = 0
    for layer in range(config.n_layers):
        if is_sliding_layer(config, layer):  # sliding window (Chapter 12)
            positions += min(seq_len, config.sliding_window)
        else:
            positions += seq_len
    return int(per_position * positions * batch_size * bytes_per_value)


def matmul_params(config: LlamaConfig) -> int:
    """Weights that take part in a matrix product for one token: each block's attention, router
    and the n_experts_per_token experts it uses, and the vocabulary head (the embedding is a row
    lookup, not a product; RMSNorm weights are elementwise)."""
    c = count_parameters(config)
    per_layer = c["attention"] + c["router"] + config.n_experts_per_token * (c["ffn"] // config.n_experts)
    return config.n_layers * per_layer + config.vocab_size * config.d_model


def flops_per_token(config: LlamaConfig, context: int) -> int:
    """FLOPs to process one token that attends to ``context`` positions (itself included):
    2 per weight for the matrix products, plus q.k and weights.v over the context."""
    _check_config(config, context=context)
    attention = 2 * 2 * config.n_layers * context * config.n_heads * config.head_dim
    return 2 * matmul_params(config) + attention


def prefill_flops(config: LlamaConfig, prompt_len: int, batch_size: int = 1) -> int:
    """FLOPs to prefill a prompt: token t attends to t + 1 positions."""
    _check_config(config, prompt_len=prompt_len, batch_size=batch_size)
    weights = 2 * matmul_params(config) * prompt_len
    attention = 2 * 2 * config.n_layers * config.n_heads * config.head_dim * prompt_len * (prompt_len + 1) // 2
    return batch_size * (weights + attention)


def decode_bytes(config: LlamaConfig, context: int, batch_size: int = 1,
                 bytes_per_value: float = 2) -> int:
    """Bytes read by one decode step: every weight the step uses, once
    (shared by the batch), one embedding row per sequence, and each row's
    KV cache of ``context`` positions.

    Llama-2 7B in fp16 at short context: about 13.2 GB (the 13.5 GB of all
    6.74B parameters, less the embedding table, of which a step reads one
    row)."""
    c = count_parameters(config)
    weights = (matmul_params(config) + config.n_layers * c["norms"]
               + c["final_norm"] + batch_size * config.d_model)
    cache = kv_cache_bytes(config, context, batch_size, bytes_per_value)
    return int(weights * bytes_per_value) + cache


def arithmetic_intensity(config: LlamaConfig, context: int, batch_size: int = 1, bytes_per_value: float = 2) -> float:
    """FLOPs per byte of one decode step (batch_size tokens, one per sequence)."""
    return batch_size * flops_per_token(config, context) / decode_bytes(config, context, batch_size, bytes_per_value)


@dataclass(frozen=True)
class Accelerator:
    """Peak dense 16-bit tensor throughput and memory bandwidth, from the vendors' data sheets."""

    name: str
    tflops: float          # dense BF16/FP16 tensor-core TFLOP/s (no sparsity)
    bandwidth_gbs: float   # GB/s of device memory

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound (the roofline's ridge point)."""
        return self.tflops * 1e12 / (self.bandwidth_gbs * 1e9)


ACCELERATORS = [
    Accelerator("NVIDIA A100 80GB SXM", 312.0, 2039.0),
    Accelerator("NVIDIA H100 SXM", 989.0, 3350.0),
    Accelerator("NVIDIA H200 SXM", 989.0, 4800.0),
    Accelerator("NVIDIA RTX 4090", 165.2, 1008.0),  # FP16 tensor with FP16 accumulate; half with FP32 accumulate
]


def roofline_time(flops: float, nbytes: float, accelerator: Accelerator) -> float:
    """Lower bound on seconds: the slower of computing and moving the data, at peak rates."""
    return max(flops / (accelerator.tflops * 1e12), nbytes / (accelerator.bandwidth_gbs * 1e9))


def best_time(fn, device, repeats: int = 5) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``fn`` (after one warm-up call)."""
    check_positive_int("repeats", repeats)
    fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


def measure_bandwidth(device=None, copy_mb: int = 256, repeats: int = 5) -> float:
    """GB/s of a large copy (``copy_mb`` MB read + the same written, as STREAM counts it), best of
    ``repeats``."""
    check_positive_int("copy_mb", copy_mb)
    device = torch.device(device or "cpu")
    # The source must be written first: untouched pages of torch.empty all map to the operating
    # system's one zero page, which is read from cache and would inflate the bandwidth (~2x here).
    src = torch.ones(copy_mb * 2**20 // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / best_time(lambda: dst.copy_(src), device, repeats) / 1e9


def measure_accelerator(device=None, size: int = 2048, copy_mb: int = 256, repeats: int = 5) -> Accelerator:
    """Measure this machine: matmul TFLOP/s (size x size, float32 on CPU, bf16 elsewhere) and copy
    bandwidth (:func:`measure_bandwidth`). Best of ``repeats``."""
    check_positive_int("size", size)
    device = torch.device(device or "cpu")
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    tflops = 2 * size ** 3 / best_time(lambda: a @ b, device, repeats) / 1e12
    bandwidth = measure_bandwidth(device, copy_mb, repeats)
    return Accelerator(f"this machine ({device.type}, {str(dtype).removeprefix('torch.')})", tflops, bandwidth)
