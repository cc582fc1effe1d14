"""The command line of the lab (Chapter 11): tokenize the course corpus,
train, save the run's checkpoint, report, and sample.

    python -m llama_course.train --config tiny --steps 300 --out runs/tiny

Every option is checked before anything is computed or written; one run
at a time holds the folder's lock. ``main`` joins the processes with the
``join`` it is given: by default one process; ``python -m
llama_course.train`` passes Chapter 13's ``llama_course.parallel.setup``,
so that under torchrun each process trains on its rows of every batch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from ..config import LlamaConfig
from ..model import Llama
from .checkpoint import (
    SHARDED,
    _trajectory,
    check_same_config,
    find_checkpoint,
)
from .data import check_batch, shuffle_documents, split, tokenize_to_file
from .loop import TrainConfig, check_no_earlier_run, describe_schedule, train
from .world import World

MODEL_CONFIGS = {  # named sizes for the command line and the lab
    "tiny": dict(d_model=128, n_layers=4, n_heads=4, d_ff=352,
                 max_seq_len=256),
    "small": dict(d_model=256, n_layers=6, n_heads=8, n_kv_heads=4,
                  d_ff=704, max_seq_len=512),
    "base": dict(d_model=512, n_layers=8, n_heads=8, n_kv_heads=4,
                 d_ff=1408, max_seq_len=1024),
}


def one_process(shard: bool = False, device=None) -> World:
    """The World of a run without torchrun: this process alone."""
    if shard:
        raise ValueError("--shard splits the model across processes and "
                         "needs at least 2: launch with torchrun "
                         "--nproc-per-node N (N >= 2)")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("under torchrun, launch -m llama_course.train, "
                         "which joins the processes")
    return World(device=torch.device(device or "cpu"))


def main(argv: list[str] | None = None,
         join: Callable[..., World] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        cfg = _train_config(args)
        _check_arguments(args)
        device = os.environ.get("LLAMA_COURSE_DEVICE")
        world = (join or one_process)(args.shard, device=device)
    except (TypeError, ValueError) as err:
        parser.error(str(err))      # status 2, before any file is written
    try:
        _check_agreement(parser, args, world)    # the same options on all
        return _main(args, cfg, world, parser)
    finally:
        world.teardown()


def _train_config(args) -> TrainConfig:
    return TrainConfig(
        steps=args.steps, batch_size=args.batch_size,
        context_length=args.context_length, lr=args.lr,
        warmup_steps=max(1, args.steps // 10), seed=args.seed,
        compile=args.compile, eval_interval=args.eval_interval,
        checkpoint_interval=args.checkpoint_interval,
        accum_steps=args.accum_steps)


def _main(args, cfg: TrainConfig, world: World,
          parser: argparse.ArgumentParser) -> int:
    from ..data import course_corpus
    from ..tokenizer import train_bpe
    from ..utils import seed_everything

    seed_everything(args.seed)
    tokenizer = train_bpe(course_corpus(), args.vocab_size,
                          special_tokens=["<|endoftext|>"])
    config = LlamaConfig(vocab_size=len(tokenizer),
                         **MODEL_CONFIGS[args.config])
    if args.resume:                              # validate first, write after
        cfg = _check_resume(parser, args, config, cfg)
    try:
        with run_lock(args.out, world):       # one run at a time in a folder
            return _run(args, cfg, world, tokenizer, config)
    except RunLockedError as err:
        parser.error(str(err))


def _run(args, cfg: TrainConfig, world: World, tokenizer,
         config: LlamaConfig) -> int:
    """Tokenize, train, report and sample: the command line's run, once
    its arguments are checked."""
    from ..data import course_corpus
    from ..generate import generate
    from ..utils import get_device

    device = world.device if world.enabled else get_device()
    train_data, val_data = _prepare_data(args, tokenizer, world,
                                         course_corpus())
    model = Llama(config, device=device)
    say = print if world.is_main else (lambda *a, **k: None)
    n = sum(p.numel() for p in model.parameters())
    say(f"{n:,} parameters on {device} x {world.world_size} process(es)"
        f"{' (sharded)' if args.shard else ''}; {len(train_data):,} "
        f"training tokens")
    say(describe_schedule(cfg))
    try:
        history = train(world.wrap(model), train_data, val_data, cfg,
                        out_dir=args.out, resume=args.resume, device=device,
                        world=world)
    except FloatingPointError as err:
        say(f"error: {err}", file=sys.stderr)
        return 1
    say(f"final validation loss {history['val_loss'][-1]:.3f}; "
        f"{history['tokens_per_s']:.0f} tokens/s")
    prompt = torch.tensor([tokenizer.encode("Title: The")], device=device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    sample = generate(model, prompt, 60, temperature=0.8, top_p=0.95,
                      generator=generator)    # every rank: FSDP2 gathers
    say(tokenizer.decode(sample[0].tolist()))
    return 0


def _check_arguments(args) -> None:
    """ValueError for options that cannot work together, before anything
    is computed or written."""
    _check_out(args.out)
    check_batch(args.batch_size, int(os.environ.get("WORLD_SIZE", "1")),
                args.accum_steps)
    max_seq_len = MODEL_CONFIGS[args.config]["max_seq_len"]
    if args.context_length + 1 > max_seq_len:
        raise ValueError(f"--context-length + 1 ({args.context_length + 1})"
                         f" exceeds --config {args.config}'s max_seq_len "
                         f"({max_seq_len})")
    if args.vocab_size < 257:
        raise ValueError(f"--vocab-size must be at least 257 (256 bytes + "
                         f"<|endoftext|>), got {args.vocab_size}")
    if args.resume and args.overwrite:
        raise ValueError("--resume continues the run in --out and "
                         "--overwrite replaces it: pass one of them")
    if not args.resume and not args.overwrite:
        check_no_earlier_run(args.out)


def _check_agreement(parser: argparse.ArgumentParser, args,
                     world: World) -> None:
    """parser.error on every rank unless all ranks were launched with the
    same options."""
    options = {f"--{k.replace('_', '-')}": str(v)
               for k, v in vars(args).items()}
    try:
        world.check_agreement(options)
    except ValueError as err:
        world.teardown()
        parser.error(str(err))


def _check_resume(parser: argparse.ArgumentParser, args,
                  config: LlamaConfig, cfg: TrainConfig) -> TrainConfig:
    """The run's TrainConfig with the checkpoint's warmup and decay (so
    that a larger --steps extends a finished run at the final learning
    rate); parser.error (status 2) unless args.out/checkpoint holds a
    complete checkpoint of this model and run."""
    found = find_checkpoint(args.out / "checkpoint")
    if found is None:
        parser.error(f"--resume: nothing to resume, "
                     f"{args.out / 'checkpoint'} holds no complete "
                     f"checkpoint")
    if args.shard and not (found / SHARDED).is_dir():
        parser.error(f"--resume --shard: {found} is a whole-model "
                     f"checkpoint; resume it without --shard")
    saved = json.loads((found / "config.json").read_text())
    decay = _trajectory(saved.get("train", {}))["decay_steps"]
    warmup = saved["train"].get("warmup_steps")
    if isinstance(decay, int) and isinstance(warmup, int):
        cfg = dataclasses.replace(cfg, warmup_steps=warmup, decay_steps=decay)
    try:
        check_same_config(found, saved, config, cfg)
    except ValueError as err:
        parser.error(f"--resume with other options than the run in "
                     f"{args.out}: {err}")
    return cfg


class RunLockedError(RuntimeError):
    """Another process holds the run folder's lock."""


@contextlib.contextmanager
def run_lock(out: Path, world: World):
    """Rank 0 holds an exclusive lock on out/train.lock (holding its pid)
    while inside: a second run on the same folder raises RunLockedError
    naming the holder. The system releases the lock when the process
    ends, however it ends, so a killed run leaves no stale lock."""
    if not world.is_main:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "train.lock", "a+") as f:
        if not _try_lock(f):
            f.seek(0)
            holder = f.read().strip() or "unknown"
            raise RunLockedError(
                f"{out} is in use by another run (process {holder} holds "
                f"{out / 'train.lock'}): wait for it to end, or choose "
                f"another --out")
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield


def _try_lock(f) -> bool:
    """Take an exclusive lock on the open file ``f`` without waiting;
    False if another process holds one."""
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


def _prepare_data(args, tokenizer, world: World,
                  corpus: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank 0 writes the tokenizer and the token cache, then the other
    ranks read the cache."""
    if world.is_main:
        args.out.mkdir(parents=True, exist_ok=True)
        if args.overwrite:        # the earlier run's checkpoint goes
            for end in ("", ".tmp", ".old"):
                shutil.rmtree(args.out / f"checkpoint{end}",
                              ignore_errors=True)
        tokenizer.save(args.out / "tokenizer.json")
    text = shuffle_documents(corpus, args.seed)  # validation: every kind
    for writer in (True, False):
        if world.is_main == writer:
            tokens = tokenize_to_file(text, tokenizer, args.out / "tokens.bin")
            train_data, val_data = split(tokens)
        world.barrier()
    return train_data, val_data


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llama_course.train",
        description="Train a tiny LLaMA on the course corpus.")
    add = parser.add_argument
    add("--config", choices=sorted(MODEL_CONFIGS), default="tiny")
    add("--steps", type=int, default=300)
    add("--out", type=_out_folder, default=Path("runs/tiny"),
        help="the run's folder")
    add("--vocab-size", type=int, default=1024)
    add("--batch-size", type=int, default=16)
    add("--context-length", type=int, default=128)
    add("--lr", type=float, default=3e-3)
    add("--eval-interval", type=int, default=50,
        help="validation loss every N steps")
    add("--checkpoint-interval", type=int, default=0,
        help="save OUT/checkpoint every N steps (0: only at the end)")
    add("--resume", action="store_true", help="continue from OUT/checkpoint "
        "(a larger --steps extends a finished run at its final learning "
        "rate)")
    add("--overwrite", action="store_true", help="start a new run in an OUT "
        "that holds the checkpoint of an earlier one, deleting it")
    add("--compile", action="store_true", help="torch.compile the model")
    add("--seed", type=int, default=0)
    add("--accum-steps", type=int, default=1,
        help="micro-batches per step (gradient accumulation)")
    add("--shard", action="store_true", help="under torchrun: FSDP2 (shard "
        "weights, gradients and optimizer state) instead of DDP")
    return parser


def _out_folder(text: str) -> Path:
    if not text.strip():                      # Path("") is the current folder
        raise argparse.ArgumentTypeError("must name a folder for the run, "
                                         "got an empty string")
    return Path(text)


def _check_out(out: Path) -> None:
    """ValueError for an --out that exists and is not a folder."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
