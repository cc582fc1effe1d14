"""What the training loop is handed about the processes that run it.

Chapter 11 trains on one process: ``World()`` is rank 0 of 1, reads every
row of each batch, reports its own loss and saves its own checkpoint.
Chapter 13's ``llama_course.parallel.Parallel`` is a World of N processes:
the same questions, answered across ranks (an all-reduce for the mean
loss, a sharded checkpointer). The loop asks only these questions, so it
runs unchanged on one process or many.

    rows(x)        this rank's rows of the global batch, (B, T+1) -> (B/N, T+1)
    mean(loss)     the mean over ranks of a scalar (the whole batch's loss)
    save, load     the run's checkpoint
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import checkpoint
from .data import local_rows


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a wrapper that keeps it as ``.module`` (DDP); the
    model itself otherwise."""
    return getattr(model, "module", model)


@dataclass(frozen=True)
class World:
    """One process: rank 0 of 1 on ``device``."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default=torch.device("cpu"))

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def rows(self, windows: torch.Tensor) -> torch.Tensor:
        """This rank's rows of the batch: (B, T+1) -> (B/N, T+1)."""
        return local_rows(windows, self.rank, self.world_size)

    def mean(self, value: torch.Tensor | float) -> float:
        """The mean of a scalar over all ranks: here, the value itself."""
        return float(value)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model as the loop should run it: here, unchanged."""
        return model

    def barrier(self) -> None:
        """Wait for every rank: here, nobody to wait for."""

    def check_agreement(self, options: dict) -> None:
        """ValueError unless every rank holds the same ``options``."""

    def teardown(self) -> None:
        """Leave the group of processes: here, none to leave."""

    def save(self, path: Path, model, optimizer, step: int,
             generator: torch.Generator, history: dict, cfg,
             scaler=None) -> None:
        """Write the run's checkpoint by the crash-safe protocol."""
        checkpoint.save_checkpoint(path, unwrap(model), optimizer, step,
                                   generator, history, cfg, scaler)

    def load(self, path: Path, model, optimizer,
             generator: torch.Generator, cfg, scaler=None):
        """Resume from the newest complete checkpoint at ``path``;
        returns (step, history)."""
        return checkpoint.resume_checkpoint(path, unwrap(model), optimizer,
                                            generator, cfg, scaler)
