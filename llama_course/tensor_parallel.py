"""Tensor parallel for the LLaMA block (Chapter 13), with DTensor, and Meta's shards loaded into it.

A Linear layer y = x W^T, W (d_out, d_in), can be split across N ranks two ways:

    column-parallel   W split by rows (output features): rank r holds W_r (d_out/N, d_in) and computes
                      y_r = x W_r^T, its own slice of y's columns. x must be whole on every rank.
    row-parallel      W split by columns (input features): rank r holds W_r (d_out, d_in/N), reads
                      only its slice x_r of x and computes a partial sum; y = sum_r x_r W_r^T, one
                      all-reduce.

In a block, attention's heads are independent and SwiGLU is elementwise over d_ff, so a
column-parallel layer can feed a row-parallel one directly (Megatron-LM, Shoeybi et al. 2019):

    attention   q, k, v column-parallel (whole heads per rank) -> attend locally -> o row-parallel
    FFN         gate, up column-parallel (d_ff/N hidden units per rank) -> SiLU(g) * u locally
                -> down row-parallel

so each sub-layer needs exactly one all-reduce (after o and after down). PyTorch's
``ColwiseParallel`` shards nn.Linear's weight on dim 0 and ``RowwiseParallel`` on dim 1: Meta's
model-parallel checkpoints (``consolidated.0r.pth``, one per rank of Meta's inference code, which
runs Llama-2 7B on 1 GPU, 13B on 2 and 70B on 8; not one per GPU of the training) use the same
split (wq, wk, wv, w1, w3 on dim 0; wo, w2 on dim 1; norms replicated), so rank r can load its
file straight into its DTensor shards, without merging.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch import nn

from .checkpoint import _SPLIT_DIM, META_NAMES, _read_json, config_from_meta, meta_to_course_name
from .model import Llama, LlamaBlock


def block_plan() -> dict:
    """The tensor-parallel plan of one LlamaBlock: module name -> how its weight is split."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {
        "self_attn.q_proj": ColwiseParallel(),   # (H*hd, d): rows are heads, whole heads per rank
        "self_attn.k_proj": ColwiseParallel(),   # (H_kv*hd, d)
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(),   # (d, H*hd): columns are heads; all-reduce after
        "mlp.gate_proj": ColwiseParallel(),      # (d_ff, d): hidden units split
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(),      # (d, d_ff); all-reduce after
    }


def parallelize_block(block: LlamaBlock, mesh) -> LlamaBlock:
    """Split one block across ``mesh`` (a 1-D DeviceMesh) in place; each rank keeps H/N query heads,
    H_kv/N key/value heads and d_ff/N hidden units."""
    from torch.distributed.tensor.parallel import parallelize_module

    attn, n = block.self_attn, mesh.size()
    if attn.n_kv_heads % n or block.mlp.gate_proj.out_features % n:
        raise ValueError(f"the tensor-parallel size ({n}) must divide n_kv_heads ({attn.n_kv_heads}) and "
                         f"d_ff ({block.mlp.gate_proj.out_features})")
    parallelize_module(block, mesh, block_plan())
    attn.n_heads, attn.n_kv_heads = attn.n_heads // n, attn.n_kv_heads // n  # heads on this rank
    return block


def parallelize(model: Llama, mesh) -> Llama:
    """Tensor-parallel blocks; the embedding, final norm and head stay whole on every rank."""
    if model.config.is_moe:
        raise ValueError("tensor parallel here covers dense blocks; MoE layers use expert parallelism")
    for block in model.layers:
        parallelize_block(block, mesh)
    return model


def load_meta_tensor_parallel(path, mesh, dtype: torch.dtype | None = None) -> Llama:
    """Meta's model-parallel checkpoint straight into the tensor-parallel model: rank r reads only
    ``consolidated.0r.pth`` and its shards become the local pieces of the DTensor weights.

    The checkpoint must have been written for as many ranks as ``mesh`` has. The embedding and
    head (split across the files too) are gathered, since this model keeps them whole."""
    from torch.distributed.tensor import DTensor, Shard

    path, rank, n = Path(path), mesh.get_local_rank(), mesh.size()
    params = _read_json(path / "params.json", "Meta")
    shards = sorted(path.glob("consolidated.*.pth"))
    if len(shards) != n:
        raise ValueError(f"{path} holds {len(shards)} model-parallel shards; the mesh has {n} ranks")
    mine = torch.load(shards[rank], map_location="cpu", weights_only=True, mmap=True)
    embedding = mine["tok_embeddings.weight"]
    whole_width = embedding.shape[1] == params["dim"]            # Llama 3 splits the vocabulary
    config = config_from_meta(params, embedding.shape[0] * (n if whole_width else 1))
    with torch.device("meta"):
        model = parallelize(Llama(config, dtype=dtype), mesh)
    for meta_name, tensor in mine.items():
        name = meta_to_course_name(meta_name)
        if name is None:
            continue
        tensor = tensor.to(device=mesh.device_type, dtype=dtype)  # this rank's device (dtype None: kept)
        current = model.get_parameter(name)
        if isinstance(current, DTensor):                         # a block matrix: the shard is the local piece
            value = DTensor.from_local(tensor, mesh, current.placements, run_check=False)
        elif tensor.dim() == 2:                                  # embedding, head: gather the whole matrix
            dim = 1 if meta_name == "tok_embeddings.weight" and not whole_width else _SPLIT_DIM.get(
                meta_name.split(".")[-2], 0)
            value = DTensor.from_local(tensor, mesh, [Shard(dim)], run_check=False).full_tensor()
        else:                                                    # norms: the same on every rank
            value = tensor
        if value.shape != current.shape:
            raise ValueError(f"{meta_name}: shard gives {tuple(value.shape)}, the model needs {tuple(current.shape)}")
        module_name, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(module_name), leaf, nn.Parameter(value))
    model.set_device_of_rotary(mesh.device_type)
    return model


def split_for_meta(state: dict[str, torch.Tensor], n: int) -> list[dict[str, torch.Tensor]]:
    """The inverse of merging (for tests and the chapter): the course's whole weights -> N Meta-style
    model-parallel shards, each split along the dimension Meta's inference code splits it."""
    parts: list[dict[str, torch.Tensor]] = [{} for _ in range(n)]
    for meta_pattern, course_pattern in META_NAMES:
        course = re.compile(course_pattern.replace(r"\1", r"(\d+)").replace(".", r"\."))
        for name, tensor in state.items():
            match = course.fullmatch(name)
            if match is None:
                continue
            meta_name = meta_pattern.replace(r"(\d+)", match.group(1) if match.groups() else "").replace("\\", "")
            short = meta_name.split(".")[-2]
            dim = 1 if meta_name == "tok_embeddings.weight" else _SPLIT_DIM.get(short, 0)
            for r, piece in enumerate(tensor.chunk(n, dim) if tensor.dim() == 2 else [tensor] * n):
                parts[r][meta_name] = piece.clone()
    return parts


def write_meta(directory, parts: list[dict[str, torch.Tensor]], params: dict) -> None:
    """Write shards as Meta's consolidated.NN.pth + params.json."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for r, part in enumerate(parts):
        torch.save(part, directory / f"consolidated.{r:02d}.pth")
    (directory / "params.json").write_text(json.dumps(params))
