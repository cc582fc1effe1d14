"""A run to try a machine with (Chapter 13): a tiny LLaMA trained for a
few steps on however many processes torchrun starts; every process must
report the losses of one process with the whole batch.

    torchrun --standalone --nproc-per-node 2 -m llama_course.parallel
    python -m llama_course.parallel                    # the same losses
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from ..config import LlamaConfig
from ..model import Llama
from ..train.loop import TrainConfig, train
from .processes import Parallel, setup, teardown


def demo_data(vocab_size: int = 64, n_tokens: int = 3000,
              seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded tokens with something to learn: train, validation. With
    probability 0.6 a token is set to its predecessor's drawn value + 1;
    as predecessors may be set too, about a quarter of the tokens end up
    equal to the token before them + 1."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (n_tokens,), generator=g)  # (n,)
    follow = torch.rand(n_tokens, generator=g) < 0.6                 # (n,)
    tokens[1:][follow[1:]] = (tokens[:-1][follow[1:]] + 1) % vocab_size
    cut = int(0.9 * n_tokens)
    return tokens[:cut], tokens[cut:]


def demo(par: Parallel, steps: int = 6, batch_size: int = 8) -> list[float]:
    """Train a tiny LLaMA on demo_data for ``steps`` steps on however many
    processes there are; every process gets the same losses (of the whole
    batch). Seeded: the same numbers every run."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4,
                         n_kv_heads=2, d_ff=64, max_seq_len=32)
    model = Llama(config, device=par.device)
    cfg = TrainConfig(steps=steps, batch_size=batch_size, context_length=16,
                      lr=3e-3, warmup_steps=2, eval_interval=steps,
                      eval_batches=1, progress=False)
    history = train(par.wrap(model), *demo_data(), cfg, world=par)
    return history["train_loss"]


def main(argv: list[str] | None = None) -> int:
    """torchrun --nproc-per-node N -m llama_course.parallel [--shard]: a
    6-step check that the processes can train together; rank 0 prints
    the losses."""
    parser = argparse.ArgumentParser(prog="python -m llama_course.parallel")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--shard", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    par = setup(args.shard)
    try:
        losses = demo(par, args.steps, args.batch_size)
        if par.is_main:
            kind = ("FSDP2" if par.shard else "DDP" if par.enabled
                    else "one process")
            backend = dist.get_backend() if par.enabled else "-"
            print(f"{par.world_size} process(es), {kind}, backend {backend}")
            for step, loss in enumerate(losses):
                print(f"step {step}  loss {loss:.4f}")
    finally:
        teardown()
    return 0
