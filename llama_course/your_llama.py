"""Your LLaMA (Chapter 14, the capstone): a model assembled from YOUR exercise files and torch alone.

    pieces = load_pieces("exercises/")          # your functions, one per piece, with where they live
    model = YourLlama(config, pieces)            # parameters in Hugging Face's names
    logits = model(ids)                          # your llama_forward (your block, norm, RoPE, ...)
    logits = model(ids, cache=pieces.KVCache(config, 1, 64))   # prefill/decode with your KV cache

Each piece is a set of functions from one of your files:

    tokenizer   ch02 count_pairs, merge_pair, train_bpe, encode, decode
    embedding   ch02 embed                     loss       ch02 next_token_loss
    RMSNorm     ch03 rms_norm                  attention  ch04 softmax, causal_mask, scaled_dot_product_attention
    RoPE        ch05 rope_inv_freq, apply_rope SwiGLU     ch06 silu, swiglu
    block       ch07 llama_block               model      ch07 llama_forward
    KV cache    ch08 KVCache, decode_step, greedy_generate
    sampling    ch08 top_p_filter              GQA        ch09 repeat_kv, gqa_attention

The exercise files import the package's versions of earlier pieces "so that the file works on its
own". Here every such name in every loaded file is re-pointed at the piece chosen for it (yours),
so your llama_block calls your rms_norm, your apply_rope turns by angles made from your
rope_inv_freq, and so on: cos and sin of m w_k, with w_k = rope_inv_freq(d, base)[k].

Two paths through the same weights:
    full     logits = llama_forward(ids, params, config)                      (Chapter 7, yours)
    cached   per layer: n = RMSNorm(x); q, k = RoPE(W_Q n), RoPE(W_K n) at positions L .. L+T-1;
             k, v = cache.update(layer, k, W_V n); h = x + W_O gqa_attention(q, k, v, causal(T, L+T));
             x = h + SwiGLU(RMSNorm(h)); after the last layer cache.advance()   (Chapters 8 and 9)
Sampling: p = softmax(top_p_filter(logits / temperature)), one draw with a seeded generator.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .checks import (
    check_int,
    check_number,
    check_positive_number,
    check_tensor,
    check_token_ids,
    check_type,
)
from .config import LlamaConfig

# piece: (file stem, function names, what it is)
PIECES = {
    "tokenizer": ("ch02_tokens", ("count_pairs", "merge_pair", "train_bpe", "encode", "decode")),
    "embedding": ("ch02_tokens", ("embed",)),
    "loss": ("ch02_tokens", ("next_token_loss",)),
    "RMSNorm": ("ch03_norm", ("rms_norm",)),
    "attention": ("ch04_attention", ("softmax", "causal_mask", "scaled_dot_product_attention")),
    "RoPE": ("ch05_rope", ("rope_inv_freq", "apply_rope")),
    "SwiGLU": ("ch06_ffn", ("silu", "swiglu")),
    "block": ("ch07_model", ("llama_block",)),
    "model": ("ch07_model", ("llama_forward",)),
    "KV cache": ("ch08_decode", ("KVCache", "decode_step", "greedy_generate")),
    "sampling": ("ch08_decode", ("top_p_filter",)),
    "GQA": ("ch09_gqa", ("repeat_kv", "gqa_attention")),
}
NAMES = {name: piece for piece, (_, names) in PIECES.items() for name in names}
REFUSED = "NOT YOURS"   # how a piece that is not the student's own function is reported
# LlamaConfig fields for what these pieces do not model (QK-norm, long-context RoPE, MoE, MLA, sliding windows)
UNMODELLED = ("qk_norm", "rope_scaling", "n_experts", "single_expert_moe", "n_shared_experts", "moe_d_ff",
              "sliding_window", "layer_types", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
              "qk_rope_head_dim", "v_head_dim")


@dataclass
class Pieces:
    """The functions that make a model, each with the file it came from."""

    functions: dict = field(default_factory=dict)   # name -> function or class
    source: dict = field(default_factory=dict)      # name -> "exercises/ch03_norm.py" (or a reference's)
    missing: dict = field(default_factory=dict)     # piece -> why it could not be loaded
    modules: list = field(default_factory=list)     # the loaded modules whose names were re-pointed

    def __getattr__(self, name):
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        if name in NAMES:
            piece = NAMES[name]
            raise LookupError(f"the {piece} piece is missing: {self.missing.get(piece, name + ' not loaded')}")
        raise AttributeError(name)

    def refuse(self, piece: str, why: str) -> None:
        """Take ``piece`` out (it is not the student's own work): what uses it from now on fails with ``why``."""
        self.missing[piece] = f"{REFUSED}: {why}"
        for name in PIECES[piece][1]:
            self.functions.pop(name, None)
        wire(self)

    def served_by(self) -> dict[str, str]:
        """{piece: "file: name, name"} for the pieces loaded (each defined in that file)."""
        out = {}
        for piece, (_, names) in PIECES.items():
            if piece in self.missing:
                why = self.missing[piece]
                out[piece] = why if why.startswith(REFUSED) else f"MISSING: {why}"
            else:
                out[piece] = f"{self.source[names[0]]}: {', '.join(names)}"
        return out


def load_module(path: Path) -> types.ModuleType:
    """A fresh copy of the module in ``path`` (its folder on sys.path while it loads)."""
    spec = importlib.util.spec_from_file_location(f"_your_llama_{path.parent.name}_{path.stem}_{id(path)}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def load_pieces(folder, label: str | None = None, refused: dict | None = None) -> Pieces:
    """Every piece from the chNN_*.py files in ``folder``, wired to each other (see the module's
    docstring). A piece whose file or function is missing, whose file fails to import, or whose
    function is not defined in that file (the package's, imported under the piece's name) is
    recorded in ``.missing`` (never replaced by the package's). ``refused``: {file stem: why}
    for files not to import at all (the grader's rules refused them)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder must be a folder of chNN_*.py files, got {folder}")
    label = label or folder.name
    folder = folder.resolve()  # absolute file names in the code: the capstone's call watcher reads them
    pieces, loaded, refused = Pieces(), {}, refused or {}
    for piece, (stem, names) in PIECES.items():
        path = folder / f"{stem}.py"
        if stem not in loaded:
            loaded[stem] = f"{REFUSED}: {refused[stem]}" if stem in refused else _load(path)
        module = loaded[stem]
        if isinstance(module, str):
            pieces.missing[piece] = module
            continue
        absent = [n for n in names if not hasattr(module, n)]
        if absent:
            pieces.missing[piece] = f"{label}/{stem}.py has no {', '.join(absent)}"
            continue
        foreign = [f"{n} is {_where(getattr(module, n))}" for n in names if not _defined_in(getattr(module, n), path)]
        if foreign:
            pieces.missing[piece] = f"{REFUSED}: in {label}/{stem}.py, {'; '.join(foreign)}"
            continue
        for name in names:
            pieces.functions[name] = getattr(module, name)
            pieces.source[name] = f"{label}/{stem}.py"
    pieces.modules = [m for m in loaded.values() if not isinstance(m, str)]
    return wire(pieces)


def _defined_in(value, path: Path) -> bool:
    """Whether the function or class ``value`` is written in the file ``path``."""
    code = getattr(value, "__code__", None)
    if code is None and isinstance(value, type):
        methods = [m for m in vars(value).values() if hasattr(m, "__code__")]
        code = methods[0].__code__ if methods else None
    return code is not None and Path(code.co_filename).resolve() == path.resolve()


def _where(value) -> str:
    return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__name__)}"


def _load(path: Path):
    if not path.is_file():
        return f"{path.parent.name}/{path.name} does not exist"
    try:
        return load_module(path)
    except Exception as error:  # the student's file: any error is theirs to see
        return f"importing {path.parent.name}/{path.name} failed: {type(error).__name__}: {error}"


def mix(base: Pieces, other: Pieces, take: tuple[str, ...]) -> Pieces:
    """``base`` with the pieces named in ``take`` taken from ``other`` (fresh module copies are not
    needed: wire() re-points every module's names at the mix)."""
    check_type("take", take, (tuple, list))
    unknown = [piece for piece in take if piece not in PIECES]
    if unknown:
        raise ValueError(f"take must name pieces from {tuple(PIECES)}, got {', '.join(map(repr, unknown))}")
    out = Pieces(dict(base.functions), dict(base.source), dict(base.missing), list(base.modules))
    for piece in take:
        out.missing.pop(piece, None)
        if piece in other.missing:
            out.missing[piece] = other.missing[piece]
        for name in PIECES[piece][1]:
            if name in other.functions:
                out.functions[name], out.source[name] = other.functions[name], other.source[name]
            else:
                out.functions.pop(name, None)
    out.modules = list(dict.fromkeys(base.modules + other.modules))
    return wire(out)


def wire(pieces: Pieces) -> Pieces:
    """Re-point every piece name in every loaded module at ``pieces``' choice, and the RoPE table
    (rope_cos_sin) at one made from the chosen rope_inv_freq."""
    for module in pieces.modules:
        for name in NAMES:
            if name in vars(module):  # a missing piece's name raises: never the package's or another mix's
                setattr(module, name, pieces.functions.get(name) or _missing(pieces, name))
        if "rope_cos_sin" in vars(module):
            module.rope_cos_sin = _cos_sin_from(pieces)
    return pieces


def _missing(pieces: Pieces, name: str):
    def missing(*args, **kwargs):
        return getattr(pieces, name)  # raises LookupError: the piece is missing, and why
    return missing


def _cos_sin_from(pieces: Pieces):
    def rope_cos_sin(positions: torch.Tensor, head_dim: int, base: float = 10000.0, *args, **kwargs):
        """cos(m w_k), sin(m w_k), (*positions.shape, head_dim / 2), float32, w from YOUR rope_inv_freq."""
        inv_freq = pieces.rope_inv_freq(head_dim, base).to(positions.device, torch.float32)   # (d/2,)
        angles = positions.to(torch.float32)[..., None] * inv_freq                             # (*pos, d/2)
        return angles.cos(), angles.sin()
    return rope_cos_sin


# ------------------------------------------------------------------------------------------ model


def hf_names(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """{Hugging Face parameter name: shape} of a LlamaForCausalLM with ``config``."""
    d, hd = config.d_model, config.head_dim
    shapes = {"model.embed_tokens.weight": (config.vocab_size, d)}
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                   p + "self_attn.q_proj.weight": (config.n_heads * hd, d),
                   p + "self_attn.k_proj.weight": (config.n_kv_heads * hd, d),
                   p + "self_attn.v_proj.weight": (config.n_kv_heads * hd, d),
                   p + "self_attn.o_proj.weight": (d, config.n_heads * hd),
                   p + "mlp.gate_proj.weight": (config.d_ff, d), p + "mlp.up_proj.weight": (config.d_ff, d),
                   p + "mlp.down_proj.weight": (d, config.d_ff)}
    shapes["model.norm.weight"] = (d,)
    if not config.tie_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, d)
    return shapes


def check_modelled(config: LlamaConfig) -> None:
    """ValueError naming the first field of ``config`` that these pieces do not model."""
    if config.rope_layout != "half":
        raise ValueError(f"config.rope_layout must be 'half' (Hugging Face's names and layout), "
                         f"got {config.rope_layout!r}")
    defaults = {f.name: f.default for f in dataclasses.fields(LlamaConfig)}
    for name in UNMODELLED:
        if getattr(config, name) != defaults[name]:
            raise ValueError(f"config.{name} must be {defaults[name]!r}: your LLaMA (Chapters 2-9) does not "
                             f"model it, got {getattr(config, name)!r}")


def check_state_dict(state_dict, shapes: dict) -> None:
    """``state_dict`` has exactly the names of ``shapes``, each a floating tensor of that shape."""
    check_type("state_dict", state_dict, dict)
    missing = [name for name in shapes if name not in state_dict]
    unexpected = [name for name in state_dict if name not in shapes]
    if missing or unexpected:
        raise ValueError(f"state_dict must hold exactly the model's {len(shapes)} parameters: missing "
                         f"{missing[:5] or 'none'}{' ...' if len(missing) > 5 else ''}, unexpected "
                         f"{unexpected[:5] or 'none'}{' ...' if len(unexpected) > 5 else ''}")
    for name, shape in shapes.items():
        check_tensor(f"state_dict[{name!r}]", state_dict[name], shape=shape, floating=True)


class YourLlama(torch.nn.Module):
    """A LLaMA whose every computation is one of ``pieces`` (plus torch): see the module docstring.
    Parameters are kept under Hugging Face's names (dots become "__" inside the module)."""

    def __init__(self, config: LlamaConfig, pieces: Pieces, state_dict: dict | None = None, *,
                 device=None, dtype: torch.dtype | None = None):
        """``state_dict``: {Hugging Face name: tensor}, each kept on its device and dtype; None: zeros
        on ``device`` in ``dtype`` (default: the CPU, torch's default dtype)."""
        super().__init__()
        check_type("config", config, LlamaConfig)
        check_type("pieces", pieces, Pieces)
        check_modelled(config)
        self.config, self.pieces = config, pieces
        shapes = hf_names(config)
        if state_dict is None:
            state_dict = {name: torch.zeros(shape, device=device, dtype=dtype or torch.get_default_dtype())
                          for name, shape in shapes.items()}
        check_state_dict(state_dict, shapes)
        for name in shapes:
            self.register_parameter(name.replace(".", "__"), torch.nn.Parameter(state_dict[name].detach().clone()))

    def weights(self) -> dict[str, torch.Tensor]:
        """{Hugging Face name: parameter}: what llama_forward reads."""
        return {name.replace("__", "."): p for name, p in self.named_parameters()}

    def forward(self, input_ids: torch.Tensor, cache=None) -> torch.Tensor:
        check_token_ids("input_ids", input_ids, self.config.vocab_size, like=next(self.parameters()),
                        like_name="the model's parameters")
        wire(self.pieces)  # modules shared with another mix of pieces point at this one's again
        if cache is None:
            return self.pieces.llama_forward(input_ids, self.weights(), self.config)   # (B, T, V)
        return self.cached_forward(input_ids, cache)

    def cached_forward(self, input_ids: torch.Tensor, cache) -> torch.Tensor:
        """Logits (B, T, V) of T new tokens after the cache's cache.length ones."""
        P, w, c = self.pieces, self.weights(), self.config
        past, T = cache.length, input_ids.shape[1]
        positions = torch.arange(past, past + T, device=input_ids.device)                    # (T,)
        mask = P.causal_mask(T, past + T, device=input_ids.device)                           # (T, past+T)
        x = P.embed(input_ids, w["model.embed_tokens.weight"])                               # (B, T, d)
        for i in range(c.n_layers):
            x = self._cached_block(x, {k[len(f"model.layers.{i}."):]: v for k, v in w.items()
                                       if k.startswith(f"model.layers.{i}.")}, i, positions, mask, cache)
        cache.advance()
        x = P.rms_norm(x, w["model.norm.weight"], c.norm_eps)
        return x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T                 # (B, T, V)

    def _cached_block(self, x, lw, layer, positions, mask, cache):
        P, c = self.pieces, self.config
        B, T, _ = x.shape
        n = P.rms_norm(x, lw["input_layernorm.weight"], c.norm_eps)                          # (B, T, d)
        q = (n @ lw["self_attn.q_proj.weight"].T).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
        k = (n @ lw["self_attn.k_proj.weight"].T).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = (n @ lw["self_attn.v_proj.weight"].T).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q = P.apply_rope(q, positions, c.rope_theta, layout="half")                          # (B, H, T, hd)
        k = P.apply_rope(k, positions, c.rope_theta, layout="half")                          # (B, H_kv, T, hd)
        k, v = cache.update(layer, k, v)                                                     # (B, H_kv, S, hd)
        attn = P.gqa_attention(q, k, v, mask)                                                # (B, H, T, hd)
        h = x + attn.transpose(1, 2).reshape(B, T, -1) @ lw["self_attn.o_proj.weight"].T
        n = P.rms_norm(h, lw["post_attention_layernorm.weight"], c.norm_eps)
        return h + P.swiglu(n, lw["mlp.gate_proj.weight"], lw["mlp.up_proj.weight"], lw["mlp.down_proj.weight"])


def draw_next(pieces: Pieces, logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator) -> torch.Tensor:
    """One token per row: p = softmax(top_p_filter(logits / temperature)); (B, V) -> (B, 1), drawn
    on the generator's device, returned on the logits'. (Temperature 0 is greedy_generate's.)"""
    check_type("pieces", pieces, Pieces)
    check_tensor("logits", logits, ndim=2, floating=True)
    check_positive_number("temperature", temperature)
    check_number("top_p", top_p, low=0, high=1, low_open=True)
    check_type("generator", generator, torch.Generator)
    filtered = pieces.top_p_filter(logits.float() / temperature, top_p)                     # (B, V)
    probs = pieces.softmax(filtered, dim=-1)                                                 # (B, V)
    token = torch.multinomial(probs.to(generator.device), 1, generator=generator)           # (B, 1)
    return token.to(logits.device)


@torch.no_grad()
def sample_tokens(model: YourLlama, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 0.8,
                  top_p: float = 0.9, seed: int = 0) -> torch.Tensor:
    """Prompt + ``max_new_tokens`` sampled tokens with your KV cache, decode_step and sampler, (B, T + n)."""
    check_type("model", model, YourLlama)
    check_tensor("input_ids", input_ids, ndim=2)
    check_token_ids("input_ids", input_ids, model.config.vocab_size, like=next(model.parameters()),
                    like_name="the model's parameters")
    check_int("max_new_tokens", max_new_tokens, low=0)
    check_int("seed", seed)
    P = model.pieces
    dtype = next(model.parameters()).dtype
    cache = P.KVCache(model.config, input_ids.shape[0], input_ids.shape[1] + max_new_tokens,
                      device=input_ids.device, dtype=dtype)
    generator = torch.Generator().manual_seed(seed)
    out, logits = input_ids, P.decode_step(model, input_ids, cache)                         # (B, V)
    for _ in range(max_new_tokens):
        token = draw_next(P, logits, temperature, top_p, generator)                      # (B, 1)
        out = torch.cat([out, token], dim=1)
        logits = P.decode_step(model, token, cache)
    return out


def plot_curves(curves: dict, path) -> None:
    """Save the training-loss curves {name: history} (part (c) of the capstone) as an image at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, history in curves.items():
        ax.plot(history["step"], history["train_loss"], label=f"{name} (validation {history['val_loss']:.3f})")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per token)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
