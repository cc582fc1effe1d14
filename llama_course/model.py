"""The LLaMA model (Chapter 7): embedding -> L blocks -> final RMSNorm -> vocabulary head.

    h = x + Attention(RMSNorm(x))          Pre-Norm residual around attention (RoPE inside)
    y = h + SwiGLU(RMSNorm(h))             Pre-Norm residual around the FFN

``Attention`` is Chapter 4's MultiHeadAttention with the later chapters' steps added, each one
line of its forward: RoPE (Chapter 5), the KV cache (Chapter 8), QK-norm and shared key/value
heads (Chapter 9), a sliding window (Chapter 12).

What each block holds is the config's to say (``config.attention_kind``, ``config.ffn_kind``);
``LlamaBlock`` chooses with one visible ``if`` each: LLaMA's attention (with or without a window)
or MLA, and SwiGLU, MoE or DeepSeekMoE.

Parameter names follow Hugging Face's LlamaForCausalLM without its "model." prefix, so a
transformers checkpoint loads by name (checkpoint.py: load_hf, load_meta). No biases anywhere.

Default initialisation (for training from scratch, Chapter 11): every Linear and the embedding
~ N(0, 0.02^2), as Hugging Face's initializer_range; every RMSNorm weight = 1.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .attention import (
    BACKENDS,
    MultiHeadAttention,
    causal_mask,
    check_attention_mask,
    check_attention_mask_values,
    merge_heads,
    padding_mask,
    split_heads,
)
from .checks import (
    check_bool,
    check_one_of,
    check_positive_int,
    check_tensor,
    check_token_ids,
    check_type,
)
from .config import LlamaConfig
from .deepseek_moe import DeepSeekMoE
from .ffn import SwiGLU
from .gqa import gqa_attention
from .kv_cache import KVCache
from .linear import Linear
from .mla import MultiHeadLatentAttention
from .moe import MoE
from .norm import RMSNorm
from .rope import RotaryEmbedding, check_positions
from .sliding_window import window_mask

INIT_STD = 0.02

# What a position hook receives as positions: (T,) or (B, T) integers, or RoPE's (cos, sin) for them.
Positions = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
# A position hook: (q, k, positions) -> (q, k). Chapter 4 has none; Chapter 5 puts RoPE here.
PositionHook = Callable[[torch.Tensor, torch.Tensor, Positions], tuple[torch.Tensor, torch.Tensor]]


def causal_inputs(seq: int, past: int = 0, attention_mask: torch.Tensor | None = None, device=None,
                  mask: torch.Tensor | None = None,
                  positions: Positions | None = None) -> tuple[torch.Tensor | None, Positions]:
    """The attention mask and the positions of ``seq`` new tokens after ``past`` cached ones; a
    ``mask`` or ``positions`` given is kept. The one place where these defaults are decided, for
    Llama.forward and for an Attention layer called on its own.

        mask       causal (T, T_kv), combined with the padding of ``attention_mask`` (B, 1, T, T_kv);
                   None for one new token without padding: it may see every key (and torch's fused
                   kernels are much faster without a mask)
        positions  past .. past + T - 1, (T,); with an ``attention_mask`` (B, T_kv) of 0/1 each row
                   counts from its first real token, (B, T)
    """
    if mask is None and (seq > 1 or attention_mask is not None):
        mask = causal_mask(seq, past + seq, device=device)                                # (T, T_kv)
        if attention_mask is not None:
            mask = mask & padding_mask(attention_mask)                                   # (B, 1, T, T_kv)
    if positions is None and attention_mask is not None:
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]        # (B, T)
    elif positions is None:
        positions = torch.arange(past, past + seq, device=device)                        # (T,)
    return mask, positions


class Attention(MultiHeadAttention):
    """LLaMA's attention: Chapter 4's multi-head attention (q_proj, k_proj, v_proj, o_proj, causal
    mask) with the later chapters' steps, each one line of ``forward``:

        q_norm, k_norm   QK-norm (Qwen3, Chapter 9): RMSNorm over each head's queries and keys
        position_hook    RoPE (Chapter 5): rotates q and k by their positions, never v
        cache            the KV cache (Chapter 8): this call's k, v appended, all of them read back
        gqa_attention    shared key/value heads (Chapter 9): H_kv = config.n_kv_heads <= H
        window           sliding-window attention (Chapter 12): each query sees its last W keys
    """

    def __init__(self, config: LlamaConfig, backend: str = "explicit",
                 position_hook: PositionHook | None = None, device=None,
                 dtype=None, window: int | None = None):
        super().__init__(config, backend, device=device, dtype=dtype)
        self.position_hook = position_hook
        # Ch. 12: the window W, or None
        self.window = (None if window is None
                       else check_positive_int("window", window))
        if config.qk_norm:  # Qwen3: RMSNorm over each head's q and k, before RoPE
            hd, eps = config.head_dim, config.norm_eps
            self.q_norm = RMSNorm(hd, eps, device=device, dtype=dtype)
            self.k_norm = RMSNorm(hd, eps, device=device, dtype=dtype)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                positions: Positions | None = None,
                cache: KVCache | None = None,
                layer_idx: int = 0) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d).

        ``mask``: boolean, broadcastable to (B, H, T, T_kv); None means
        causal. ``positions`` (T,) or (B, T) for the position hook; None
        means cache.length .. cache.length + T - 1. ``cache``: a KVCache;
        this call's keys and values are appended to its layer
        ``layer_idx`` and the queries attend to everything cached. With a
        ``window``, ``mask`` (if given) covers sequence indices
        0 .. past + T - 1.
        """
        seq, past = x.shape[1], cache.length if cache is not None else 0
        mask, positions = causal_inputs(seq, past, device=x.device,
                                        mask=mask, positions=positions)
        q, k, v = self.project(x)  # (B, H, T, hd), (B, H_kv, T, hd) twice
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # Ch. 9: per head, over hd
        if self.position_hook is not None:
            q, k = self.position_hook(q, k, positions)  # Ch. 5: q, k, not v
        if cache is not None:
            k, v = cache.update(layer_idx, k, v)  # Ch. 8: (B, H_kv, T_kv, hd)
        if self.window is not None:    # Ch. 12: the last W keys, (.., T, T_kv)
            end, kv_len = past + seq, k.shape[-2]
            mask = window_mask(mask, self.window, seq, kv_len, end, x.device)
        out = gqa_attention(q, k, v, mask, self.backend)
        #                              Ch. 9: (B, H, T, hd), KV heads shared
        return self.o_proj(merge_heads(out))               # (B, T, d)

    def project(self, x: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values in heads of head_dim: (B, H, T, hd),
        (B, H_kv, T, hd) twice. H and H_kv are read from the projections'
        widths, so a tensor-parallel rank (Chapter 13), whose q_proj holds
        H/N heads' rows, splits its own H/N heads."""
        hd = self.head_dim
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        # q (B, T, H*hd), k and v (B, T, H_kv*hd)
        return tuple(split_heads(t, t.shape[-1] // hd) for t in (q, k, v))

    def extra_repr(self) -> str:
        return "" if self.window is None else f"window={self.window}"


class LlamaBlock(nn.Module):
    """One Transformer block: two Pre-Norm residual steps. The config says
    which attention and which FFN block ``layer_idx`` holds; each choice is
    one ``if`` here."""

    def __init__(self, config: LlamaConfig, rotary: RotaryEmbedding | None,
                 device=None, dtype=None, layer_idx: int = 0):
        super().__init__()
        c, kw = config, dict(device=device, dtype=dtype)
        self.input_layernorm = RMSNorm(c.d_model, c.norm_eps, **kw)
        attention = c.attention_kind(layer_idx)  # full, sliding or latent
        if attention == "latent":                # MLA (Chapter 12, DeepSeek)
            self.self_attn = MultiHeadLatentAttention(
                c, position_hook=rotary, **kw)
        else:                   # LLaMA's, GQA (Ch. 9), a window (Ch. 12)
            window = c.sliding_window if attention == "sliding" else None
            self.self_attn = Attention(c, position_hook=rotary,
                                       window=window, **kw)
        self.post_attention_layernorm = RMSNorm(c.d_model, c.norm_eps, **kw)
        ffn = c.ffn_kind(layer_idx)    # "dense", "moe" or "deepseek_moe"
        if ffn == "dense":             # SwiGLU (Chapter 6)
            self.mlp = SwiGLU(c.d_model, c.d_ff, **kw)
        elif ffn == "moe":             # Mixtral, Qwen3-MoE (Chapter 10)
            self.mlp = MoE(c.d_model, c.moe_d_ff or c.d_ff, c.n_experts,
                           c.n_experts_per_token,
                           normalize_topk=c.moe_norm_topk, **kw)
        else:                          # DeepSeekMoE (Chapter 12)
            self.mlp = DeepSeekMoE(c, **kw)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                positions: Positions | None = None,
                cache: KVCache | None = None,
                layer_idx: int = 0) -> torch.Tensor:
        attn_in = self.input_layernorm(x)
        h = x + self.self_attn(attn_in, mask, positions, cache, layer_idx)
        #                                                         (B, T, d)
        return h + self.mlp(self.post_attention_layernorm(h))   # (B, T, d)


class Llama(nn.Module):
    """A LLaMA-family decoder-only language model."""

    def __init__(self, config: LlamaConfig, device=None, dtype=None):
        super().__init__()
        self.config = check_type("config", config, LlamaConfig)
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
        check_one_of("backend", backend, BACKENDS)
        for layer in self.layers:
            layer.self_attn.backend = backend
        return self

    def reset_parameters(self) -> None:
        """N(0, 0.02^2) for the embedding and every Linear;
        RMSNorm weights = 1."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)

    def forward(self, input_ids: torch.Tensor,
                positions: torch.Tensor | None = None,
                cache: KVCache | None = None,
                attention_mask: torch.Tensor | None = None, *,
                check_values: bool = True) -> torch.Tensor:
        """input_ids (B, T) -> logits (B, T, V).

        positions       (T,) or (B, T); default: from attention_mask when
                        given (each row's first real token is position 0),
                        else cache.length .. cache.length + T - 1
        cache           a KVCache: this call's keys/values are appended,
                        queries see all of them
        attention_mask  (B, T_past + T) of 0/1, Hugging Face style
                        (1 = real token, 0 = padding)
        check_values    read the inputs to check their values too: ids in
                        the vocabulary, positions in range, a mask of 0/1
                        (on a GPU, a wait for a device-to-host copy).
                        Shapes, dtypes and devices are checked always.
                        generate passes False for the tokens it sampled
                        itself (Chapter 8).
        """
        self._check_inputs(input_ids, positions, cache, attention_mask,
                           check_values)
        past = cache.length if cache is not None else 0
        mask, positions = causal_inputs(input_ids.shape[1], past,
                                        attention_mask, input_ids.device,
                                        positions=positions)
        #                              (B, 1, T, T_kv), (B, T)
        angles = self.rotary.angles(positions)
        #                  RoPE's cos, sin (..., T, hd/2), once for all layers
        x = self.embed_tokens(input_ids)                      # (B, T, d)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, angles, cache, i)              # (B, T, d)
        if cache is not None:
            cache.advance()
        return self.lm_head(self.norm(x))                     # (B, T, V)

    def _check_inputs(self, input_ids, positions, cache, attention_mask, check_values) -> None:
        values = check_bool("check_values", check_values)     # False: metadata only (checks.py)
        check_token_ids("input_ids", input_ids, self.config.vocab_size, like=self.embed_tokens.weight,
                        like_name="the model's weights", values=values)
        if input_ids.dim() != 2 or 0 in input_ids.shape:
            raise ValueError(f"input_ids must be (batch, seq) with batch, seq >= 1, got shape {tuple(input_ids.shape)}")
        if cache is not None:
            self._check_cache(cache, input_ids)
        past = cache.length if cache is not None else 0
        end = past + input_ids.shape[1]
        if positions is not None:
            check_tensor("positions", positions, integer=True, like=input_ids, like_name="input_ids")
            if values:
                check_positions(positions, self.config.max_seq_len)
            if positions.shape[-1] != input_ids.shape[1] or positions.shape[:-1] not in ((), input_ids.shape[:1]):
                raise ValueError(f"positions must be (seq,) or (batch, seq) for input_ids {tuple(input_ids.shape)}, "
                                 f"got shape {tuple(positions.shape)}")
        elif end > self.config.max_seq_len:   # the default positions: known here without reading a tensor
            raise ValueError(f"positions must be in [0, {self.config.max_seq_len}) (max_seq_len), got up to {end - 1}")
        if attention_mask is not None:
            check_attention_mask(attention_mask)                  # (B, T) of integers or booleans
            if values:
                check_attention_mask_values(attention_mask)       # ... each 0 or 1
            expected = (input_ids.shape[0], end)
            if tuple(attention_mask.shape) != expected:
                raise ValueError(f"attention_mask must be (batch, past + new) = {expected}, "
                                 f"got {tuple(attention_mask.shape)}")

    def _check_cache(self, cache, input_ids) -> None:
        """A KVCache is checked against this model and batch here, with a message that says how to
        make the right one; its update checks each layer's shapes as well. Any object with
        ``length``, ``update`` and ``advance`` is accepted as a cache (a reader's own, in the
        exercises); it checks for itself."""
        if not all(hasattr(cache, name) for name in ("length", "update", "advance")):
            raise TypeError(f"cache must be a KVCache (length, update, advance), got {type(cache).__name__}")
        if not isinstance(cache, KVCache):
            return
        if cache.n_layers != self.config.n_layers or cache.batch_size != input_ids.shape[0]:
            raise ValueError(f"cache must be made for this model and batch ({self.config.n_layers} layers, batch "
                             f"{input_ids.shape[0]}), got {cache.n_layers} layers, batch {cache.batch_size}")
        buffer = cache.keys[0]
        if buffer.dtype != self.embed_tokens.weight.dtype:
            raise TypeError(f"cache holds {buffer.dtype} but the model computes in {self.embed_tokens.weight.dtype}: "
                            f"make the cache with the model's dtype")
        check_tensor("the cache", buffer, like=input_ids, like_name="input_ids")
        cache.check_room(input_ids.shape[1])
