"""The LLaMA model (Chapter 7): embedding -> L blocks -> final RMSNorm -> vocabulary head.

    h = x + Attention(RMSNorm(x))          Pre-Norm residual around attention (RoPE inside)
    y = h + SwiGLU(RMSNorm(h))             Pre-Norm residual around the FFN

Parameter names follow Hugging Face's LlamaForCausalLM without its "model." prefix, so a
transformers checkpoint loads by name (checkpoint.py). No biases anywhere.

Default initialisation (for training from scratch, Chapter 11): every Linear and the embedding
~ N(0, 0.02^2), as Hugging Face's initializer_range; every RMSNorm weight = 1.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import _check_backend, causal_mask, padding_mask
from .config import LlamaConfig
from .embedding import first_out_of_range
from .linear import Linear
from .moe import MoE
from .norm import RMSNorm
from .rope import RotaryEmbedding
from .variants import make_attention, make_ffn

INIT_STD = 0.02


class LlamaBlock(nn.Module):
    """One Transformer block: two Pre-Norm residual steps."""

    def __init__(self, config: LlamaConfig, rotary: RotaryEmbedding | None, device=None, dtype=None,
                 layer_idx: int = 0):
        super().__init__()
        self.input_layernorm = RMSNorm(config.d_model, config.norm_eps, device=device, dtype=dtype)
        # Attention (GQA, Ch. 9), or Ch. 12's sliding-window / latent attention; SwiGLU, MoE (Ch. 10)
        # or DeepSeekMoE: variants.py picks per layer
        self.self_attn = make_attention(config, layer_idx, rotary, device=device, dtype=dtype)
        self.post_attention_layernorm = RMSNorm(config.d_model, config.norm_eps, device=device, dtype=dtype)
        self.mlp = make_ffn(config, layer_idx, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                cache=None, layer_idx: int = 0) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), mask, positions, cache, layer_idx)  # (B, T, d)
        return h + self.mlp(self.post_attention_layernorm(h))                                # (B, T, d)


class Llama(nn.Module):
    """A LLaMA-family decoder-only language model."""

    def __init__(self, config: LlamaConfig, device=None, dtype=None):
        super().__init__()
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, device=device, dtype=dtype)
        self.rotary = self._make_rotary(device)
        self.layers = nn.ModuleList(LlamaBlock(config, self.rotary, device, dtype, i) for i in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps, device=device, dtype=dtype)
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False, device=device, dtype=dtype)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight   # one matrix, used twice
        self.reset_parameters()

    def _make_rotary(self, device) -> RotaryEmbedding:
        c = self.config
        return RotaryEmbedding(c.head_dim, c.max_seq_len, c.rope_theta, c.rope_layout, c.rope_scaling, device=device)

    def set_device_of_rotary(self, device) -> None:
        """Rebuild the RoPE tables on ``device`` (after loading weights onto a model made on meta)."""
        self.rotary = self._make_rotary(device)
        for layer in self.layers:
            layer.self_attn.position_hook = self.rotary

    def router_logits(self) -> tuple[torch.Tensor, ...]:
        """Each MoE layer's router logits (N, E) from the last forward (empty for a dense model),
        for load_balancing_loss and router_z_loss."""
        return tuple(layer.mlp.router_logits for layer in self.layers if isinstance(layer.mlp, MoE))

    def set_attention_backend(self, backend: str) -> Llama:
        """"explicit" (every step spelled out, the default) or "sdpa" (torch's fused kernels: the
        choice for speed, especially on GPUs). The results agree up to rounding."""
        _check_backend(backend)
        for layer in self.layers:
            layer.self_attn.backend = backend
        return self

    def reset_parameters(self) -> None:
        """N(0, 0.02^2) for the embedding and every Linear; RMSNorm weights = 1."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None, cache=None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, T) -> logits (B, T, V).

        positions      (T,) or (B, T); default: from attention_mask when given (each row's first
                       real token is position 0), else cache.length .. cache.length + T - 1
        cache          a KVCache: this call's keys/values are appended, queries see all of them
        attention_mask (B, T_past + T) of 0/1, Hugging Face style (1 = real token, 0 = padding)
        """
        self._check_ids(input_ids)
        batch, seq = input_ids.shape
        past = cache.length if cache is not None else 0
        kv_len = past + seq
        # one new token may see every cached one: no mask (fused kernels are much faster without)
        mask = None
        if seq > 1 or attention_mask is not None:
            mask = causal_mask(seq, kv_len, device=input_ids.device)                   # (T, T_kv)
        if attention_mask is not None:
            if attention_mask.shape != (batch, kv_len):
                raise ValueError(f"attention_mask must be (batch, past + new) = {(batch, kv_len)}, "
                                 f"got {tuple(attention_mask.shape)}")
            mask = mask & padding_mask(attention_mask)                                 # (B, 1, T, T_kv)
            if positions is None:
                positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]  # (B, T)
        if positions is None:
            positions = torch.arange(past, kv_len, device=input_ids.device)            # (T,)
        x = self.embed_tokens(input_ids)                                               # (B, T, d)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, positions, cache, i)                                    # (B, T, d)
        if cache is not None:
            cache.advance()
        return self.lm_head(self.norm(x))                                              # (B, T, V)

    def _check_ids(self, input_ids) -> None:
        if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            raise TypeError(f"input_ids must be an integer tensor, got "
                            f"{getattr(input_ids, 'dtype', type(input_ids).__name__)}")
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError(f"input_ids must be (batch, seq) with seq >= 1, got shape {tuple(input_ids.shape)}")
        bad = first_out_of_range(input_ids, self.config.vocab_size)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size})")

    @classmethod
    def from_hf(cls, path, dtype: torch.dtype | None = None, device=None) -> Llama:
        """Load a transformers ``save_pretrained`` directory (Llama, Qwen3, Mixtral). See checkpoint.py."""
        from .checkpoint import load_hf
        return load_hf(path, dtype=dtype, device=device)

    @classmethod
    def from_meta(cls, path, dtype: torch.dtype | None = None, device=None) -> Llama:
        """Load Meta's original release format (consolidated.*.pth + params.json). See checkpoint.py."""
        from .checkpoint import load_meta
        return load_meta(path, dtype=dtype, device=device)
