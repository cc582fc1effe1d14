"""Tensor parallel for the LLaMA block (Chapter 13), with DTensor, and
Meta's shards loaded into it.

A Linear layer y = x W^T, W (d_out, d_in), can be split across N ranks
two ways:

    column-parallel   W split by rows (output features): rank r holds W_r
                      (d_out/N, d_in) and computes y_r = x W_r^T, its own
                      slice of y's columns. x must be whole on every rank.
    row-parallel      W split by columns (input features): rank r holds
                      W_r (d_out, d_in/N), reads only its slice x_r of x
                      and computes a partial sum; y = sum_r x_r W_r^T, one
                      all-reduce.

In a block, attention's heads are independent and SwiGLU is elementwise
over d_ff, so a column-parallel layer can feed a row-parallel one
directly (Megatron-LM, Shoeybi et al. 2019):

    attention   q, k, v column-parallel (whole heads per rank) -> attend
                locally -> o row-parallel
    FFN         gate, up column-parallel (d_ff/N hidden units per rank)
                -> SiLU(g) * u locally -> down row-parallel

so each sub-layer needs exactly one all-reduce (after o and after down).
The plan is applied to the model as it is (as torchtitan's apply_tp
does): nothing else changes. Attention reads its number of heads from
its projections' widths, so a rank whose q_proj holds H/N heads' rows
computes H/N heads, and its KV cache holds H_kv/N heads.

PyTorch's ``ColwiseParallel`` shards nn.Linear's weight on dim 0 and
``RowwiseParallel`` on dim 1: Meta's model-parallel checkpoints
(``consolidated.0r.pth``, one per rank of Meta's inference code, which
runs Llama-2 7B on 1 GPU, 13B on 2 and 70B on 8) use the same split (wq,
wk, wv, w1, w3 on dim 0; wo, w2 on dim 1; norms replicated), so rank r
can load its file straight into its DTensor shards, without merging.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch import nn

from ..checkpoint import (
    _SPLIT_DIM,
    META_NAMES,
    _read_json,
    config_from_meta,
    meta_to_course_name,
)
from ..model import Llama, LlamaBlock


def block_plan() -> dict:
    """The tensor-parallel plan of one LlamaBlock: module name -> how its
    weight is split."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
    )

    return {
        "self_attn.q_proj": ColwiseParallel(),  # (H*hd, d): whole heads
        "self_attn.k_proj": ColwiseParallel(),  # (H_kv*hd, d)
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(),  # (d, H*hd): all-reduce after
        "mlp.gate_proj": ColwiseParallel(),     # (d_ff, d): hidden units
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(),     # (d, d_ff): all-reduce after
    }


def apply_tp(model: Llama, mesh) -> Llama:
    """Split every block across ``mesh`` (a 1-D DeviceMesh) by
    block_plan(), in place: each rank keeps H/N query heads, H_kv/N
    key/value heads and d_ff/N hidden units. The embedding, final norm and
    head stay whole on every rank; the config is not changed."""
    from torch.distributed.tensor.parallel import parallelize_module

    check_tp(model, mesh.size())
    for block in model.layers:
        parallelize_module(block, mesh, block_plan())
    return model


def check_tp(model: Llama, n: int) -> None:
    """ValueError unless ``n`` ranks can split every block evenly."""
    c = model.config
    if c.is_moe:
        raise ValueError("tensor parallel here covers dense blocks; MoE "
                         "layers use expert parallelism")
    if any(not isinstance(block, LlamaBlock) for block in model.layers):
        raise TypeError("apply_tp splits LlamaBlocks")
    d_ff = model.layers[0].mlp.gate_proj.out_features
    if c.n_kv_heads % n or d_ff % n:
        raise ValueError(f"the tensor-parallel size ({n}) must divide "
                         f"n_kv_heads ({c.n_kv_heads}) and d_ff ({d_ff})")


def load_meta_tensor_parallel(path, mesh,
                              dtype: torch.dtype | None = None) -> Llama:
    """Meta's model-parallel checkpoint straight into the tensor-parallel
    model: rank r reads only ``consolidated.0r.pth`` and its shards become
    the local pieces of the DTensor weights.

    The checkpoint must have been written for as many ranks as ``mesh``
    has. The embedding and head (split across the files too) are
    gathered, since this model keeps them whole."""
    path, rank, n = Path(path), mesh.get_local_rank(), mesh.size()
    params = _read_json(path / "params.json", "Meta")
    shards = sorted(path.glob("consolidated.*.pth"))
    if len(shards) != n:
        raise ValueError(f"{path} holds {len(shards)} model-parallel "
                         f"shards; the mesh has {n} ranks")
    mine = torch.load(shards[rank], map_location="cpu", weights_only=True,
                      mmap=True)
    embedding = mine["tok_embeddings.weight"]
    whole_width = embedding.shape[1] == params["dim"]  # Llama 3: vocab split
    vocab = embedding.shape[0] * (n if whole_width else 1)
    with torch.device("meta"):
        model = apply_tp(Llama(config_from_meta(params, vocab), dtype=dtype),
                         mesh)
    for meta_name, tensor in mine.items():
        name = meta_to_course_name(meta_name)
        if name is None:
            continue
        tensor = tensor.to(device=mesh.device_type, dtype=dtype)
        value = _whole_or_shard(model.get_parameter(name), tensor, mesh,
                                meta_name, whole_width)
        module_name, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(module_name), leaf, nn.Parameter(value))
    model.set_device_of_rotary(mesh.device_type)
    return model


def _whole_or_shard(current, tensor: torch.Tensor, mesh, meta_name: str,
                    whole_width: bool):
    """The value for a parameter from this rank's piece of it: a block
    matrix's shard is its local piece; the embedding and head are
    gathered whole; a norm is the same on every rank."""
    from torch.distributed.tensor import DTensor, Shard

    if isinstance(current, DTensor):
        value = DTensor.from_local(tensor, mesh, current.placements,
                                   run_check=False)
    elif tensor.dim() == 2:
        split_vocab = meta_name == "tok_embeddings.weight" and not whole_width
        dim = 1 if split_vocab else _SPLIT_DIM.get(
            meta_name.split(".")[-2], 0)
        value = DTensor.from_local(tensor, mesh, [Shard(dim)],
                                   run_check=False).full_tensor()
    else:
        value = tensor
    if value.shape != current.shape:
        raise ValueError(f"{meta_name}: shard gives {tuple(value.shape)}, "
                         f"the model needs {tuple(current.shape)}")
    return value


def split_for_meta(state: dict[str, torch.Tensor],
                   n: int) -> list[dict[str, torch.Tensor]]:
    """The inverse of merging (for tests and the chapter): the course's
    whole weights -> N Meta-style model-parallel shards, each split along
    the dimension Meta's inference code splits it."""
    parts: list[dict[str, torch.Tensor]] = [{} for _ in range(n)]
    for meta_pattern, course_pattern in META_NAMES:
        pattern = course_pattern.replace(r"\1", r"(\d+)").replace(".", r"\.")
        course = re.compile(pattern)
        for name, tensor in state.items():
            match = course.fullmatch(name)
            if match is None:
                continue
            index = match.group(1) if match.groups() else ""
            meta_name = meta_pattern.replace(r"(\d+)", index)
            meta_name = meta_name.replace("\\", "")
            short = meta_name.split(".")[-2]
            dim = (1 if meta_name == "tok_embeddings.weight"
                   else _SPLIT_DIM.get(short, 0))
            pieces = (tensor.chunk(n, dim) if tensor.dim() == 2
                      else [tensor] * n)
            for r, piece in enumerate(pieces):
                parts[r][meta_name] = piece.clone()
    return parts


def write_meta(directory, parts: list[dict[str, torch.Tensor]],
               params: dict) -> None:
    """Write shards as Meta's consolidated.NN.pth + params.json."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for r, part in enumerate(parts):
        torch.save(part, directory / f"consolidated.{r:02d}.pth")
    (directory / "params.json").write_text(json.dumps(params))
