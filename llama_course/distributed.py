"""Training on several processes (Chapter 13): data parallel, fully sharded, and what each costs.

    data parallel (DDP)      every rank holds the whole model and reads its own rows of the global
                             batch; after backward one all-reduce averages the gradients, so every
                             rank takes the same optimizer step as one process with the whole batch
    fully sharded (FSDP2)    each block's parameters, gradients and AdamW moments are split into N
                             shards (ZeRO-3); a block's weights are all-gathered just before its
                             forward and backward, and its gradients are reduce-scattered after
    memory per parameter     ZeRO (Rajbhandari et al. 2020), mixed precision with AdamW:
                             2 (bf16 weights) + 2 (bf16 gradients) + 12 (fp32 master, m, v) = 16 bytes
                             DDP 16 | ZeRO-1 4 + 12/N | ZeRO-2 2 + 14/N | ZeRO-3 16/N
    communication per step   ring all-reduce sends 2 (N-1)/N * P values per rank; reduce-scatter
                             and all-gather (N-1)/N * P each. DDP, ZeRO-1/2: 2 (N-1)/N * P;
                             ZeRO-3 (FSDP): 3 (N-1)/N * P (weights gathered for forward and backward)

The launcher (torchrun) starts one process per device and sets RANK, WORLD_SIZE, LOCAL_RANK and
the rendezvous address; ``setup`` reads them, choosing NCCL on CUDA and gloo on CPU.

    torchrun --standalone --nproc-per-node 2 -m llama_course.train --config tiny           # DDP
    torchrun --standalone --nproc-per-node 2 -m llama_course.train --config tiny --shard   # FSDP2
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from .checks import check_bool, check_one_of, check_positive_int

STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
TIMEOUT_S = 300   # a collective that waits longer than this ends the run instead of hanging


# ------------------------------------------------------------------ memory and communication


def training_bytes_per_parameter(mixed_precision: bool = True) -> dict[str, int]:
    """Bytes each parameter needs while training with AdamW, before any activation.

        mixed precision   weights 2 (bf16) + gradients 2 (bf16) + master copy 4 + m 4 + v 4 = 16
        float32           weights 4 + gradients 4 + m 4 + v 4 = 16 (no master copy)
    """
    check_bool("mixed_precision", mixed_precision)
    low = 2 if mixed_precision else 4
    parts = {"weights": low, "gradients": low, "master": 4 if mixed_precision else 0, "adam_m": 4, "adam_v": 4}
    parts["total"] = sum(parts.values())
    return parts


def _check_strategy(strategy, n_gpus) -> None:
    check_one_of("strategy", strategy, STRATEGIES)
    check_positive_int("n_gpus", n_gpus)


def memory_per_gpu(n_params: int, n_gpus: int, strategy: str = "ddp", mixed_precision: bool = True) -> float:
    """Bytes of weights, gradients and optimizer state on each of ``n_gpus`` (ZeRO's Figure 1).

        ddp    (w + g + o) P          nothing is split
        zero1  (w + g + o / N) P      optimizer state split
        zero2  (w + (g + o) / N) P    gradients too
        zero3  (w + g + o) P / N      weights too (FSDP)
    """
    _check_strategy(strategy, n_gpus)
    b = training_bytes_per_parameter(mixed_precision)
    w, g, o = b["weights"], b["gradients"], b["master"] + b["adam_m"] + b["adam_v"]
    n = n_gpus
    per_param = {"ddp": w + g + o, "zero1": w + g + o / n, "zero2": w + (g + o) / n, "zero3": (w + g + o) / n}
    return per_param[strategy] * n_params


def communication_bytes(n_params: int, n_gpus: int, strategy: str = "ddp", bytes_per_value: int = 2) -> float:
    """Bytes each rank sends per optimizer step with ring collectives (the same amount arrives).

        all-reduce of P values       2 (N-1)/N P      = reduce-scatter + all-gather
        ddp, zero1, zero2            2 (N-1)/N P      (ZeRO-2 reduce-scatters the gradients and
                                                       all-gathers the updated weights: the same)
        zero3 (FSDP)                 3 (N-1)/N P      all-gather for forward, again for backward,
                                                       reduce-scatter of the gradients
    """
    _check_strategy(strategy, n_gpus)
    share = (n_gpus - 1) / n_gpus
    return (3 if strategy == "zero3" else 2) * share * n_params * bytes_per_value


# -------------------------------------------------------------------------- process groups


@dataclass(frozen=True)
class Parallel:
    """Where this process stands: its rank among world_size, its device, and whether it shards."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    shard: bool = False

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup(shard: bool = False, device=None, timeout_s: float = TIMEOUT_S) -> Parallel:
    """Join the process group torchrun describes (NCCL on CUDA, gloo on CPU); one process without it.

    ``--shard`` needs at least two processes: there is nothing to split among one."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if shard and world_size < 2:
        raise ValueError("--shard splits the model across processes and needs at least 2: launch with "
                         "torchrun --nproc-per-node N (N >= 2)")
    if world_size < 2:
        return Parallel(device=torch.device(device or "cpu"), shard=False)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s),
                                device_id=device if backend == "nccl" else None)
    return Parallel(rank, world_size, local_rank, device, shard)


def teardown() -> None:
    """Leave the process group (at the end of a run, or after an error)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def check_agreement(par: Parallel, options: dict) -> None:
    """ValueError on every rank, naming each option and every rank's value, unless all ranks hold
    the same ``options`` (e.g. their command-line arguments). Ranks that disagree on the learning
    rate or seed would train different models in silence; on the number of steps, one would wait
    for the others until the timeout."""
    if not par.enabled:
        return
    everyone: list = [None] * par.world_size
    dist.all_gather_object(everyone, dict(options))
    names = sorted(set().union(*everyone), key=str)
    differing = [name for name in names if len({repr(o.get(name, "(absent)")) for o in everyone}) > 1]
    if differing:
        raise ValueError("the processes were launched with different options: " + "; ".join(
            f"{name}: " + ", ".join(f"rank {r} {o.get(name, '(absent)')}" for r, o in enumerate(everyone))
            for name in differing) + ". Launch every process with the same arguments")


def barrier(par: Parallel, timeout_s: float = TIMEOUT_S) -> None:
    """Wait for every rank. On gloo a rank that never arrives is named in the error after timeout_s."""
    if not par.enabled:
        return
    if dist.get_backend() == "gloo":
        dist.monitored_barrier(timeout=timedelta(seconds=timeout_s))
    else:
        dist.barrier()


def check_batch(batch_size: int, world_size: int, accum_steps: int = 1) -> int:
    """Rows per rank per micro-step: batch_size / (world_size * accum_steps), which must be whole."""
    for name, value in (("batch_size", batch_size), ("world_size", world_size), ("accum_steps", accum_steps)):
        check_positive_int(name, value)
    if batch_size % (world_size * accum_steps):
        raise ValueError(f"batch_size ({batch_size}) must be divisible by world_size ({world_size}) x "
                         f"accum_steps ({accum_steps}): every rank reads the same number of windows")
    return batch_size // (world_size * accum_steps)


def local_rows(windows: torch.Tensor, par: Parallel) -> torch.Tensor:
    """This rank's rows of the global batch (B, T+1) -> (B / N, T+1): rank r reads rows r*B/N ..
    All ranks draw the same windows from the same seed, so together they read exactly one batch."""
    rows = check_batch(windows.shape[0], par.world_size)
    return windows[par.rank * rows:(par.rank + 1) * rows]    # (B/N, T+1)


def mean_across(value: torch.Tensor | float, par: Parallel) -> float:
    """The mean of a scalar over all ranks (the loss of the whole batch, for logging)."""
    if not par.enabled:
        return float(value)
    t = torch.as_tensor(value, dtype=torch.float64).detach().reshape(1).to(par.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.item() / par.world_size


# ------------------------------------------------------------------------------- wrapping


def wrap(model: torch.nn.Module, par: Parallel) -> torch.nn.Module:
    """DDP (gradients all-reduced after backward) or, with ``par.shard``, FSDP2: ``fully_shard`` on
    every block, then on the whole model (embedding, final norm, head). One process: unchanged."""
    if not par.enabled:
        return model
    if par.shard:
        from torch.distributed.fsdp import fully_shard

        for block in model.layers:
            fully_shard(block)           # one all-gather / reduce-scatter per block
        return fully_shard(model)        # the rest: embedding, final norm, head
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[par.device.index] if par.device.type == "cuda" else None)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DDP wrapper (FSDP2 works in place: the model is itself)."""
    return getattr(model, "module", model)


@contextlib.contextmanager
def gradient_sync(model: torch.nn.Module, enabled: bool):
    """Inside, backward skips the gradient all-reduce / reduce-scatter unless ``enabled``: gradient
    accumulation communicates once per optimizer step, on its last micro-batch."""
    if enabled or not isinstance(model, torch.nn.Module):
        yield
    elif hasattr(model, "no_sync"):                          # DDP
        with model.no_sync():
            yield
    elif hasattr(model, "set_requires_gradient_sync"):       # FSDP2
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        yield


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank holds for parameters and optimizer state (the local shards under FSDP2)."""
    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t

    params = {id(p): p for p in model.parameters()}.values()
    param_bytes = sum(local(p).numel() * local(p).element_size() for p in params)
    optim_bytes = sum(local(v).numel() * local(v).element_size() for s in optimizer.state.values()
                      for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    return {"parameters": param_bytes, "optimizer": optim_bytes, "total": param_bytes + optim_bytes}


# ---------------------------------------------------------------------------- checkpoints

SHARDED = "dcp"   # subdirectory of a checkpoint written by torch.distributed.checkpoint


def save(path: str | Path, model, optimizer, step: int, generator: torch.Generator, history: dict, cfg,
         par: Parallel, scaler: torch.amp.GradScaler | None = None) -> None:
    """Write a checkpoint once, by train's crash-safe protocol (staging folder, fsync, manifest of
    SHA-256, rename). Not sharded: rank 0 writes train.save_checkpoint's files. Sharded: every rank
    writes its own shards into the staging folder with torch.distributed.checkpoint (no rank ever
    holds the whole model), then rank 0 adds state.pt, config.json and the manifest and promotes it."""
    from . import train

    path = Path(path)
    if not par.shard:
        if par.is_main:
            train.save_checkpoint(path, unwrap(model), optimizer, step, generator, history, cfg, scaler)
        barrier(par)
        return
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    if par.is_main:
        train.recover_checkpoint(path)                         # 0. finish or undo an interrupted save
    barrier(par)
    model_state, optim_state = get_state_dict(model, optimizer)
    shards = path.with_name(path.name + ".tmp") / SHARDED
    try:
        dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(shards))  # each file fsync'd
    except BaseException as err:                               # dcp's CheckpointException: every rank's errors
        raise _save_failure(err, shards.parent) from err
    if par.is_main:                                            # dcp.save returns once every rank has written
        files = train.run_state_files(unwrap(model).config, None, step, generator, history, cfg, scaler)
        written = tuple(f.relative_to(shards.parent).as_posix() for f in shards.rglob("*") if f.is_file())
        train.commit_checkpoint(path, step, files, written)
    barrier(par)


def _save_failure(err: BaseException, folder: Path) -> BaseException:
    """The error to raise for a failed sharded save: a full disk on any rank (OSError ENOSPC, or the
    short write torch's zip writer reports as "unexpected pos") becomes one OSError that says so and
    names the folder, as the unsharded save's does; anything else is raised as it is."""
    causes = [failure[0] for failure in getattr(err, "failures", {}).values()] or [err]
    if not any(isinstance(c, OSError) and c.errno == errno.ENOSPC or "unexpected pos" in str(c) for c in causes):
        return err
    free = shutil.disk_usage(folder if folder.exists() else folder.parent).free
    return OSError(errno.ENOSPC, f"No space left on device while writing the sharded checkpoint to {folder} "
                                 f"({free} bytes free there now): free space on that disk or choose another "
                                 f"--out; the previous checkpoint, if any, is kept")


def load(path: str | Path, model, optimizer, generator: torch.Generator, cfg, par: Parallel,
         scaler: torch.amp.GradScaler | None = None):
    """Resume from the newest complete checkpoint at ``path``, written with any number of processes;
    returns (step, history). FileNotFoundError if there is none.

    A sharded checkpoint is read by torch.distributed.checkpoint, which re-slices every tensor for
    the processes reading it (2 ranks -> 1, 1 -> 4, ...); train.save_checkpoint's files are read by
    every rank. Both are checked first: every SHA-256, and the model and schedule (ValueError)."""
    from . import train

    found = train.find_checkpoint(path)
    if found is None:
        raise FileNotFoundError(f"nothing to resume: {path} holds no complete checkpoint")
    if not (found / SHARDED).is_dir():
        if par.shard:
            raise ValueError(f"{found} is a whole-model checkpoint; resume it without --shard (the "
                             f"sharded runs read checkpoints written with --shard)")
        return train.load_checkpoint(found, unwrap(model), optimizer, generator, cfg, scaler)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    train.check_checkpoint(found, unwrap(model).config, cfg)
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    with warnings.catch_warnings():   # one process reading a sharded checkpoint is intended, not a mistake
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(found / SHARDED))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return train.restore_run_state(found, None, generator, scaler)


# ------------------------------------------------------------------ a run to try a machine with


def demo_data(vocab_size: int = 64, n_tokens: int = 3000, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded tokens with something to learn: train, validation. With probability 0.6 a token is set
    to its predecessor's drawn value + 1; as predecessors may be set too, about a quarter of the
    tokens end up equal to the token before them + 1."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (n_tokens,), generator=g)          # (n,)
    follow = torch.rand(n_tokens, generator=g) < 0.6                         # (n,)
    tokens[1:][follow[1:]] = (tokens[:-1][follow[1:]] + 1) % vocab_size
    cut = int(0.9 * n_tokens)
    return tokens[:cut], tokens[cut:]


def demo(par: Parallel, steps: int = 6, batch_size: int = 8) -> list[float]:
    """Train a tiny LLaMA on demo_data for ``steps`` steps on however many processes there are;
    every process gets the same losses (of the whole batch). Seeded: the same numbers every run."""
    from .config import LlamaConfig
    from .model import Llama
    from .train import TrainConfig, train

    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                              max_seq_len=32), device=par.device)
    cfg = TrainConfig(steps=steps, batch_size=batch_size, context_length=16, lr=3e-3, warmup_steps=2,
                      eval_interval=steps, eval_batches=1, progress=False)
    return train(model, *demo_data(), cfg, parallel=par)["train_loss"]


def main(argv: list[str] | None = None) -> int:
    """torchrun --nproc-per-node N -m llama_course.distributed [--shard]: a 6-step check that the
    processes can train together; rank 0 prints the losses."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m llama_course.distributed")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--shard", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    par = setup(args.shard)
    try:
        losses = demo(par, args.steps, args.batch_size)
        if par.is_main:
            kind = "FSDP2" if par.shard else "DDP" if par.enabled else "one process"
            print(f"{par.world_size} process(es), {kind}, backend {dist.get_backend() if par.enabled else '-'}")
            for step, loss in enumerate(losses):
                print(f"step {step}  loss {loss:.4f}")
    finally:
        teardown()
    return 0


if __name__ == "__main__":
    import sys

    from torch.distributed.elastic.multiprocessing.errors import record

    sys.exit(record(main)())
