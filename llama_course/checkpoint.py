"""Loading real checkpoints (Chapter 7): Hugging Face directories and Meta's original format.

Hugging Face (``save_pretrained``): config.json + model.safetensors, or several shards listed
in model.safetensors.index.json. Names are the course's with a "model." prefix; W_Q and W_K rows
are in the *half* RoPE layout (the conversion from Meta permuted them). The course runs such a
model with ``rope_layout="half"`` and leaves every tensor exactly as it is in the file.

Meta (``consolidated.00.pth`` ... + params.json): short names (wq, w1, attention_norm, ...) and the
*interleaved* RoPE layout, which the course runs natively (``rope_layout="interleaved"``).

Either way the model is first built on the ``meta`` device (no memory) and each tensor is
assigned as its shard is read, so the peak memory is about one copy of the weights.

DeepSeek-V3's router weight is kept in (at least) float32, as transformers keeps it in a bfloat16
model and writes it to its bfloat16 files; its routing bias keeps the file's dtype.

Nothing is guessed: a tensor in two shards, two file tensors for one parameter, an index entry
outside the checkpoint folder, a tied head stored with different values, tensors of mixed dtypes
(without ``dtype=``), quantized or non-float tensors, a malformed config, index or shard all raise
ValueError naming the file and the field.
"""

from __future__ import annotations

import json
import operator
import re
from pathlib import Path

import torch

from .config import LlamaConfig, ffn_hidden_dim
from .deepseek_moe import Router
from .model import Llama

SUPPORTED = ("llama", "qwen3", "mixtral", "mistral", "qwen3_moe", "deepseek_v3")
# What each block's FFN is, by the checkpoint's declared model_type (config.ffn); the attention is
# "latent" for deepseek_v3, "sliding" where config.json declares a window, else "full".
HF_FFN = {"llama": "dense", "qwen3": "dense", "mistral": "dense", "mixtral": "moe", "qwen3_moe": "moe",
          "deepseek_v3": "deepseek_moe"}


class CheckpointError(ValueError):
    """A checkpoint that does not fit the model: lists every missing, unexpected or mis-shaped tensor."""


def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise ValueError(f"{path.parent} has no {path.name}: not a {what} checkpoint directory")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot be read as JSON ({err})") from None
    except RecursionError:
        raise ValueError(f"{path}: cannot be read as JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _config_from_file(path: Path, parse, *args) -> LlamaConfig:
    """``parse(*args)``, with a missing or malformed field reported as a ValueError naming ``path``."""
    try:
        return parse(*args)
    except KeyError as err:
        raise ValueError(f"{path}: missing field {err}") from None
    except (TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path}: {err}") from None


def config_from_hf(hf: dict) -> LlamaConfig:
    """A LlamaConfig from a transformers config.json dict."""
    model_type = hf.get("model_type")
    if hf.get("quantization_config") is not None:
        method = hf["quantization_config"].get("quant_method", "?") if isinstance(hf["quantization_config"],
                                                                                 dict) else "?"
        raise ValueError(f"quantization_config (quant_method {method!r}): a quantized checkpoint; the course "
                         f"loads unquantized weights only (dequantize it, or load the original release)")
    if model_type not in SUPPORTED:
        raise ValueError(f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED)}")
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            raise ValueError(f"{flag}=true: LLaMA has no biases and the course model has none")
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {hf['hidden_act']!r} is not supported (LLaMA uses silu)")
    rope = dict(hf.get("rope_parameters") or {})
    theta = hf.get("rope_theta", rope.get("rope_theta", 10000.0))
    scaling = hf.get("rope_scaling") or ({k: v for k, v in rope.items() if k != "rope_theta"} if rope else None)
    if scaling and scaling.get("rope_type", scaling.get("type", "default")) == "default":
        scaling = None
    fields = dict(
        vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"], n_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        d_ff=hf["intermediate_size"], rope_theta=float(theta), norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_seq_len=hf.get("max_position_embeddings", 4096), tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        head_dim=hf.get("head_dim"), rope_layout="half", rope_scaling=scaling, qk_norm=model_type == "qwen3",
        n_experts=hf.get("num_local_experts", 1), n_experts_per_token=hf.get("num_experts_per_tok", 1))
    fields.update(hf_config_fields(hf))   # Chapter 12: windows, MLA, DeepSeekMoE, Qwen3-MoE
    if HF_FFN[model_type] != "dense" and fields["n_experts"] == 1:
        fields["single_expert_moe"] = True    # transformers keeps the router of one routed expert
    fields["ffn"] = HF_FFN[model_type]
    fields["attention"] = ("latent" if model_type == "deepseek_v3"
                           else "sliding" if fields.get("sliding_window") is not None else "full")
    return LlamaConfig(**fields)


def hf_config_fields(hf: dict) -> dict:
    """The Chapter 12 LlamaConfig fields of a transformers config.json (Mistral/Mixtral windows,
    Qwen3-MoE's experts, DeepSeek-V3's MLA and DeepSeekMoE); {} for a LLaMA."""
    model_type, fields = hf.get("model_type"), {}
    slides = hf.get("use_sliding_window") if model_type in ("qwen3", "qwen3_moe") else True
    if slides and hf.get("sliding_window"):
        fields["sliding_window"] = hf["sliding_window"]
        if hf.get("layer_types"):                 # e.g. Qwen3: sliding only from max_window_layers on
            fields["layer_types"] = tuple(hf["layer_types"])
        elif model_type in ("qwen3", "qwen3_moe"):
            fields["layer_types"] = tuple("sliding_attention" if i >= hf.get("max_window_layers", 28)
                                          else "full_attention" for i in range(hf["num_hidden_layers"]))
    if model_type == "qwen3_moe":
        if hf.get("decoder_sparse_step", 1) != 1 or hf.get("mlp_only_layers"):
            raise ValueError("qwen3_moe with decoder_sparse_step != 1 or mlp_only_layers is not supported "
                             "(every block of the course's Qwen3-MoE has experts)")
        fields.update(qk_norm=True, n_experts=hf.get("num_experts", hf.get("num_local_experts")),
                      moe_d_ff=hf["moe_intermediate_size"], moe_norm_topk=bool(hf.get("norm_topk_prob", False)))
    if model_type == "deepseek_v3":
        fields.update(
            q_lora_rank=hf.get("q_lora_rank"), kv_lora_rank=hf["kv_lora_rank"], head_dim=hf["qk_rope_head_dim"],
            qk_nope_head_dim=hf["qk_nope_head_dim"], qk_rope_head_dim=hf["qk_rope_head_dim"],
            v_head_dim=hf["v_head_dim"], n_experts=hf["n_routed_experts"], moe_d_ff=hf["moe_intermediate_size"],
            moe_router="sigmoid", n_shared_experts=hf.get("n_shared_experts") or 0, n_group=hf.get("n_group") or 1,
            topk_group=hf.get("topk_group") or 1, routed_scaling_factor=float(hf.get("routed_scaling_factor", 1.0)),
            first_k_dense_replace=hf.get("first_k_dense_replace") or 0,
            moe_norm_topk=bool(hf.get("norm_topk_prob", True)),
            rope_layout="interleaved" if hf.get("rope_interleave", True) else "half")
    return fields


_FUSED_EXPERTS = re.compile(r"(.*\.mlp\.experts)\.(gate_up_proj|down_proj)")


def split_fused_experts(name: str, tensor: torch.Tensor):
    """transformers keeps experts in memory as 3-D tensors, gate_up_proj (E, 2 F, d) and down_proj
    (E, d, F); yield them as the per-expert 2-D weights a saved checkpoint lists. Others pass as is."""
    match = _FUSED_EXPERTS.fullmatch(name)
    if match is None or tensor.dim() != 3:
        yield name, tensor
        return
    prefix, kind = match.groups()
    for e, w in enumerate(tensor):                                       # w: (2F, d) or (d, F)
        if kind == "down_proj":
            yield f"{prefix}.{e}.down_proj.weight", w
        else:
            gate, up = w.chunk(2, dim=0)                                 # (F, d) each: gate first
            yield f"{prefix}.{e}.gate_proj.weight", gate
            yield f"{prefix}.{e}.up_proj.weight", up


def _check_weight_map(path: Path, found_in: dict[str, Path]) -> None:
    """ValueError unless the index's weight_map lists exactly the tensors the shards hold, each in its shard."""
    index = path / "model.safetensors.index.json"
    if not index.is_file():
        return
    weight_map = _read_json(index, "Hugging Face")["weight_map"]
    wrong = [f"{k} (index: {weight_map.get(k, 'not listed')}, found in {found_in[k].name if k in found_in else 'none'})"
             for k in sorted(set(weight_map) | set(found_in))
             if k not in found_in or weight_map.get(k) != found_in[k].name]
    if wrong:
        raise ValueError(f"{index}: weight_map does not match the shards: " + "; ".join(wrong[:8]))


def _hf_shards(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_json(index, "Hugging Face").get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{index}: field 'weight_map' must map tensor names to shard file names")
        for name in sorted(set(weight_map.values())):
            if Path(name).name != name or name in ("", ".", ".."):
                raise ValueError(f"{index}: shard {name!r} is not a file in {path} (outside the checkpoint)")
            if not (path / name).is_file():
                raise ValueError(f"{index}: shard {name!r} is missing from {path}")
        return [path / name for name in sorted(set(weight_map.values()))]
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    raise ValueError(f"{path} has no model.safetensors or model.safetensors.index.json")


_MIXTRAL_NAMES = [  # Mixtral's checkpoint names -> the course's MoE module
    (r"(layers\.\d+)\.block_sparse_moe\.gate\.weight", r"\1.mlp.gate.weight"),
    (r"(layers\.\d+)\.block_sparse_moe\.experts\.(\d+)\.w1\.weight", r"\1.mlp.experts.\2.gate_proj.weight"),
    (r"(layers\.\d+)\.block_sparse_moe\.experts\.(\d+)\.w3\.weight", r"\1.mlp.experts.\2.up_proj.weight"),
    (r"(layers\.\d+)\.block_sparse_moe\.experts\.(\d+)\.w2\.weight", r"\1.mlp.experts.\2.down_proj.weight"),
]


def hf_to_course_name(name: str) -> str | None:
    """transformers' parameter name -> the course's (None for buffers the
    course recomputes)."""
    if name.endswith("rotary_emb.inv_freq"):
        return None
    name = name[len("model."):] if name.startswith("model.") else name
    for pattern, replacement in _MIXTRAL_NAMES:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, replacement, name)
    return name


def _course_name(name: str, tensor: torch.Tensor, config: LlamaConfig) -> str | None:
    """hf_to_course_name, and None for the empty shared expert that transformers builds (width
    moe_intermediate_size * 0) when a DeepSeek-V3 config has n_shared_experts = 0: it adds zero."""
    if config.n_shared_experts == 0 and ".mlp.shared_experts." in name and tensor.numel() == 0:
        return None
    return hf_to_course_name(name)


def load_hf(path, dtype: torch.dtype | None = None, device=None) -> Llama:
    """Llama from a transformers directory, tensors exactly as stored (cast
    to ``dtype`` if given)."""
    from safetensors import safe_open

    path = Path(path)
    file = path / "config.json"
    config = _config_from_file(file, config_from_hf,
                               _read_json(file, "Hugging Face"))
    device = torch.device(device or "cpu")
    with torch.device("meta"):
        model = Llama(config)

    def tensors():
        found_in = {}               # tensor name -> the shard that held it
        for shard in _hf_shards(path):
            try:
                with safe_open(str(shard), framework="pt",
                               device=str(device)) as f:
                    for key in f.keys():
                        if key in found_in:
                            raise CheckpointError(
                                f"{key} is in two shards: "
                                f"{found_in[key]} and {shard}")
                        found_in[key] = shard
                        # Ch. 12: 3-D experts split into one per expert
                        tensor = f.get_tensor(key)
                        for name, t in split_fused_experts(key, tensor):
                            yield name, _course_name(name, t, config), t
            except CheckpointError:
                raise
            except Exception as err:  # safetensors' errors and OS errors
                raise ValueError(
                    f"{shard}: not a readable safetensors file "
                    f"({type(err).__name__}: {err})") from None
        _check_weight_map(path, found_in)

    return _assign(model, tensors(), dtype, device, str(path))


def _assign(model: Llama, tensors, dtype, device, source: str) -> Llama:
    """Move each (original name, course name, tensor) into the meta-built model; report every misfit."""
    params = dict(model.named_parameters())
    buffers = {n: b for n, b in model.named_buffers() if n in model.state_dict()}  # persistent (DeepSeek's bias)
    expected = {name: tuple(p.shape) for name, p in {**params, **buffers}.items()}
    loaded, unexpected, misshaped, dtypes, tied_head = set(), [], [], {}, None
    source_of: dict[str, str] = {}                             # course name -> the file tensor that filled it
    for original, name, tensor in tensors:
        if name is None:
            continue
        _check_unique(source_of, original, name, source)
        _check_float(tensor, original, source)
        if name == "lm_head.weight" and model.config.tie_embeddings:
            tied_head = (original, tensor)                     # compared with the embedding below
            continue
        if name not in expected:
            unexpected.append(original)
            continue
        module_name, _, attr = name.rpartition(".")
        module = model.get_submodule(module_name)
        router = isinstance(module, Router)                    # DeepSeek's gate: float32, as transformers keeps it
        if name not in buffers and not router:
            dtypes.setdefault(tensor.dtype, original)          # a buffer keeps its own dtype (float32 bias)
        if tuple(tensor.shape) != expected[name]:
            misshaped.append(f"{original}: file {tuple(tensor.shape)}, model {expected[name]}")
            continue
        if name in buffers:
            setattr(module, attr, tensor)   # a buffer keeps the file's dtype (float32 for the routing bias)
        else:
            target = torch.promote_types(dtype or tensor.dtype, torch.float32) if router else dtype
            setattr(module, attr, torch.nn.Parameter(tensor.to(target) if target else tensor, requires_grad=False))
        loaded.add(name)
    if model.config.tie_embeddings:
        _tie(model, tied_head, source)
        loaded.add("lm_head.weight")
    if dtype is None and len(dtypes) > 1:
        raise CheckpointError(f"{source} mixes dtypes (" + ", ".join(f"{d} in {n}" for d, n in dtypes.items()) +
                              "): pass dtype= to load it in one")
    missing = sorted(set(expected) - loaded)
    if missing or unexpected or misshaped:
        lines = [f"{source} does not fit {type(model).__name__}:"]
        lines += [f"  missing: {m}" for m in missing] + [f"  unexpected: {u}" for u in sorted(unexpected)]
        lines += [f"  wrong shape: {m}" for m in misshaped]
        raise CheckpointError("\n".join(lines))
    model.set_device_of_rotary(device)
    for p in model.parameters():
        p.requires_grad_(True)
    return model.eval()


def _check_unique(source_of: dict[str, str], original: str, name: str, source: str) -> None:
    """CheckpointError if a second file tensor maps to the parameter ``name`` (e.g. model.norm.weight
    and norm.weight, or an expert stored both fused and one by one): which one wins would be a guess."""
    if name in source_of:
        raise CheckpointError(f"{source}: {source_of[name]} and {original} both map to the parameter {name}; "
                              f"remove one of them")
    source_of[name] = original


def _check_float(tensor: torch.Tensor, original: str, source: str) -> None:
    """CheckpointError for a tensor that is not float16/bfloat16/float32/float64 (quantized float8,
    integers, complex numbers): the course computes in floating point and does not dequantize."""
    if tensor.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise CheckpointError(f"{source}: {original} is {tensor.dtype}; the course loads floating-point weights "
                              f"(float16, bfloat16, float32) only: convert or dequantize the checkpoint first")


def _tie(model: Llama, stored_head, source: str) -> None:
    """The head is the embedding; a stored lm_head.weight must hold the same values."""
    model.lm_head.weight = model.embed_tokens.weight
    if stored_head is not None:
        original, tensor = stored_head
        embedding = model.embed_tokens.weight
        if tensor.shape != embedding.shape or not torch.equal(tensor.to(embedding.device, embedding.dtype), embedding):
            raise CheckpointError(f"{source}: tie_word_embeddings is true but {original} differs from the "
                                  f"embedding; untie it in config.json to load both")


# ------------------------------------------------------------------------------ Meta's format

META_NAMES = [  # (Meta's pattern, the course's)
    (r"tok_embeddings\.weight", "embed_tokens.weight"),
    (r"norm\.weight", "norm.weight"),
    (r"output\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attention\.wq\.weight", r"layers.\1.self_attn.q_proj.weight"),
    (r"layers\.(\d+)\.attention\.wk\.weight", r"layers.\1.self_attn.k_proj.weight"),
    (r"layers\.(\d+)\.attention\.wv\.weight", r"layers.\1.self_attn.v_proj.weight"),
    (r"layers\.(\d+)\.attention\.wo\.weight", r"layers.\1.self_attn.o_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.w1\.weight", r"layers.\1.mlp.gate_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.w3\.weight", r"layers.\1.mlp.up_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.w2\.weight", r"layers.\1.mlp.down_proj.weight"),
    (r"layers\.(\d+)\.attention_norm\.weight", r"layers.\1.input_layernorm.weight"),
    (r"layers\.(\d+)\.ffn_norm\.weight", r"layers.\1.post_attention_layernorm.weight"),
]
# Model-parallel shards split each matrix along one dimension; norms are replicated.
_SPLIT_DIM = {"wq": 0, "wk": 0, "wv": 0, "w1": 0, "w3": 0, "output": 0, "wo": 1, "w2": 1}


def meta_to_course_name(name: str) -> str | None:
    """Meta's parameter name -> the course's (None for rope.freqs, which the course recomputes)."""
    if name == "rope.freqs":
        return None
    for pattern, replacement in META_NAMES:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, replacement, name)
    return name  # unknown: reported as unexpected


def config_from_meta(params: dict, vocab_size: int) -> LlamaConfig:
    """A LlamaConfig from Meta's params.json (vocab_size -1 in Llama 2's: taken from the weights)."""
    d = params["dim"]
    scaling = None
    if params.get("use_scaled_rope"):
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}
    return LlamaConfig(
        vocab_size=vocab_size, d_model=d, n_layers=params["n_layers"], n_heads=params["n_heads"],
        n_kv_heads=params.get("n_kv_heads") or params["n_heads"],
        d_ff=ffn_hidden_dim(d, params.get("multiple_of", 256), params.get("ffn_dim_multiplier")),
        rope_theta=float(params.get("rope_theta", 10000.0)), norm_eps=float(params.get("norm_eps", 1e-5)),
        max_seq_len=params.get("max_seq_len", 4096), rope_layout="interleaved", rope_scaling=scaling)


def load_meta(path, dtype: torch.dtype | None = None, device=None) -> Llama:
    """Llama from Meta's consolidated.NN.pth shards and params.json (interleaved RoPE, run natively)."""
    path = Path(path)
    params = _read_json(path / "params.json", "Meta")
    shards = sorted(path.glob("consolidated.*.pth"))
    if not shards:
        raise ValueError(f"{path} has no consolidated.*.pth files")
    device = torch.device(device or "cpu")
    parts = [_load_meta_shard(s, device) for s in shards]
    dim = _config_from_file(path / "params.json", operator.itemgetter("dim"), params)
    merged = {name: _merge_meta_pieces(name, parts, shards, dim) for name in parts[0]}
    del parts
    if "tok_embeddings.weight" not in merged:
        raise ValueError(f"{shards[0]}: no tok_embeddings.weight")
    vocab_size = merged["tok_embeddings.weight"].shape[0]
    config = _config_from_file(path / "params.json", config_from_meta, params, vocab_size)
    with torch.device("meta"):
        model = Llama(config)
    return _assign(model, ((k, meta_to_course_name(k), v) for k, v in merged.items()), dtype, device, str(path))


def _load_meta_shard(shard: Path, device: torch.device) -> dict:
    """One consolidated.NN.pth: a dict of tensors, or a ValueError naming the file."""
    try:
        state = torch.load(shard, map_location=device, weights_only=True, mmap=True)
    except Exception as err:                                   # pickle, zip and OS errors alike
        raise ValueError(f"{shard}: not a readable PyTorch checkpoint ({type(err).__name__}: {err})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{shard}: expected a dict of tensors")
    return state


def _merge_meta_pieces(name: str, parts: list[dict], shards: list[Path], dim: int) -> torch.Tensor:
    """One tensor from its model-parallel pieces (norms are replicated; matrices split along one dim)."""
    for part, shard in zip(parts, shards):
        if name not in part or set(part) != set(parts[0]):
            raise ValueError(f"{shard}: holds other tensors than {shards[0]} (e.g. {name})")
    pieces = [p[name] for p in parts]
    short = name.split(".")[-2] if name.endswith(".weight") else name
    if len(pieces) == 1 or pieces[0].dim() == 1:
        return pieces[0]
    split = _SPLIT_DIM.get(short, 0)
    if name == "tok_embeddings.weight":                        # Llama 2 splits the width, Llama 3 the vocabulary
        split = 1 if pieces[0].shape[1] * len(pieces) == dim else 0
    try:
        return torch.cat(pieces, dim=split)
    except RuntimeError as err:
        raise ValueError(f"{name}: the pieces in {shards[0].parent} do not fit together ({err})") from None
