"""The run's checkpoint (Chapter 11), saved so that a crash at any moment
leaves the newest complete one for ``--resume``.

A checkpoint is a folder: the weights in safetensors, state.pt (step,
optimizer, RNG, history, gradient scaler), config.json (model and run),
and manifest.json, the step and the SHA-256 of every file. Saving
``out/checkpoint`` (staging folder ``checkpoint.tmp``, previous one
``checkpoint.old``):

    0. recover: finish or undo an interrupted save (a complete .tmp is
       promoted as in 2-3; anything else stale is deleted)
    1. write .tmp/{model.safetensors, state.pt, config.json}, then
       .tmp/manifest.json, each file fsync'd, then the folder fsync'd
    2. checkpoint -> checkpoint.old;  3. checkpoint.tmp -> checkpoint
       (each rename fsync'd)
    4. delete checkpoint.old

A crash before 1 ends leaves the previous checkpoint untouched; after it,
.tmp is complete and is the newest. Loading checks every SHA-256 and every
field of the model's configuration. A sharded checkpoint (Chapter 13's
``llama_course.parallel``) keeps its shards in the folder SHARDED instead
of model.safetensors, under the same protocol.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
from pathlib import Path

import torch

from ..config import LlamaConfig
from .data import fsync_dir, sha256, write_durably

CHECKPOINT_FILES = ("model.safetensors", "state.pt", "config.json")
MANIFEST = "manifest.json"
SHARDED = "dcp"   # the shards' folder in a sharded checkpoint (Chapter 13)
# TrainConfig fields that shape the trajectory: a resumed run must use the
# same ones. decay_steps is compared as decay_end (steps may grow: the
# extra steps run at min_lr).
TRAJECTORY_FIELDS = ("decay_steps", "batch_size", "context_length", "lr",
                     "min_lr_ratio", "warmup_steps", "weight_decay",
                     "betas", "grad_clip", "seed")


def save_checkpoint(path: str | Path, model, optimizer, step: int,
                    generator: torch.Generator, history: dict, cfg,
                    scaler: torch.amp.GradScaler | None = None) -> None:
    """Write path/{model.safetensors, state.pt, config.json,
    manifest.json} by the protocol in the module docstring: a crash at any
    point leaves the newest complete checkpoint findable."""
    from safetensors.torch import save

    path = Path(path)
    recover_checkpoint(path)              # 0. finish or undo a crashed save
    sibling(path, ".tmp").mkdir(parents=True)
    weights = {k: v.detach().contiguous()
               for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        weights.pop("lm_head.weight", None)   # stored once, as the embedding
    files = {"model.safetensors": save(weights),
             **run_state_files(model.config, optimizer.state_dict(), step,
                               generator, history, cfg, scaler)}
    commit_checkpoint(path, step, files)                           # 1.-4.


def run_state_files(config: LlamaConfig, optimizer_state: dict | None,
                    step: int, generator: torch.Generator, history: dict,
                    cfg, scaler: torch.amp.GradScaler | None = None
                    ) -> dict:
    """The bytes of state.pt (step, optimizer, RNG, history, scaler) and
    config.json (model and run)."""
    scaled = scaler is not None and scaler.is_enabled()
    state = io.BytesIO()
    torch.save({"step": step, "optimizer": optimizer_state,
                "generator": generator.get_state(),
                "torch_rng": torch.get_rng_state(), "history": history,
                "scaler": scaler.state_dict() if scaled else None}, state)
    config_json = {"model": dataclasses.asdict(config),
                   "train": dataclasses.asdict(cfg)}
    return {"state.pt": state.getvalue(),
            "config.json": json.dumps(config_json, indent=1).encode()}


def commit_checkpoint(path: Path, step: int, files: dict[str, bytes],
                      written: tuple[str, ...] = ()) -> None:
    """Steps 1-4: write ``files`` into the staging folder, each fsync'd,
    then the manifest of their SHA-256 and of the files already written
    there (``written``, durable), then promote it."""
    staging = sibling(path, ".tmp")
    sums = {name: write_durably(staging / name, data)             # 1.
            for name, data in files.items()}
    sums.update({name: sha256(staging / name) for name in written})
    manifest = json.dumps({"step": step, "sha256": sums}, indent=1)
    write_durably(staging / MANIFEST, manifest.encode())
    fsync_dir(staging)
    _promote(path)                                                 # 2.-4.


def _promote(path: Path) -> None:
    """Steps 2-4: the complete staging folder replaces ``path``; the
    previous one is deleted last."""
    staging, previous = sibling(path, ".tmp"), sibling(path, ".old")
    if path.exists():
        if previous.exists():
            shutil.rmtree(previous)            # stale: ``path`` is newer
        os.replace(path, previous)
        fsync_dir(path.parent)
    os.replace(staging, path)
    fsync_dir(path.parent)
    if previous.exists():
        shutil.rmtree(previous)


def recover_checkpoint(path: str | Path) -> None:
    """Finish a save that crashed after writing its staging folder, or
    delete what it left behind."""
    path = Path(path)
    staging, previous = sibling(path, ".tmp"), sibling(path, ".old")
    if staging.exists() and checkpoint_problem(staging) is None:
        _promote(path)         # the crash came after step 1: it is the newest
        return
    if staging.exists():
        shutil.rmtree(staging)                             # a partial write
    if (previous.exists() and not path.exists()
            and checkpoint_problem(previous) is None):
        os.replace(previous, path)       # only reachable by hand-made states
        fsync_dir(path.parent)
    elif previous.exists():
        shutil.rmtree(previous)


def find_checkpoint(path: str | Path) -> Path | None:
    """The newest complete checkpoint at ``path`` (read only): a finished
    staging folder, else ``path`` itself, else a complete ``path.old``;
    None if there is none."""
    path = Path(path)
    staging, previous = sibling(path, ".tmp"), sibling(path, ".old")
    if staging.is_dir() and checkpoint_problem(staging) is None:
        return staging
    if path.is_dir():
        return path
    if previous.is_dir() and checkpoint_problem(previous) is None:
        return previous
    return None


def checkpoint_problem(path: Path) -> str | None:
    """Why the checkpoint folder ``path`` is not complete and intact, or
    None if it is."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        sums, step = manifest["sha256"], manifest["step"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
        return (f"{path / MANIFEST} is missing or malformed "
                f"({type(err).__name__}: {err})")
    needed = checkpoint_files(path)
    if (not isinstance(sums, dict) or not set(needed) <= set(sums)
            or not isinstance(step, int)):
        return (f"{path / MANIFEST} must list step and the SHA-256 of "
                f"{', '.join(needed)}")
    for name, digest in sums.items():
        try:
            actual = sha256(path / name)
        except OSError as err:
            return f"{path / name} cannot be read ({err})"
        if actual != digest:
            return (f"{path / name} is corrupted: its SHA-256 is not the "
                    f"one in {MANIFEST}")
    return None


def checkpoint_step(path: Path) -> int | str:
    """The step recorded in the manifest of the checkpoint folder ``path``
    ("unknown" if unreadable)."""
    try:
        return json.loads((path / MANIFEST).read_text())["step"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "unknown"


def checkpoint_files(path: Path) -> list[str]:
    """The files a complete checkpoint folder's manifest must list (with
    others it lists, each is checked; a file it does not list, such as a
    stray file copied into the folder, is ignored): CHECKPOINT_FILES or,
    written sharded (Chapter 13), state.pt, config.json and the
    SHARDED/.metadata that names the shards."""
    if not (path / SHARDED).is_dir():
        return sorted(CHECKPOINT_FILES)
    return sorted(["state.pt", "config.json", f"{SHARDED}/.metadata"])


def sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def resume_checkpoint(path: str | Path, model, optimizer,
                      generator: torch.Generator, cfg,
                      scaler: torch.amp.GradScaler | None = None):
    """load_checkpoint from the newest complete checkpoint at ``path``;
    FileNotFoundError if there is none."""
    found = find_checkpoint(path)
    if found is None:
        raise FileNotFoundError(f"nothing to resume: {path} holds no "
                                f"complete checkpoint")
    return load_checkpoint(found, model, optimizer, generator, cfg, scaler)


def load_checkpoint(path: str | Path, model, optimizer=None,
                    generator: torch.Generator | None = None, cfg=None,
                    scaler: torch.amp.GradScaler | None = None):
    """Load weights (and optimizer / RNG / scaler state when given) saved
    by save_checkpoint; returns (step, history). Every file's SHA-256 is
    checked; a checkpoint of another model shape (or, with ``cfg``,
    another schedule) raises ValueError naming the differing fields."""
    from safetensors.torch import load

    path = Path(path)
    check_checkpoint(path, model.config, cfg)
    if (path / SHARDED).is_dir():
        raise ValueError(f"{path} is a sharded checkpoint (Chapter 13): "
                         f"load it with llama_course.parallel's "
                         f"checkpointer (train(..., world=Parallel()), or "
                         f"python -m llama_course.train --resume)")
    weights = load((path / "model.safetensors").read_bytes())
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = model.config.tie_embeddings
    missing = [m for m in missing if not (m == "lm_head.weight" and tied)]
    if missing or unexpected:
        raise ValueError(f"checkpoint does not fit: missing {missing}, "
                         f"unexpected {unexpected}")
    return restore_run_state(path, optimizer, generator, scaler)


def check_checkpoint(path: Path, config: LlamaConfig, cfg=None) -> None:
    """ValueError unless ``path`` is complete and intact and was saved for
    this model (and run)."""
    problem = checkpoint_problem(path)
    if problem is not None:
        raise ValueError(f"cannot load the checkpoint {path}: {problem}")
    saved = json.loads((path / "config.json").read_text())
    check_same_config(path, saved, config, cfg)


def restore_run_state(path: Path, optimizer=None,
                      generator: torch.Generator | None = None,
                      scaler: torch.amp.GradScaler | None = None
                      ) -> tuple[int, dict]:
    """Load path/state.pt into the optimizer, generator and scaler given;
    returns (step, history)."""
    state = torch.load(path / "state.pt", weights_only=True)
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if generator is not None:
        generator.set_state(state["generator"])
    if scaler is not None and scaler.is_enabled() and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["torch_rng"])
    return state["step"], state["history"]


def check_same_config(path: Path, saved: dict, config: LlamaConfig,
                      cfg=None) -> None:
    """ValueError naming every field where the checkpoint's config.json
    differs from the run's."""
    differing = _differing_model_fields(saved, config)
    if cfg is not None:
        theirs = _trajectory(saved["train"])
        ours = _trajectory(dataclasses.asdict(cfg))
        differing += [(f"train.{k}", theirs[k], ours[k])
                      for k in TRAJECTORY_FIELDS if theirs[k] != ours[k]]
    if not differing:
        return
    hint = ""
    if any(k == "train.decay_steps" for k, _, _ in differing):
        hint = (f"; to extend a finished run keep its schedule, "
                f"decay_steps={theirs['decay_steps']} (the command line's "
                f"--resume does)")
    listed = ", ".join(
        f"{k}: checkpoint {a!r}, "
        f"{'run' if k.startswith('train.') else 'model'} {b!r}"
        for k, a, b in differing)
    raise ValueError(f"the checkpoint {path} was made for another model or "
                     f"run: {listed}{hint}")


def _differing_model_fields(saved: dict, config: LlamaConfig) -> list:
    """(field, checkpoint's, run's) for each model field that differs; a
    field newer than the file counts as its default."""
    ours = json.loads(json.dumps(dataclasses.asdict(config)))  # tuples: lists
    defaults = {f.name: f.default for f in dataclasses.fields(config)
                if f.default is not dataclasses.MISSING}
    stored = {**json.loads(json.dumps(defaults)), **saved["model"]}
    return [(k, stored.get(k, "(absent)"), v) for k, v in ours.items()
            if stored.get(k, "(absent)") != v]


def _trajectory(train_fields: dict) -> dict:
    """The TRAJECTORY_FIELDS of a TrainConfig's fields as JSON stores
    them, decay_steps as decay_end."""
    fields = json.loads(json.dumps(train_fields))          # tuples -> lists
    if "steps" in fields and fields.get("decay_steps") is None:
        fields["decay_steps"] = fields["steps"]
    return {k: fields.get(k, "(absent)") for k in TRAJECTORY_FIELDS}
