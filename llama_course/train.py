"""Training a tiny LLaMA (Chapter 11): data, the LLaMA recipe, checkpoints, and a command line.

    data       tokenize the corpus once (cached on disk as uint16/uint32), random windows of
               context_length + 1 tokens drawn with a seeded generator, a train/validation split
    optimizer  AdamW, betas (0.9, 0.95), weight decay 0.1 on matrices only (not on norm weights)
    schedule   linear warmup, then cosine decay to min_lr (LLaMA: 10% of the peak)
    stability  gradient clipping at 1.0; bf16 autocast on GPUs; optional torch.compile
    checkpoints  weights in safetensors + optimizer, schedule and RNG state, written to a temp
               file and renamed, so an interrupted run leaves the last complete one intact

    python -m llama_course.train --config tiny --steps 300 --out runs/tiny
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import distributed
from .config import LlamaConfig, _check_int
from .loss import next_token_loss
from .model import Llama

# ---------------------------------------------------------------------------------------- data


def tokenize_to_file(text: str, tokenizer, path: str | Path) -> np.ndarray:
    """Encode ``text`` once and keep the ids on disk (uint16 if the vocabulary fits, else uint32);
    later calls with the same text and tokenizer memory-map the file instead of re-encoding."""
    path = Path(path)
    dtype = np.uint16 if len(tokenizer.vocab) <= 2**16 else np.uint32
    identity = json.dumps([tokenizer.pattern, sorted(tokenizer.special_tokens.items()),
                           [a.hex() + " " + b.hex() for a, b in tokenizer.merges], len(tokenizer.vocab)])
    key = hashlib.sha256(text.encode("utf-8") + identity.encode()).hexdigest()[:16]
    target = path.with_name(f"{path.stem}-{key}{path.suffix or '.bin'}")
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        ids = np.asarray(tokenizer.encode(text), dtype=dtype)
        temporary = target.with_suffix(".tmp")
        ids.tofile(temporary)
        os.replace(temporary, target)
    return np.memmap(target, dtype=dtype, mode="r")


def shuffle_documents(text: str, seed: int = 0, separator: str = "<|endoftext|>") -> str:
    """The corpus's documents (each starts with a "Title:" or "标题：" line) in a seeded random
    order, joined by ``separator``, so that a tail split for validation samples every kind of text."""
    import random

    documents = re.split(r"\n\n(?=Title:|标题：)", text.strip())
    random.Random(seed).shuffle(documents)
    return separator.join(documents)


def split(tokens, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """The first (1 - val_fraction) of the tokens for training, the rest for validation (int64)."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    data = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    cut = int(len(data) * (1 - val_fraction))
    return data[:cut], data[cut:]


def get_batch(data: torch.Tensor, batch_size: int, context_length: int, generator: torch.Generator,
              device=None) -> torch.Tensor:
    """``batch_size`` random windows of context_length + 1 tokens, (B, T + 1). The model reads a
    window and next_token_loss(model(w), w) scores its context_length next-token predictions."""
    _check_int("batch_size", batch_size)
    _check_int("context_length", context_length)
    if len(data) < context_length + 1:
        raise ValueError(f"the data has {len(data)} tokens, fewer than one window of context_length + 1 = "
                         f"{context_length + 1}")
    starts = torch.randint(0, len(data) - context_length, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(context_length + 1)                                                  # (T+1,)
    windows = data[starts[:, None] + offsets]                                                   # (B, T+1)
    return windows.to(device) if device is not None else windows


# ----------------------------------------------------------------------------------- the recipe


@dataclass
class TrainConfig:
    """Everything about a run except the model's shape."""

    steps: int = 300
    batch_size: int = 16
    context_length: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1          # LLaMA decays to 10% of the peak
    warmup_steps: int = 30
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_interval: int = 50
    eval_batches: int = 8
    checkpoint_interval: int = 0       # 0: only at the end (when out_dir is set)
    seed: int = 0
    compile: bool = False
    progress: bool = True
    accum_steps: int = 1               # micro-batches per optimizer step (gradient accumulation)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to cfg.lr over warmup_steps, then cosine decay to min_lr_ratio * lr at cfg.steps."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (embedding, projections, head) and none on norm weights."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()  # a tied head counts once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=None)


@torch.no_grad()
def evaluate(model, data: torch.Tensor, cfg: TrainConfig, device) -> float:
    """Mean next-token loss over cfg.eval_batches fixed windows (the same ones every time)."""
    model.eval()
    generator = torch.Generator().manual_seed(cfg.seed + 1)
    losses = []
    for _ in range(cfg.eval_batches):
        x = get_batch(data, cfg.batch_size, cfg.context_length, generator, device)
        with _autocast(device):
            losses.append(next_token_loss(model(x), x).item())
    model.train()
    return sum(losses) / len(losses)


def _autocast(device):
    device = torch.device(device)
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast(device.type, enabled=False)


def train(model: Llama, train_data: torch.Tensor, val_data: torch.Tensor, cfg: TrainConfig,
          out_dir: str | Path | None = None, resume: bool = False, device=None, until: int | None = None,
          parallel: distributed.Parallel | None = None) -> dict:
    """Train ``model``; returns the history {"step", "train_loss", "val_step", "val_loss", "tokens_per_s"}.

    With ``out_dir``, checkpoints go to out_dir/checkpoint (and ``resume=True`` continues from it:
    the same batches, learning rates and losses as an uninterrupted run). ``until`` stops after
    that many steps of the cfg.steps schedule (and checkpoints there), to split a run in pieces.
    ``parallel`` (from distributed.setup, under torchrun): each rank trains on its rows of every
    batch, wrapped in DDP or FSDP2 (Chapter 13); the losses recorded are the whole batch's.
    """
    device = torch.device(device or next(model.parameters()).device)
    check_train_inputs(model, train_data, val_data, cfg)
    par = parallel or distributed.Parallel(device=device)
    distributed.check_batch(cfg.batch_size, par.world_size, cfg.accum_steps)
    wrapped = distributed.wrap(model, par)                     # DDP, FSDP2, or the model itself
    optimizer = make_optimizer(model, cfg)                     # after wrap: FSDP2 shards the parameters
    generator = torch.Generator().manual_seed(cfg.seed)
    history = {"step": [], "train_loss": [], "val_step": [], "val_loss": [], "tokens_per_s": 0.0}
    start_step = 0
    if resume and out_dir is not None and (Path(out_dir) / "checkpoint").exists():
        start_step, history = distributed.load(Path(out_dir) / "checkpoint", model, optimizer, generator, par)
    step_fn = torch.compile(wrapped) if cfg.compile else wrapped
    model.train()
    tokens, started = 0, time.perf_counter()
    stop = cfg.steps if until is None else min(until, cfg.steps)
    bar = _progress(range(start_step, stop), cfg.progress and par.is_main)
    for step in bar:
        x = get_batch(train_data, cfg.batch_size, cfg.context_length, generator, device)   # (B, T+1)
        loss = train_step(step_fn, optimizer, distributed.local_rows(x, par), lr_at(step, cfg), cfg)
        loss = distributed.mean_across(loss, par)                                          # the whole batch's
        tokens += x.numel()
        log_step(history, step, loss, model, val_data, cfg, device)
        history["tokens_per_s"] = tokens / (time.perf_counter() - started)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{history['tokens_per_s']:.0f}")
        if out_dir is not None and should_checkpoint(step, stop, cfg):
            distributed.save(Path(out_dir) / "checkpoint", model, optimizer, step + 1, generator, history, cfg, par)
    model.eval()
    return history


def check_train_inputs(model: Llama, train_data: torch.Tensor, val_data: torch.Tensor, cfg: TrainConfig) -> None:
    """ValueError unless a window of context_length + 1 tokens fits the model and both data sets."""
    if cfg.context_length + 1 > model.config.max_seq_len:
        raise ValueError(f"context_length + 1 ({cfg.context_length + 1}) exceeds the model's max_seq_len "
                         f"({model.config.max_seq_len})")
    for name, data in (("train", train_data), ("validation", val_data)):
        if len(data) < cfg.context_length + 1:
            raise ValueError(f"the {name} data has {len(data)} tokens, fewer than one window of "
                             f"context_length + 1 = {cfg.context_length + 1}")


def train_step(model, optimizer: torch.optim.Optimizer, x: torch.Tensor, lr: float, cfg: TrainConfig) -> float:
    """One optimizer step on the windows x (B, T+1) at learning rate ``lr``; returns the loss.

    ``model`` is whatever runs the forward pass (the model, its torch.compile, a DDP wrapper).
    With cfg.accum_steps > 1 the rows go through in that many micro-batches, gradients adding up
    (and synchronised across processes only on the last one).
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss = 0.0
    for i, micro in enumerate(x.chunk(cfg.accum_steps)):          # (B/accum, T+1) each
        with distributed.gradient_sync(model, i == cfg.accum_steps - 1):
            with _autocast(x.device):
                part = next_token_loss(model(micro), micro) / cfg.accum_steps  # scalar: its share of the mean
            part.backward()
        loss += part.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()
    return loss


def log_step(history: dict, step: int, loss: float, model, val_data: torch.Tensor, cfg: TrainConfig,
             device) -> None:
    """Record the step's training loss, and the validation loss every eval_interval steps and at the end."""
    history["step"].append(step)
    history["train_loss"].append(loss)
    if (step + 1) % cfg.eval_interval == 0 or step == cfg.steps - 1:
        history["val_step"].append(step)
        history["val_loss"].append(evaluate(model, val_data, cfg, device))


def should_checkpoint(step: int, stop: int, cfg: TrainConfig) -> bool:
    """Save after this step? At the end of the schedule, where the run stops, and every checkpoint_interval."""
    interval = cfg.checkpoint_interval and (step + 1) % cfg.checkpoint_interval == 0
    return step == cfg.steps - 1 or step == stop - 1 or bool(interval)


def _progress(steps, enabled: bool):
    if not enabled:
        return steps
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return steps
    return tqdm(steps, desc="training", unit="step")


# ---------------------------------------------------------------------------------- checkpoints


def save_checkpoint(path: str | Path, model: Llama, optimizer, step: int, generator: torch.Generator,
                    history: dict, cfg: TrainConfig) -> None:
    """Write path/{model.safetensors, state.pt, config.json}, each via a temporary file and a rename,
    and ``path`` itself as a whole: the previous checkpoint stays complete until the new one is."""
    from safetensors.torch import save_file

    path = Path(path)
    staging = path.with_name(path.name + ".tmp")
    staging.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        state.pop("lm_head.weight", None)                      # stored once, as the embedding
    save_file(state, str(staging / "model.safetensors"))
    torch.save({"step": step, "optimizer": optimizer.state_dict(), "generator": generator.get_state(),
                "torch_rng": torch.get_rng_state(), "history": history}, staging / "state.pt")
    (staging / "config.json").write_text(json.dumps({"model": dataclasses.asdict(model.config),
                                                     "train": dataclasses.asdict(cfg)}, indent=1))
    previous = path.with_name(path.name + ".old")
    if path.exists():
        os.replace(path, previous)                             # keep it until the new one is in place
    os.replace(staging, path)
    if previous.exists():
        for child in previous.iterdir():
            child.unlink()
        previous.rmdir()


def load_checkpoint(path: str | Path, model: Llama, optimizer=None, generator: torch.Generator | None = None):
    """Load weights (and optimizer / RNG state when given) saved by save_checkpoint; returns (step, history).
    A checkpoint of another model shape raises ValueError naming the differing fields."""
    from safetensors.torch import load_file

    path = Path(path)
    saved = json.loads((path / "config.json").read_text())["model"]
    ours = dataclasses.asdict(model.config)
    differing = {k: (saved.get(k), v) for k, v in ours.items() if saved.get(k) != v and k != "rope_scaling"}
    if differing:
        raise ValueError("the checkpoint was made for another model: " +
                         ", ".join(f"{k}: checkpoint {a!r}, model {b!r}" for k, (a, b) in differing.items()))
    weights = load_file(str(path / "model.safetensors"), device=str(next(model.parameters()).device))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and model.config.tie_embeddings)]
    if missing or unexpected:
        raise ValueError(f"checkpoint does not fit: missing {missing}, unexpected {unexpected}")
    state = torch.load(path / "state.pt", weights_only=True)
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if generator is not None:
        generator.set_state(state["generator"])
    torch.set_rng_state(state["torch_rng"])
    return state["step"], state["history"]


# ------------------------------------------------------------------------------- command line

MODEL_CONFIGS = {  # named sizes for the command line and the lab
    "tiny": dict(d_model=128, n_layers=4, n_heads=4, d_ff=352, max_seq_len=256),
    "small": dict(d_model=256, n_layers=6, n_heads=8, n_kv_heads=4, d_ff=704, max_seq_len=512),
    "base": dict(d_model=512, n_layers=8, n_heads=8, n_kv_heads=4, d_ff=1408, max_seq_len=1024),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_course.train", description="Train a tiny LLaMA "
                                     "on the course corpus.")
    parser.add_argument("--config", choices=sorted(MODEL_CONFIGS), default="tiny")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("runs/tiny"))
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accum-steps", type=int, default=1, help="micro-batches per step (gradient accumulation)")
    parser.add_argument("--shard", action="store_true", help="under torchrun: FSDP2 (shard weights, gradients "
                        "and optimizer state) instead of DDP")
    args = parser.parse_args(argv)
    par = distributed.setup(args.shard, device=os.environ.get("LLAMA_COURSE_DEVICE"))  # torchrun: join the group
    try:
        return _main(args, par)
    finally:
        distributed.teardown()


def _main(args, par: distributed.Parallel) -> int:
    from .data import course_corpus
    from .generate import generate
    from .tokenizer import train_bpe
    from .utils import get_device, seed_everything

    distributed.check_batch(args.batch_size, par.world_size, args.accum_steps)
    seed_everything(args.seed)
    device = par.device if par.enabled else get_device()
    tokenizer = train_bpe(course_corpus(), args.vocab_size, special_tokens=["<|endoftext|>"])
    args.out.mkdir(parents=True, exist_ok=True)
    text = shuffle_documents(course_corpus(), args.seed)  # validation: a tenth of every kind of text
    if par.is_main:
        tokenizer.save(args.out / "tokenizer.json")
    for writer in (True, False):                          # rank 0 writes the token cache, then the others read it
        if par.is_main == writer:
            train_data, val_data = split(tokenize_to_file(text, tokenizer, args.out / "tokens.bin"))
        distributed.barrier(par)
    config = LlamaConfig(vocab_size=len(tokenizer), **MODEL_CONFIGS[args.config])
    model = Llama(config, device=device)
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, context_length=args.context_length,
                      lr=args.lr, warmup_steps=max(1, args.steps // 10), seed=args.seed, compile=args.compile,
                      accum_steps=args.accum_steps)
    say = print if par.is_main else (lambda *a, **k: None)
    say(f"{sum(p.numel() for p in model.parameters()):,} parameters on {device} x {par.world_size} "
        f"process(es){' (sharded)' if par.shard else ''}; {len(train_data):,} training tokens")
    history = train(model, train_data, val_data, cfg, out_dir=args.out, resume=args.resume, device=device,
                    parallel=par)
    say(f"final validation loss {history['val_loss'][-1]:.3f}; {history['tokens_per_s']:.0f} tokens/s")
    prompt = torch.tensor([tokenizer.encode("Title: The")], device=device)
    sample = generate(model, prompt, 60, temperature=0.8, top_p=0.95,  # every rank: FSDP2 gathers weights
                      generator=torch.Generator(device=device).manual_seed(args.seed))
    say(tokenizer.decode(sample[0].tolist()))
    return 0


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record  # a failing rank's traceback, summarised

    sys.exit(record(main)())
