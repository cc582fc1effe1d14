"""The sharded checkpointer (Chapter 13): every rank writes its own shards,
by Chapter 11's crash-safe protocol (llama_course.train.checkpoint).

    not sharded (DDP)   every rank holds the same weights: rank 0 writes
                        the ordinary checkpoint, the others wait
    sharded (FSDP2)     no rank holds the whole model: each writes its
                        shards into the staging folder's SHARDED/ with
                        torch.distributed.checkpoint (dcp), then rank 0
                        adds state.pt, config.json and the manifest of
                        SHA-256 and promotes the folder
    loading             dcp re-slices every tensor for the processes
                        reading it (2 ranks -> 1, 1 -> 4, ...)
"""

from __future__ import annotations

import errno
import shutil
import warnings
from pathlib import Path

import torch

from ..train import checkpoint as run_checkpoint
from ..train.checkpoint import SHARDED
from ..train.world import unwrap


def save(path: str | Path, model, optimizer, step: int,
         generator: torch.Generator, history: dict, cfg, par,
         scaler: torch.amp.GradScaler | None = None) -> None:
    """Write a checkpoint once, by the crash-safe protocol. Not sharded:
    rank 0 writes the whole model's files. Sharded: every rank writes its
    own shards into the staging folder, then rank 0 completes it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = Path(path)
    if not par.shard:
        if par.is_main:
            run_checkpoint.save_checkpoint(path, unwrap(model), optimizer,
                                           step, generator, history, cfg,
                                           scaler)
        par.barrier()
        return
    if par.is_main:
        run_checkpoint.recover_checkpoint(path)   # 0. a crashed save
    par.barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    staging = run_checkpoint.sibling(path, ".tmp")
    try:                                             # each file fsync'd
        dcp.save({"model": model_state, "optimizer": optim_state},
                 checkpoint_id=str(staging / SHARDED))
    except BaseException as err:          # dcp's error: every rank's errors
        raise _save_failure(err, staging) from err
    if par.is_main:                # dcp.save returns once every rank wrote
        files = run_checkpoint.run_state_files(
            unwrap(model).config, None, step, generator, history, cfg,
            scaler)
        written = tuple(f.relative_to(staging).as_posix()
                        for f in (staging / SHARDED).rglob("*")
                        if f.is_file())
        run_checkpoint.commit_checkpoint(path, step, files, written)
    par.barrier()


def _save_failure(err: BaseException, folder: Path) -> BaseException:
    """The error to raise for a failed sharded save: a full disk on any
    rank (OSError ENOSPC, or the short write torch's zip writer reports as
    "unexpected pos") becomes one OSError that says so and names the
    folder, as the unsharded save's does; anything else is raised as it
    is."""
    failures = getattr(err, "failures", {}).values()
    causes = [failure[0] for failure in failures] or [err]
    if not any(isinstance(c, OSError) and c.errno == errno.ENOSPC
               or "unexpected pos" in str(c) for c in causes):
        return err
    where = folder if folder.exists() else folder.parent
    free = shutil.disk_usage(where).free
    return OSError(errno.ENOSPC,
                   f"No space left on device while writing the sharded "
                   f"checkpoint to {folder} ({free} bytes free there now): "
                   f"free space on that disk or choose another --out; the "
                   f"previous checkpoint, if any, is kept")


def load(path: str | Path, model, optimizer, generator: torch.Generator,
         cfg, par, scaler: torch.amp.GradScaler | None = None):
    """Resume from the newest complete checkpoint at ``path``, written
    with any number of processes; returns (step, history).
    FileNotFoundError if there is none. Both kinds are checked first:
    every SHA-256, and the model and schedule (ValueError)."""
    found = run_checkpoint.find_checkpoint(path)
    if found is None:
        raise FileNotFoundError(f"nothing to resume: {path} holds no "
                                f"complete checkpoint")
    if not (found / SHARDED).is_dir():
        if par.shard:
            raise ValueError(f"{found} is a whole-model checkpoint; resume "
                             f"it without --shard (the sharded runs read "
                             f"checkpoints written with --shard)")
        return run_checkpoint.load_checkpoint(found, unwrap(model),
                                              optimizer, generator, cfg,
                                              scaler)
    run_checkpoint.check_checkpoint(found, unwrap(model).config, cfg)
    _load_shards(found / SHARDED, model, optimizer)
    return run_checkpoint.restore_run_state(found, None, generator, scaler)


def _load_shards(folder: Path, model, optimizer) -> None:
    """Read dcp's shards into the model and optimizer, re-sliced for this
    process (one process reading a sharded checkpoint is intended)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_state_dict,
        set_state_dict,
    )

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore",
                                message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])
