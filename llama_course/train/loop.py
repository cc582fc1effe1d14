"""The training loop (Chapter 11): the LLaMA recipe, one step at a time.

    optimizer  AdamW, betas (0.9, 0.95), weight decay 0.1 on matrices only
               (not on norm weights)
    schedule   linear warmup to lr, then cosine decay to min_lr (LLaMA: 10%
               of the peak):
                   lr(s) = lr (s + 1) / warmup                  s < warmup
                   lr(s) = min_lr + (lr - min_lr) (1 + cos(pi p)) / 2
                           p = (s - warmup) / (decay_end - warmup), <= 1
    step       loss = mean next-token cross-entropy over the batch's
               (B, T) predictions; gradients clipped to norm 1.0; bf16
               autocast on GPUs that support it (fp16 with a gradient
               scaler on older CUDA GPUs); a NaN or infinite loss stops
               the run before the weights change

The loop receives the model as it should run (on one process the model
itself; Chapter 13 hands in a DDP or FSDP2 wrapper) and a ``World`` that
answers which rows of each batch are this process's, the mean loss over
processes, and how the run's checkpoint is saved.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checks import (
    check_bool,
    check_int,
    check_number,
    check_positive_int,
    check_positive_number,
)
from ..loss import next_token_loss
from .checkpoint import checkpoint_step, find_checkpoint
from .data import check_batch, get_batch
from .world import World, unwrap


@dataclass
class TrainConfig:
    """Everything about a run except the model's shape."""

    steps: int = 300
    batch_size: int = 16
    context_length: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1      # LLaMA decays to 10% of the peak
    warmup_steps: int = 30
    decay_steps: int | None = None  # cosine ends here (None: at steps)
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_interval: int = 50
    eval_batches: int = 8
    checkpoint_interval: int = 0   # 0: only at the end (when out_dir is set)
    seed: int = 0
    compile: bool = False
    progress: bool = True
    accum_steps: int = 1           # micro-batches per optimizer step

    def __post_init__(self) -> None:
        self.betas = check_train_config(self)


def check_train_config(cfg: TrainConfig) -> tuple[float, float]:
    """TypeError/ValueError naming the first bad field of ``cfg``; returns
    betas as a tuple."""
    for name in ("steps", "batch_size", "context_length", "eval_interval",
                 "eval_batches", "accum_steps"):
        check_positive_int(name, getattr(cfg, name))
    for name in ("warmup_steps", "checkpoint_interval", "seed"):
        check_int(name, getattr(cfg, name), low=0)
    if cfg.decay_steps is not None:
        check_positive_int("decay_steps", cfg.decay_steps)
    check_positive_number("lr", cfg.lr)
    check_positive_number("grad_clip", cfg.grad_clip)
    check_number("min_lr_ratio", cfg.min_lr_ratio, 0, 1)
    check_number("weight_decay", cfg.weight_decay, low=0)
    if not (isinstance(cfg.betas, (tuple, list)) and len(cfg.betas) == 2):
        raise TypeError(f"betas must be a pair of numbers, got {cfg.betas!r}")
    for beta in cfg.betas:
        check_number("betas", beta, 0, 1, high_open=True)
    check_bool("compile", cfg.compile)
    check_bool("progress", cfg.progress)
    return tuple(cfg.betas)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to cfg.lr over warmup_steps, then cosine decay to
    min_lr_ratio * lr at decay_end(cfg) (cfg.steps unless cfg.decay_steps
    says otherwise), then min_lr_ratio * lr."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, decay_end(cfg) - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * progress))


def decay_end(cfg: TrainConfig) -> int:
    """The step at which the cosine decay reaches min_lr: cfg.decay_steps,
    or cfg.steps if it is None."""
    return cfg.steps if cfg.decay_steps is None else cfg.decay_steps


def describe_schedule(cfg: TrainConfig) -> str:
    """The learning-rate schedule in words, e.g. for a run's log."""
    floor, end = cfg.lr * cfg.min_lr_ratio, decay_end(cfg)
    text = (f"learning rate: warmup to {cfg.lr:.3g} over {cfg.warmup_steps} "
            f"steps, cosine decay to {floor:.3g} at step {end}")
    if cfg.steps > end:
        text += f", then {floor:.3g} until step {cfg.steps}"
    return text


def make_optimizer(model: torch.nn.Module,
                   cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (embedding, projections, head)
    and none on norm weights."""
    params = {id(p): p for p in model.parameters()  # a tied head counts once
              if p.requires_grad}.values()
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=None)


@torch.no_grad()
def evaluate(model, data: torch.Tensor, cfg: TrainConfig, device) -> float:
    """Mean next-token loss over cfg.eval_batches fixed windows (the same
    ones every time)."""
    model.eval()
    generator = torch.Generator().manual_seed(cfg.seed + 1)
    losses = []
    for _ in range(cfg.eval_batches):
        x = get_batch(data, cfg.batch_size, cfg.context_length, generator,
                      device)                                    # (B, T+1)
        with _autocast(device):
            losses.append(next_token_loss(model(x), x).item())
    model.train()
    return sum(losses) / len(losses)


def autocast_dtype(device) -> torch.dtype | None:
    """The dtype to autocast to on ``device``: bfloat16 on a GPU that
    computes in it natively (Ampere and later), float16 on an older CUDA
    GPU (T4, V100: with a gradient scaler), None (float32) elsewhere."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    native = torch.cuda.is_bf16_supported(including_emulation=False)
    return torch.bfloat16 if native else torch.float16


def _autocast(device):
    device = torch.device(device)
    dtype = autocast_dtype(device)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def train(model, train_data: torch.Tensor, val_data: torch.Tensor,
          cfg: TrainConfig, out_dir: str | Path | None = None,
          resume: bool = False, device=None, until: int | None = None,
          world: World | None = None) -> dict:
    """Train ``model``; returns the history {"step", "train_loss",
    "val_step", "val_loss", "tokens_per_s"}.

    With ``out_dir``, checkpoints go to out_dir/checkpoint (and
    ``resume=True`` continues from it: the same batches, learning rates
    and losses as an uninterrupted run; without it, a checkpoint already
    there is refused, not replaced). ``until`` stops after that many steps
    of the cfg.steps schedule (and checkpoints there). ``world`` (default:
    one process) says which rows of each batch are this process's, and
    ``model`` arrives as it should run (Chapter 13: wrapped by ``world``).
    """
    world, inner = world or World(), unwrap(model)
    device = torch.device(device or next(inner.parameters()).device)
    check_train_inputs(inner, train_data, val_data, cfg, out_dir, resume,
                       until, world.world_size)
    optimizer = make_optimizer(model, cfg)
    generator = torch.Generator().manual_seed(cfg.seed)
    scaler = torch.amp.GradScaler(
        device.type, enabled=autocast_dtype(device) == torch.float16)
    history = {"step": [], "train_loss": [], "val_step": [], "val_loss": [],
               "tokens_per_s": 0.0}
    start = 0
    if resume:
        start, history = world.load(Path(out_dir) / "checkpoint", model,
                                    optimizer, generator, cfg, scaler)
    step_fn = torch.compile(model) if cfg.compile else model
    inner.train()
    tokens, started = 0, time.perf_counter()
    stop = cfg.steps if until is None else min(until, cfg.steps)
    bar = _progress(range(start, stop), cfg.progress and world.is_main)
    for step in bar:
        x = get_batch(train_data, cfg.batch_size, cfg.context_length,
                      generator, device)                         # (B, T+1)
        loss = train_step(step_fn, optimizer, world.rows(x),
                          lr_at(step, cfg), cfg, scaler, step)
        loss = world.mean(loss)                      # the whole batch's
        tokens += x.numel()
        log_step(history, step, loss, inner, val_data, cfg, device)
        history["tokens_per_s"] = tokens / (time.perf_counter() - started)
        _show(bar, loss, history["tokens_per_s"])
        if out_dir is not None and should_checkpoint(step, stop, cfg):
            world.save(Path(out_dir) / "checkpoint", model, optimizer,
                       step + 1, generator, history, cfg, scaler)
    inner.eval()
    return history


def check_train_inputs(model, train_data: torch.Tensor,
                       val_data: torch.Tensor, cfg: TrainConfig,
                       out_dir=None, resume: bool = False,
                       until: int | None = None,
                       world_size: int = 1) -> None:
    """ValueError unless a window of context_length + 1 tokens fits the
    model and both data sets, and the batch splits evenly across the
    ``world_size`` processes and the micro-batches."""
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig, got "
                        f"{type(cfg).__name__}")
    check_batch(cfg.batch_size, world_size, cfg.accum_steps)
    window, max_seq_len = cfg.context_length + 1, model.config.max_seq_len
    if window > max_seq_len:
        raise ValueError(f"context_length + 1 ({window}) exceeds the "
                         f"model's max_seq_len ({max_seq_len})")
    for name, data in (("train", train_data), ("validation", val_data)):
        if len(data) < window:
            raise ValueError(f"the {name} data has {len(data)} tokens, "
                             f"fewer than one window of context_length + 1"
                             f" = {window}")
    if check_bool("resume", resume) and out_dir is None:
        raise ValueError("resume=True needs out_dir, the folder that holds "
                         "the checkpoint")
    if out_dir is not None and not resume:
        check_no_earlier_run(Path(out_dir))
    if until is not None:
        check_positive_int("until", until)


def check_no_earlier_run(out_dir: Path) -> None:
    """ValueError if out_dir holds another run's checkpoint, which a fresh
    run's first save would replace."""
    found = find_checkpoint(out_dir / "checkpoint")
    if found is not None:
        raise ValueError(
            f"{out_dir} already holds the checkpoint of an earlier run "
            f"(step {checkpoint_step(found)}, in {found}): resume it "
            f"(resume=True, --resume), or delete it (--overwrite) or "
            f"choose another folder to start a new run")


def train_step(model, optimizer: torch.optim.Optimizer, x: torch.Tensor,
               lr: float, cfg: TrainConfig,
               scaler: torch.amp.GradScaler | None = None,
               step: int | None = None) -> float:
    """One optimizer step on the windows x (B, T+1) at learning rate
    ``lr``; returns the loss.

    ``model`` is whatever runs the forward pass (the model, its
    torch.compile, a DDP wrapper). With cfg.accum_steps > 1 the rows go
    through in that many micro-batches, gradients adding up (and
    synchronised across processes only on the last one). A NaN or
    infinite loss (or, without an fp16 ``scaler``, gradient) raises
    FloatingPointError before the weights change.
    """
    check_batch(x.shape[0], 1, cfg.accum_steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
    scaler = scaler or torch.amp.GradScaler(x.device.type, enabled=False)
    optimizer.zero_grad(set_to_none=True)
    loss, last = 0.0, cfg.accum_steps - 1
    for i, micro in enumerate(x.chunk(cfg.accum_steps)):  # (B/accum, T+1)
        with gradient_sync(model, i == last):    # backward inside: no sync
            with _autocast(x.device):
                logits = model(micro)                     # (B/accum, T+1, V)
                part = next_token_loss(logits, micro) / cfg.accum_steps
            scaler.scale(part).backward()
        loss += part.item()
    scaler.unscale_(optimizer)       # clip the true gradients, not scaled
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    check_finite(loss, norm, scaler, lr, step)
    scaler.step(optimizer)           # fp16: skipped if a gradient overflowed
    scaler.update()
    return loss


@contextlib.contextmanager
def gradient_sync(model, enabled: bool):
    """Inside, backward skips the wrapper's gradient all-reduce /
    reduce-scatter unless ``enabled``: gradient accumulation communicates
    once per optimizer step, on its last micro-batch. A model that is not
    wrapped has nothing to skip."""
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


def check_finite(loss: float, norm: torch.Tensor,
                 scaler: torch.amp.GradScaler, lr: float,
                 step: int | None) -> None:
    """FloatingPointError for a NaN or infinite loss, or gradient norm (an
    fp16 scaler skips those steps itself)."""
    bad_norm = not scaler.is_enabled() and not torch.isfinite(norm)
    if math.isfinite(loss) and not bad_norm:
        return
    what = (f"loss {loss}" if not math.isfinite(loss)
            else f"gradient norm {norm.item()}")
    at = "" if step is None else f" at step {step}"
    raise FloatingPointError(
        f"non-finite {what}{at} (learning rate {lr:.3g}): training stopped "
        f"before updating the weights; no checkpoint was written for this "
        f"step. Lower the learning rate or check the data.")


def log_step(history: dict, step: int, loss: float, model,
             val_data: torch.Tensor, cfg: TrainConfig, device) -> None:
    """Record the step's training loss, and the validation loss every
    eval_interval steps and at the end."""
    history["step"].append(step)
    history["train_loss"].append(loss)
    if (step + 1) % cfg.eval_interval == 0 or step == cfg.steps - 1:
        history["val_step"].append(step)
        history["val_loss"].append(evaluate(model, val_data, cfg, device))


def should_checkpoint(step: int, stop: int, cfg: TrainConfig) -> bool:
    """Save after this step? At the end of the schedule, where the run
    stops, and every checkpoint_interval."""
    interval = (cfg.checkpoint_interval
                and (step + 1) % cfg.checkpoint_interval == 0)
    return step == cfg.steps - 1 or step == stop - 1 or bool(interval)


def _progress(steps, enabled: bool):
    if not enabled:
        return steps
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return steps
    return tqdm(steps, desc="training", unit="step")


def _show(bar, loss: float, tokens_per_s: float) -> None:
    if hasattr(bar, "set_postfix"):
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:.0f}")
