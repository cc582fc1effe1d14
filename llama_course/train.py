"""Training a tiny LLaMA (Chapter 11): data, the LLaMA recipe, checkpoints, and a command line.

    data       tokenize the corpus once (cached on disk as uint16/uint32), random windows of
               context_length + 1 tokens drawn with a seeded generator, a train/validation split
    optimizer  AdamW, betas (0.9, 0.95), weight decay 0.1 on matrices only (not on norm weights)
    schedule   linear warmup, then cosine decay to min_lr (LLaMA: 10% of the peak)
    stability  gradient clipping at 1.0; bf16 autocast on GPUs that support it (fp16 with a
               gradient scaler on older CUDA GPUs); a NaN or infinite loss stops the run
    checkpoints  weights in safetensors + optimizer, schedule and RNG state + a manifest of
               SHA-256 sums, saved by the protocol below, so a crash at any moment leaves the
               newest complete checkpoint for ``--resume``

Saving ``out/checkpoint`` (staging folder ``checkpoint.tmp``, previous one ``checkpoint.old``):

    0. recover: finish or undo an interrupted save (a complete .tmp is promoted as in 2-3;
       anything else stale is deleted)
    1. write .tmp/{model.safetensors, state.pt, config.json}, then .tmp/manifest.json (step and
       the files' SHA-256), each file fsync'd, then the folder fsync'd
    2. checkpoint -> checkpoint.old;  3. checkpoint.tmp -> checkpoint  (each rename fsync'd)
    4. delete checkpoint.old

A crash before 1 ends leaves the previous checkpoint untouched; after it, .tmp is complete and is
the newest. Loading checks every SHA-256 and every field of the model's configuration.

    python -m llama_course.train --config tiny --steps 300 --out runs/tiny
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import math
import os
import re
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import distributed
from .checks import check_bool, check_int, check_number, check_positive_int, check_positive_number
from .config import LlamaConfig
from .loss import next_token_loss
from .model import Llama

# ---------------------------------------------------------------------------------------- data


def tokenize_to_file(text: str, tokenizer, path: str | Path) -> np.ndarray:
    """Encode ``text`` once and keep the ids on disk (uint16 if the vocabulary fits, else uint32);
    later calls with the same text and tokenizer memory-map the file instead of re-encoding. The
    file is fsync'd and a manifest beside it holds its SHA-256: a damaged or truncated cache is
    encoded again, never trusted."""
    path = Path(path)
    dtype = np.uint16 if len(tokenizer.vocab) <= 2**16 else np.uint32
    identity = json.dumps([tokenizer.pattern, sorted(tokenizer.special_tokens.items()),
                           [a.hex() + " " + b.hex() for a, b in tokenizer.merges], len(tokenizer.vocab)])
    key = hashlib.sha256(text.encode("utf-8") + identity.encode()).hexdigest()[:16]
    target = path.with_name(f"{path.stem}-{key}{path.suffix or '.bin'}")
    if not _cache_is_intact(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        ids = np.asarray(tokenizer.encode(text), dtype=dtype)
        for file, data in ((target, ids.tobytes()), (_cache_manifest(target), json.dumps(
                {"sha256": hashlib.sha256(ids.tobytes()).hexdigest(), "tokens": len(ids)}).encode())):
            temporary = file.with_suffix(file.suffix + ".tmp")
            temporary.unlink(missing_ok=True)
            _write_durably(temporary, data)
            os.replace(temporary, file)                        # the manifest last: it vouches for the cache
            _fsync_dir(file.parent)
    return np.memmap(target, dtype=dtype, mode="r")


def _cache_manifest(cache: Path) -> Path:
    return cache.with_name(cache.name + ".json")


def _cache_is_intact(cache: Path) -> bool:
    """Whether the token cache exists and its SHA-256 is the one in its manifest (a warning if not)."""
    if not cache.exists():
        return False
    try:
        intact = json.loads(_cache_manifest(cache).read_text())["sha256"] == _sha256(cache)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        intact = False
    if not intact:
        warnings.warn(f"the token cache {cache} does not match its manifest (damaged or truncated): "
                      f"encoding the text again", stacklevel=3)
    return intact


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


def _check_windows(data, batch_size, context_length) -> None:
    check_positive_int("batch_size", batch_size), check_positive_int("context_length", context_length)
    if len(data) < context_length + 1:
        raise ValueError(f"the data has {len(data)} tokens, fewer than one window of context_length + 1 = "
                         f"{context_length + 1}")


def get_batch(data: torch.Tensor, batch_size: int, context_length: int, generator: torch.Generator,
              device=None) -> torch.Tensor:
    """``batch_size`` random windows of context_length + 1 tokens, (B, T + 1). The model reads a
    window and next_token_loss(model(w), w) scores its context_length next-token predictions."""
    _check_windows(data, batch_size, context_length)
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
    decay_steps: int | None = None     # the cosine ends here (None: at steps); extra steps stay at min_lr
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

    def __post_init__(self) -> None:
        self.betas = check_train_config(self)


def check_train_config(cfg: TrainConfig) -> tuple[float, float]:
    """TypeError/ValueError naming the first bad field of ``cfg``; returns betas as a tuple."""
    for name in ("steps", "batch_size", "context_length", "eval_interval", "eval_batches", "accum_steps"):
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
    """Linear warmup to cfg.lr over warmup_steps, then cosine decay to min_lr_ratio * lr at decay_end(cfg)
    (cfg.steps unless cfg.decay_steps says otherwise), then min_lr_ratio * lr."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, decay_end(cfg) - cfg.warmup_steps))
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * progress))


def decay_end(cfg: TrainConfig) -> int:
    """The step at which the cosine decay reaches min_lr: cfg.decay_steps, or cfg.steps if it is None."""
    return cfg.steps if cfg.decay_steps is None else cfg.decay_steps


def describe_schedule(cfg: TrainConfig) -> str:
    """The learning-rate schedule in words, e.g. for a run's log."""
    floor, end = cfg.lr * cfg.min_lr_ratio, decay_end(cfg)
    text = (f"learning rate: warmup to {cfg.lr:.3g} over {cfg.warmup_steps} steps, cosine decay to {floor:.3g} "
            f"at step {end}")
    return text + (f", then {floor:.3g} until step {cfg.steps}" if cfg.steps > end else "")


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


def autocast_dtype(device) -> torch.dtype | None:
    """The dtype to autocast to on ``device``: bfloat16 on a GPU that computes in it natively
    (Ampere and later), float16 on an older CUDA GPU (T4, V100: with a gradient scaler), None
    (float32) elsewhere."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16


def _autocast(device):
    device = torch.device(device)
    dtype = autocast_dtype(device)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def train(model: Llama, train_data: torch.Tensor, val_data: torch.Tensor, cfg: TrainConfig,
          out_dir: str | Path | None = None, resume: bool = False, device=None, until: int | None = None,
          parallel: distributed.Parallel | None = None) -> dict:
    """Train ``model``; returns the history {"step", "train_loss", "val_step", "val_loss", "tokens_per_s"}.

    With ``out_dir``, checkpoints go to out_dir/checkpoint (and ``resume=True`` continues from it:
    the same batches, learning rates and losses as an uninterrupted run; without it, a checkpoint
    already there is refused, not replaced). ``until`` stops after that many steps of the cfg.steps
    schedule (and checkpoints there), to split a run in pieces.
    ``parallel`` (from distributed.setup, under torchrun): each rank trains on its rows of every
    batch, wrapped in DDP or FSDP2 (Chapter 13); the losses recorded are the whole batch's.
    """
    device = torch.device(device or next(model.parameters()).device)
    par = parallel or distributed.Parallel(device=device)
    check_train_inputs(model, train_data, val_data, cfg, out_dir, resume, until, par)
    wrapped = distributed.wrap(model, par)                     # DDP, FSDP2, or the model itself
    optimizer = make_optimizer(model, cfg)                     # after wrap: FSDP2 shards the parameters
    generator = torch.Generator().manual_seed(cfg.seed)
    scaler = torch.amp.GradScaler(device.type, enabled=autocast_dtype(device) == torch.float16)
    history = {"step": [], "train_loss": [], "val_step": [], "val_loss": [], "tokens_per_s": 0.0}
    start_step = 0
    if resume:
        start_step, history = distributed.load(Path(out_dir) / "checkpoint", model, optimizer, generator, cfg,
                                               par, scaler)
    step_fn = torch.compile(wrapped) if cfg.compile else wrapped
    model.train()
    tokens, started = 0, time.perf_counter()
    stop = cfg.steps if until is None else min(until, cfg.steps)
    bar = _progress(range(start_step, stop), cfg.progress and par.is_main)
    for step in bar:
        x = get_batch(train_data, cfg.batch_size, cfg.context_length, generator, device)   # (B, T+1)
        loss = train_step(step_fn, optimizer, distributed.local_rows(x, par), lr_at(step, cfg), cfg, scaler, step)
        loss = distributed.mean_across(loss, par)                                          # the whole batch's
        tokens += x.numel()
        log_step(history, step, loss, model, val_data, cfg, device)
        history["tokens_per_s"] = tokens / (time.perf_counter() - started)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{history['tokens_per_s']:.0f}")
        if out_dir is not None and should_checkpoint(step, stop, cfg):
            distributed.save(Path(out_dir) / "checkpoint", model, optimizer, step + 1, generator, history, cfg,
                             par, scaler)
    model.eval()
    return history


def check_train_inputs(model: Llama, train_data: torch.Tensor, val_data: torch.Tensor, cfg: TrainConfig,
                       out_dir=None, resume: bool = False, until: int | None = None,
                       parallel: distributed.Parallel | None = None) -> None:
    """ValueError unless a window of context_length + 1 tokens fits the model and both data sets,
    and the batch splits evenly across the processes and micro-batches."""
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    distributed.check_batch(cfg.batch_size, parallel.world_size if parallel else 1, cfg.accum_steps)
    if cfg.context_length + 1 > model.config.max_seq_len:
        raise ValueError(f"context_length + 1 ({cfg.context_length + 1}) exceeds the model's max_seq_len "
                         f"({model.config.max_seq_len})")
    for name, data in (("train", train_data), ("validation", val_data)):
        if len(data) < cfg.context_length + 1:
            raise ValueError(f"the {name} data has {len(data)} tokens, fewer than one window of "
                             f"context_length + 1 = {cfg.context_length + 1}")
    if check_bool("resume", resume) and out_dir is None:
        raise ValueError("resume=True needs out_dir, the folder that holds the checkpoint")
    if out_dir is not None and not resume:
        check_no_earlier_run(Path(out_dir))
    if until is not None:
        check_positive_int("until", until)


def check_no_earlier_run(out_dir: Path) -> None:
    """ValueError if out_dir holds another run's checkpoint, which a fresh run's first save would replace."""
    found = find_checkpoint(out_dir / "checkpoint")
    if found is not None:
        raise ValueError(f"{out_dir} already holds the checkpoint of an earlier run (step "
                         f"{checkpoint_step(found)}, in {found}): resume it (resume=True, --resume), or "
                         f"delete it (--overwrite) or choose another folder to start a new run")


def train_step(model, optimizer: torch.optim.Optimizer, x: torch.Tensor, lr: float, cfg: TrainConfig,
               scaler: torch.amp.GradScaler | None = None, step: int | None = None) -> float:
    """One optimizer step on the windows x (B, T+1) at learning rate ``lr``; returns the loss.

    ``model`` is whatever runs the forward pass (the model, its torch.compile, a DDP wrapper).
    With cfg.accum_steps > 1 the rows go through in that many micro-batches, gradients adding up
    (and synchronised across processes only on the last one). A NaN or infinite loss (or, without
    an fp16 ``scaler``, gradient) raises FloatingPointError before the weights change.
    """
    distributed.check_batch(x.shape[0], 1, cfg.accum_steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
    scaler = scaler or torch.amp.GradScaler(x.device.type, enabled=False)
    optimizer.zero_grad(set_to_none=True)
    loss = 0.0
    for i, micro in enumerate(x.chunk(cfg.accum_steps)):          # (B/accum, T+1) each
        with distributed.gradient_sync(model, i == cfg.accum_steps - 1):
            with _autocast(x.device):
                part = next_token_loss(model(micro), micro) / cfg.accum_steps  # scalar: its share of the mean
            scaler.scale(part).backward()
        loss += part.item()
    scaler.unscale_(optimizer)                                 # clip the true gradients, not the scaled ones
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    check_finite(loss, norm, scaler, lr, step)
    scaler.step(optimizer)                                     # fp16: skipped when a gradient overflowed
    scaler.update()
    return loss


def check_finite(loss: float, norm: torch.Tensor, scaler: torch.amp.GradScaler, lr: float, step: int | None) -> None:
    """FloatingPointError for a NaN or infinite loss, or gradient norm (an fp16 scaler skips those steps itself)."""
    if not math.isfinite(loss) or (not scaler.is_enabled() and not torch.isfinite(norm)):
        what = f"loss {loss}" if not math.isfinite(loss) else f"gradient norm {norm.item()}"
        raise FloatingPointError(f"non-finite {what}{'' if step is None else f' at step {step}'} (learning "
                                 f"rate {lr:.3g}): training stopped before updating the weights; no checkpoint "
                                 f"was written for this step. Lower the learning rate or check the data.")


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

CHECKPOINT_FILES = ("model.safetensors", "state.pt", "config.json")
MANIFEST = "manifest.json"
# TrainConfig fields that shape the trajectory: a resumed run must use the same ones. decay_steps is
# compared as decay_end (steps may grow: the extra steps run at min_lr).
TRAJECTORY_FIELDS = ("decay_steps", "batch_size", "context_length", "lr", "min_lr_ratio", "warmup_steps",
                     "weight_decay", "betas", "grad_clip", "seed")


def save_checkpoint(path: str | Path, model: Llama, optimizer, step: int, generator: torch.Generator,
                    history: dict, cfg: TrainConfig, scaler: torch.amp.GradScaler | None = None) -> None:
    """Write path/{model.safetensors, state.pt, config.json, manifest.json} by the protocol in the
    module docstring: a crash at any point leaves the newest complete checkpoint findable."""
    from safetensors.torch import save

    path = Path(path)
    recover_checkpoint(path)                                   # 0. finish or undo an interrupted save
    _sibling(path, ".tmp").mkdir(parents=True)
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        weights.pop("lm_head.weight", None)                    # stored once, as the embedding
    files = {"model.safetensors": save(weights),
             **run_state_files(model.config, optimizer.state_dict(), step, generator, history, cfg, scaler)}
    commit_checkpoint(path, step, files)                       # 1.-4.


def run_state_files(config: LlamaConfig, optimizer_state: dict | None, step: int, generator: torch.Generator,
                    history: dict, cfg: TrainConfig, scaler: torch.amp.GradScaler | None = None) -> dict:
    """The bytes of state.pt (step, optimizer, RNG, history, scaler) and config.json (model and run)."""
    state = io.BytesIO()
    torch.save({"step": step, "optimizer": optimizer_state, "generator": generator.get_state(),
                "torch_rng": torch.get_rng_state(), "history": history,
                "scaler": scaler.state_dict() if scaler is not None and scaler.is_enabled() else None}, state)
    config_json = {"model": dataclasses.asdict(config), "train": dataclasses.asdict(cfg)}
    return {"state.pt": state.getvalue(), "config.json": json.dumps(config_json, indent=1).encode()}


def commit_checkpoint(path: Path, step: int, files: dict[str, bytes], written: tuple[str, ...] = ()) -> None:
    """Steps 1-4: write ``files`` into the staging folder, each fsync'd, then the manifest of their
    SHA-256 and of the files already written there (``written``, durable), then promote it."""
    staging = _sibling(path, ".tmp")
    sums = {name: _write_durably(staging / name, data) for name, data in files.items()}      # 1.
    sums.update({name: _sha256(staging / name) for name in written})
    _write_durably(staging / MANIFEST, json.dumps({"step": step, "sha256": sums}, indent=1).encode())
    _fsync_dir(staging)
    _promote(path)                                             # 2.-4.


def _promote(path: Path) -> None:
    """Steps 2-4: the complete staging folder replaces ``path``; the previous one is deleted last."""
    staging, previous = _sibling(path, ".tmp"), _sibling(path, ".old")
    if path.exists():
        if previous.exists():
            shutil.rmtree(previous)                            # stale: ``path`` is newer
        os.replace(path, previous)
        _fsync_dir(path.parent)
    os.replace(staging, path)
    _fsync_dir(path.parent)
    if previous.exists():
        shutil.rmtree(previous)


def recover_checkpoint(path: str | Path) -> None:
    """Finish a save that crashed after writing its staging folder, or delete what it left behind."""
    path = Path(path)
    staging, previous = _sibling(path, ".tmp"), _sibling(path, ".old")
    if staging.exists() and checkpoint_problem(staging) is None:
        _promote(path)                                         # the crash came after step 1: it is the newest
        return
    if staging.exists():
        shutil.rmtree(staging)                                 # a partial write
    if previous.exists() and not path.exists() and checkpoint_problem(previous) is None:
        os.replace(previous, path)                             # only reachable by hand-made states
        _fsync_dir(path.parent)
    elif previous.exists():
        shutil.rmtree(previous)


def find_checkpoint(path: str | Path) -> Path | None:
    """The newest complete checkpoint at ``path`` (read only): a finished staging folder, else
    ``path`` itself, else a complete ``path.old``; None if there is none."""
    path = Path(path)
    staging, previous = _sibling(path, ".tmp"), _sibling(path, ".old")
    if staging.is_dir() and checkpoint_problem(staging) is None:
        return staging
    if path.is_dir():
        return path
    if previous.is_dir() and checkpoint_problem(previous) is None:
        return previous
    return None


def checkpoint_problem(path: Path) -> str | None:
    """Why the checkpoint folder ``path`` is not complete and intact, or None if it is."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        sums, step = manifest["sha256"], manifest["step"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
        return f"{path / MANIFEST} is missing or malformed ({type(err).__name__}: {err})"
    if not isinstance(sums, dict) or not set(checkpoint_files(path)) <= set(sums) or not isinstance(step, int):
        return f"{path / MANIFEST} must list step and the SHA-256 of {', '.join(checkpoint_files(path))}"
    for name, digest in sums.items():
        try:
            actual = _sha256(path / name)
        except OSError as err:
            return f"{path / name} cannot be read ({err})"
        if actual != digest:
            return f"{path / name} is corrupted: its SHA-256 is not the one in {MANIFEST}"
    return None


def checkpoint_step(path: Path) -> int | str:
    """The step recorded in the manifest of the checkpoint folder ``path`` ("unknown" if unreadable)."""
    try:
        return json.loads((path / MANIFEST).read_text())["step"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "unknown"


def checkpoint_files(path: Path) -> list[str]:
    """The files a complete checkpoint folder's manifest must list (with others it lists, each is
    checked; a file it does not list, such as a stray file copied into the folder, is ignored):
    CHECKPOINT_FILES or, written sharded by distributed.save (Chapter 13), state.pt, config.json and
    the dcp/.metadata that names the shards."""
    if not (path / distributed.SHARDED).is_dir():
        return sorted(CHECKPOINT_FILES)
    return sorted(["state.pt", "config.json", f"{distributed.SHARDED}/.metadata"])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _write_durably(path: Path, data: bytes) -> str:
    """Write ``data`` to a new file and fsync it (on disk, not only in the OS cache); returns its SHA-256."""
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (new files, renames) durable. POSIX only; a no-op elsewhere."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resume_checkpoint(path: str | Path, model: Llama, optimizer, generator: torch.Generator, cfg: TrainConfig,
                      scaler: torch.amp.GradScaler | None = None):
    """load_checkpoint from the newest complete checkpoint at ``path``; FileNotFoundError if there is none."""
    found = find_checkpoint(path)
    if found is None:
        raise FileNotFoundError(f"nothing to resume: {path} holds no complete checkpoint")
    return load_checkpoint(found, model, optimizer, generator, cfg, scaler)


def load_checkpoint(path: str | Path, model: Llama, optimizer=None, generator: torch.Generator | None = None,
                    cfg: TrainConfig | None = None, scaler: torch.amp.GradScaler | None = None):
    """Load weights (and optimizer / RNG / scaler state when given) saved by save_checkpoint; returns
    (step, history). Every file's SHA-256 is checked; a checkpoint of another model shape (or, with
    ``cfg``, another schedule) raises ValueError naming the differing fields."""
    from safetensors.torch import load

    path = Path(path)
    check_checkpoint(path, model.config, cfg)
    weights = load((path / "model.safetensors").read_bytes())
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and model.config.tie_embeddings)]
    if missing or unexpected:
        raise ValueError(f"checkpoint does not fit: missing {missing}, unexpected {unexpected}")
    return restore_run_state(path, optimizer, generator, scaler)


def check_checkpoint(path: Path, config: LlamaConfig, cfg: TrainConfig | None = None) -> None:
    """ValueError unless ``path`` is complete and intact and was saved for this model (and run)."""
    problem = checkpoint_problem(path)
    if problem is not None:
        raise ValueError(f"cannot load the checkpoint {path}: {problem}")
    check_same_config(path, json.loads((path / "config.json").read_text()), config, cfg)


def restore_run_state(path: Path, optimizer=None, generator: torch.Generator | None = None,
                      scaler: torch.amp.GradScaler | None = None) -> tuple[int, dict]:
    """Load path/state.pt into the optimizer, generator and scaler given; returns (step, history)."""
    state = torch.load(path / "state.pt", weights_only=True)
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if generator is not None:
        generator.set_state(state["generator"])
    if scaler is not None and scaler.is_enabled() and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["torch_rng"])
    return state["step"], state["history"]


def check_same_config(path: Path, saved: dict, config: LlamaConfig, cfg: TrainConfig | None = None) -> None:
    """ValueError naming every field where the checkpoint's config.json differs from the run's."""
    ours = json.loads(json.dumps(dataclasses.asdict(config)))          # as JSON stores it (tuples -> lists)
    defaults = {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}
    stored = {**json.loads(json.dumps(defaults)), **saved["model"]}    # a field newer than the file: its default
    differing = [(f"{k}", stored.get(k, "(absent)"), v) for k, v in ours.items() if stored.get(k, "(absent)") != v]
    if cfg is not None:
        theirs, train_cfg = _trajectory(saved["train"]), _trajectory(dataclasses.asdict(cfg))
        differing += [(f"train.{k}", theirs[k], train_cfg[k]) for k in TRAJECTORY_FIELDS if theirs[k] != train_cfg[k]]
    if differing:
        hint = (f"; to extend a finished run keep its schedule, decay_steps={theirs['decay_steps']} (the command "
                f"line's --resume does)" if any(k == "train.decay_steps" for k, _, _ in differing) else "")
        raise ValueError(f"the checkpoint {path} was made for another model or run: " +
                         ", ".join(f"{k}: checkpoint {a!r}, {'run' if k.startswith('train.') else 'model'} {b!r}"
                                   for k, a, b in differing) + hint)


def _trajectory(train_fields: dict) -> dict:
    """The TRAJECTORY_FIELDS of a TrainConfig's fields as JSON stores them, decay_steps as decay_end."""
    fields = json.loads(json.dumps(train_fields))                      # tuples -> lists
    if "steps" in fields and fields.get("decay_steps") is None:
        fields["decay_steps"] = fields["steps"]
    return {k: fields.get(k, "(absent)") for k in TRAJECTORY_FIELDS}


# ------------------------------------------------------------------------------- command line

MODEL_CONFIGS = {  # named sizes for the command line and the lab
    "tiny": dict(d_model=128, n_layers=4, n_heads=4, d_ff=352, max_seq_len=256),
    "small": dict(d_model=256, n_layers=6, n_heads=8, n_kv_heads=4, d_ff=704, max_seq_len=512),
    "base": dict(d_model=512, n_layers=8, n_heads=8, n_kv_heads=4, d_ff=1408, max_seq_len=1024),
}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, context_length=args.context_length,
                          lr=args.lr, warmup_steps=max(1, args.steps // 10), seed=args.seed, compile=args.compile,
                          eval_interval=args.eval_interval, checkpoint_interval=args.checkpoint_interval,
                          accum_steps=args.accum_steps)
        _check_arguments(args)
        par = distributed.setup(args.shard, device=os.environ.get("LLAMA_COURSE_DEVICE"))  # torchrun: join
    except (TypeError, ValueError) as err:
        parser.error(str(err))                                 # exits with status 2, before any file is written
    try:
        _check_agreement(parser, args, par)                    # every rank launched with the same options
        return _main(args, cfg, par, parser)
    finally:
        distributed.teardown()


def _main(args, cfg: TrainConfig, par: distributed.Parallel, parser: argparse.ArgumentParser) -> int:
    from .data import course_corpus
    from .tokenizer import train_bpe
    from .utils import seed_everything

    seed_everything(args.seed)
    tokenizer = train_bpe(course_corpus(), args.vocab_size, special_tokens=["<|endoftext|>"])
    config = LlamaConfig(vocab_size=len(tokenizer), **MODEL_CONFIGS[args.config])
    if args.resume:                                            # validate first, write after
        cfg = _check_resume(parser, args, config, cfg)
    try:
        with run_lock(args.out, par):                          # one run at a time in a folder
            return _run(args, cfg, par, tokenizer, config)
    except RunLockedError as err:
        parser.error(str(err))


def _run(args, cfg: TrainConfig, par: distributed.Parallel, tokenizer, config: LlamaConfig) -> int:
    """Tokenize, train, report and sample: the command line's run, once its arguments are checked."""
    from .data import course_corpus
    from .generate import generate
    from .utils import get_device

    device = par.device if par.enabled else get_device()
    train_data, val_data = _prepare_data(args, tokenizer, par, course_corpus())
    model = Llama(config, device=device)
    say = print if par.is_main else (lambda *a, **k: None)
    say(f"{sum(p.numel() for p in model.parameters()):,} parameters on {device} x {par.world_size} "
        f"process(es){' (sharded)' if par.shard else ''}; {len(train_data):,} training tokens")
    say(describe_schedule(cfg))
    try:
        history = train(model, train_data, val_data, cfg, out_dir=args.out, resume=args.resume, device=device,
                        parallel=par)
    except FloatingPointError as err:
        say(f"error: {err}", file=sys.stderr)
        return 1
    say(f"final validation loss {history['val_loss'][-1]:.3f}; {history['tokens_per_s']:.0f} tokens/s")
    prompt = torch.tensor([tokenizer.encode("Title: The")], device=device)
    sample = generate(model, prompt, 60, temperature=0.8, top_p=0.95,  # every rank: FSDP2 gathers weights
                      generator=torch.Generator(device=device).manual_seed(args.seed))
    say(tokenizer.decode(sample[0].tolist()))
    return 0


def _check_arguments(args) -> None:
    """ValueError for options that cannot work together, before anything is computed or written."""
    _check_out(args.out)
    distributed.check_batch(args.batch_size, int(os.environ.get("WORLD_SIZE", "1")), args.accum_steps)
    max_seq_len = MODEL_CONFIGS[args.config]["max_seq_len"]
    if args.context_length + 1 > max_seq_len:
        raise ValueError(f"--context-length + 1 ({args.context_length + 1}) exceeds --config {args.config}'s "
                         f"max_seq_len ({max_seq_len})")
    if args.vocab_size < 257:
        raise ValueError(f"--vocab-size must be at least 257 (256 bytes + <|endoftext|>), got {args.vocab_size}")
    if args.resume and args.overwrite:
        raise ValueError("--resume continues the run in --out and --overwrite replaces it: pass one of them")
    if not args.resume and not args.overwrite:
        check_no_earlier_run(args.out)


def _check_agreement(parser: argparse.ArgumentParser, args, par: distributed.Parallel) -> None:
    """parser.error on every rank unless all ranks were launched with the same options."""
    try:
        distributed.check_agreement(par, {f"--{k.replace('_', '-')}": str(v) for k, v in vars(args).items()})
    except ValueError as err:
        distributed.teardown()
        parser.error(str(err))


def _check_resume(parser: argparse.ArgumentParser, args, config: LlamaConfig, cfg: TrainConfig) -> TrainConfig:
    """The run's TrainConfig with the checkpoint's warmup and decay (so that a larger --steps extends
    a finished run at the final learning rate); parser.error (status 2) unless args.out/checkpoint
    holds a complete checkpoint of this model and run."""
    found = find_checkpoint(args.out / "checkpoint")
    if found is None:
        parser.error(f"--resume: nothing to resume, {args.out / 'checkpoint'} holds no complete checkpoint")
    if args.shard and not (found / distributed.SHARDED).is_dir():
        parser.error(f"--resume --shard: {found} is a whole-model checkpoint; resume it without --shard")
    saved = json.loads((found / "config.json").read_text())
    schedule = _trajectory(saved.get("train", {}))
    if isinstance(schedule["decay_steps"], int) and isinstance(saved["train"].get("warmup_steps"), int):
        cfg = dataclasses.replace(cfg, warmup_steps=saved["train"]["warmup_steps"],
                                  decay_steps=schedule["decay_steps"])
    try:
        check_same_config(found, saved, config, cfg)
    except ValueError as err:
        parser.error(f"--resume with other options than the run in {args.out}: {err}")
    return cfg


class RunLockedError(RuntimeError):
    """Another process holds the run folder's lock."""


@contextlib.contextmanager
def run_lock(out: Path, par: distributed.Parallel):
    """Rank 0 holds an exclusive lock on out/train.lock (holding its pid) while inside: a second run
    on the same folder raises RunLockedError naming the holder. The system releases the lock when
    the process ends, however it ends, so a killed run leaves no stale lock."""
    if not par.is_main:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "train.lock", "a+") as f:
        if not _try_lock(f):
            f.seek(0)
            holder = f.read().strip() or "unknown"
            raise RunLockedError(f"{out} is in use by another run (process {holder} holds {out / 'train.lock'}): "
                                 f"wait for it to end, or choose another --out")
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield


def _try_lock(f) -> bool:
    """Take an exclusive lock on the open file ``f`` without waiting; False if another process holds one."""
    try:
        import fcntl
    except ImportError:                                        # Windows
        import msvcrt
        try:
            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _prepare_data(args, tokenizer, par: distributed.Parallel, corpus: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank 0 writes the tokenizer and the token cache, then the other ranks read the cache."""
    if par.is_main:
        args.out.mkdir(parents=True, exist_ok=True)
        if args.overwrite:                                     # --overwrite: the earlier run's checkpoint goes
            for end in ("", ".tmp", ".old"):
                shutil.rmtree(args.out / f"checkpoint{end}", ignore_errors=True)
        tokenizer.save(args.out / "tokenizer.json")
    text = shuffle_documents(corpus, args.seed)           # validation: a tenth of every kind of text
    for writer in (True, False):
        if par.is_main == writer:
            train_data, val_data = split(tokenize_to_file(text, tokenizer, args.out / "tokens.bin"))
        distributed.barrier(par)
    return train_data, val_data


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llama_course.train", description="Train a tiny LLaMA "
                                     "on the course corpus.")
    parser.add_argument("--config", choices=sorted(MODEL_CONFIGS), default="tiny")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=_out_folder, default=Path("runs/tiny"), help="the run's folder")
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval-interval", type=int, default=50, help="validation loss every N steps")
    parser.add_argument("--checkpoint-interval", type=int, default=0,
                        help="save OUT/checkpoint every N steps (0: only at the end)")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint (a larger --steps "
                        "extends a finished run at its final learning rate)")
    parser.add_argument("--overwrite", action="store_true", help="start a new run in an OUT that holds the "
                        "checkpoint of an earlier one, deleting it")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accum-steps", type=int, default=1, help="micro-batches per step (gradient accumulation)")
    parser.add_argument("--shard", action="store_true", help="under torchrun: FSDP2 (shard weights, gradients "
                        "and optimizer state) instead of DDP")
    return parser


def _out_folder(text: str) -> Path:
    if not text.strip():                                       # Path("") is the current folder
        raise argparse.ArgumentTypeError("must name a folder for the run, got an empty string")
    return Path(text)


def _check_out(out: Path) -> None:
    """ValueError for an --out that exists and is not a folder."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record  # a failing rank's traceback, summarised

    sys.exit(record(main)())
