"""Training on several processes (Chapter 13): join them, wrap the model,
and answer the loop's questions across ranks.

    data parallel (DDP)     every rank holds the whole model and reads its
                            own rows of the global batch; after backward
                            one all-reduce averages the gradients, so every
                            rank takes the same optimizer step as one
                            process with the whole batch
    fully sharded (FSDP2)   each block's parameters, gradients and AdamW
                            moments are split into N shards (ZeRO-3); a
                            block's weights are all-gathered just before
                            its forward and backward, and its gradients
                            are reduce-scattered after

The launcher (torchrun) starts one process per device and sets RANK,
WORLD_SIZE, LOCAL_RANK and the rendezvous address; ``setup`` reads them,
choosing NCCL on CUDA and gloo on CPU, and returns a ``Parallel``: the
World (llama_course.train.world) of N processes that Chapter 11's loop
is handed.

    torchrun --standalone --nproc-per-node 2 -m llama_course.train   # DDP
    torchrun --standalone --nproc-per-node 2 -m llama_course.train --shard
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ..train.world import World

TIMEOUT_S = 300   # a collective that waits longer ends the run, not hangs


@dataclass(frozen=True)
class Parallel(World):
    """This process among world_size: its rank, its device, its local rank
    on the machine, and whether the model is sharded (FSDP2) or
    replicated (DDP)."""

    local_rank: int = 0
    shard: bool = False

    def mean(self, value: torch.Tensor | float) -> float:
        return mean_across(value, self)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return parallelize(model, self)

    def barrier(self) -> None:
        barrier(self)

    def check_agreement(self, options: dict) -> None:
        check_agreement(self, options)

    def teardown(self) -> None:
        teardown()

    def save(self, path, model, optimizer, step, generator, history, cfg,
             scaler=None) -> None:
        from .checkpoint import save
        save(path, model, optimizer, step, generator, history, cfg, self,
             scaler)

    def load(self, path, model, optimizer, generator, cfg, scaler=None):
        from .checkpoint import load
        return load(path, model, optimizer, generator, cfg, self, scaler)


def setup(shard: bool = False, device=None,
          timeout_s: float = TIMEOUT_S) -> Parallel:
    """Join the process group torchrun describes (NCCL on CUDA, gloo on
    CPU); one process without it. ``--shard`` needs at least two
    processes: there is nothing to split among one."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if shard and world_size < 2:
        raise ValueError("--shard splits the model across processes and "
                         "needs at least 2: launch with torchrun "
                         "--nproc-per-node N (N >= 2)")
    if world_size < 2:
        return Parallel(device=torch.device(device or "cpu"))
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device is None or torch.device(device).type == "cuda"
    if torch.cuda.is_available() and cuda:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(
            backend, timeout=timedelta(seconds=timeout_s),
            device_id=device if backend == "nccl" else None)
    return Parallel(rank, world_size, device, local_rank, shard)


def teardown() -> None:
    """Leave the process group (at the end of a run, or after an error)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def check_agreement(par: Parallel, options: dict) -> None:
    """ValueError on every rank, naming each option and every rank's
    value, unless all ranks hold the same ``options`` (e.g. their
    command-line arguments). Ranks that disagree on the learning rate or
    seed would train different models in silence; on the number of steps,
    one would wait for the others until the timeout."""
    if not par.enabled:
        return
    everyone: list = [None] * par.world_size
    dist.all_gather_object(everyone, dict(options))
    names = sorted(set().union(*everyone), key=str)
    differing = [name for name in names
                 if len({repr(o.get(name, "(absent)")) for o in everyone}) > 1]
    if not differing:
        return
    listed = "; ".join(
        f"{name}: " + ", ".join(f"rank {r} {o.get(name, '(absent)')}"
                                for r, o in enumerate(everyone))
        for name in differing)
    raise ValueError(f"the processes were launched with different options: "
                     f"{listed}. Launch every process with the same "
                     f"arguments")


def barrier(par: Parallel, timeout_s: float = TIMEOUT_S) -> None:
    """Wait for every rank. On gloo a rank that never arrives is named in
    the error after timeout_s."""
    if not par.enabled:
        return
    if dist.get_backend() == "gloo":
        dist.monitored_barrier(timeout=timedelta(seconds=timeout_s))
    else:
        dist.barrier()


def mean_across(value: torch.Tensor | float, par: Parallel) -> float:
    """The mean of a scalar over all ranks (the loss of the whole batch,
    for logging)."""
    if not par.enabled:
        return float(value)
    t = torch.as_tensor(value, dtype=torch.float64).detach().reshape(1)
    t = t.to(par.device)                                             # (1,)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.item() / par.world_size


def parallelize(model: torch.nn.Module, par: Parallel) -> torch.nn.Module:
    """The model as ``par``'s processes train it: DDP (gradients
    all-reduced after backward) or, with ``par.shard``, FSDP2. One
    process: unchanged."""
    if not par.enabled:
        return model
    if par.shard:
        return apply_fsdp(model)
    return apply_ddp(model, par)


def apply_fsdp(model: torch.nn.Module) -> torch.nn.Module:
    """``fully_shard`` on every block, then on the whole model (embedding,
    final norm, head): one all-gather / reduce-scatter per block."""
    from torch.distributed.fsdp import fully_shard

    for block in model.layers:
        fully_shard(block)
    return fully_shard(model)             # in place: the model is itself


def apply_ddp(model: torch.nn.Module, par: Parallel) -> torch.nn.Module:
    """A DDP wrapper around the model (the model stays its ``.module``)."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [par.device.index] if par.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def state_bytes(model: torch.nn.Module,
                optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank holds for parameters and optimizer state (the local
    shards under FSDP2)."""
    def nbytes(t: torch.Tensor) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    params = {id(p): p for p in model.parameters()}.values()
    param_bytes = sum(nbytes(p) for p in params)
    optim_bytes = sum(nbytes(v) for s in optimizer.state.values()
                      for v in s.values()
                      if isinstance(v, torch.Tensor) and v.dim() > 0)
    return {"parameters": param_bytes, "optimizer": optim_bytes,
            "total": param_bytes + optim_bytes}
