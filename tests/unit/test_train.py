"""Training: the recipe's pieces, exact resumption, atomic checkpoints, bad input, the CLI."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from llama_course import LlamaConfig
from llama_course.model import Llama
from llama_course.tokenizer import train_bpe
from llama_course.train import (
    TrainConfig,
    get_batch,
    load_checkpoint,
    lr_at,
    make_optimizer,
    save_checkpoint,
    split,
    tokenize_to_file,
    train,
)

TEXT = ("The small robot baked bread every morning. The bread was warm and the robot was happy. " * 60)
CONFIG = LlamaConfig(vocab_size=300, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=64)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread (and the test workers share the cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tokenizer = train_bpe(TEXT, 300)
    tokens = tokenize_to_file(TEXT, tokenizer, tmp_path_factory.mktemp("data") / "tokens.bin")
    return split(tokens)


def test_tokens_are_cached_on_disk(tmp_path):
    tokenizer = train_bpe(TEXT, 300)
    first = tokenize_to_file(TEXT, tokenizer, tmp_path / "t.bin")
    assert first.dtype == np.uint16 and len(list(tmp_path.glob("t-*.bin"))) == 1
    assert list(first) == tokenizer.encode(TEXT)
    again = tokenize_to_file(TEXT, tokenizer, tmp_path / "t.bin")  # memory-mapped, not re-encoded
    assert isinstance(again, np.memmap) and np.array_equal(again, first)


def test_a_damaged_token_cache_is_encoded_again_never_trusted(tmp_path):
    import hashlib

    tokenizer = train_bpe(TEXT, 300)
    expected = tokenizer.encode(TEXT)
    tokenize_to_file(TEXT, tokenizer, tmp_path / "t.bin")
    (cache,) = tmp_path.glob("t-*.bin")
    manifest = json.loads(cache.with_name(cache.name + ".json").read_text())
    assert manifest == {"sha256": hashlib.sha256(cache.read_bytes()).hexdigest(), "tokens": len(expected)}
    flipped = bytearray(cache.read_bytes())
    flipped[10] ^= 0x01
    for damage in (cache.read_bytes()[:len(expected)], bytes(flipped)):     # truncated to half, one bit flipped
        cache.write_bytes(damage)
        with pytest.warns(UserWarning, match="does not match its manifest"):
            again = tokenize_to_file(TEXT, tokenizer, tmp_path / "t.bin")
        assert list(again) == expected
    cache.with_name(cache.name + ".json").unlink()                          # a cache with no manifest
    with pytest.warns(UserWarning, match="does not match its manifest"):
        assert list(tokenize_to_file(TEXT, tokenizer, tmp_path / "t.bin")) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache.name, cache.name + ".json"]


def test_schedule_and_optimizer_groups():
    cfg = TrainConfig(steps=100, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(1e-4) and lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(99, cfg) == pytest.approx(1e-4 + 0.5 * 9e-4 * (1 + math.cos(math.pi * 89 / 90)))
    assert all(lr_at(s, cfg) >= lr_at(s + 1, cfg) for s in range(10, 99))
    model = Llama(CONFIG)
    groups = make_optimizer(model, cfg).param_groups
    assert groups[0]["weight_decay"] == 0.1 and all(p.dim() == 2 for p in groups[0]["params"])
    assert groups[1]["weight_decay"] == 0.0 and all(p.dim() == 1 for p in groups[1]["params"])
    assert groups[0]["betas"] == (0.9, 0.95)


def test_batches_are_seeded_windows(data):
    train_data, _ = data
    a = get_batch(train_data, 4, 16, torch.Generator().manual_seed(0))
    b = get_batch(train_data, 4, 16, torch.Generator().manual_seed(0))
    assert a.shape == (4, 17) and torch.equal(a, b)
    windows = train_data.unfold(0, 17, 1)                                 # every contiguous window
    assert all((windows == row).all(dim=1).any() for row in a)


def test_training_lowers_the_loss(data):
    torch.manual_seed(0)
    model = Llama(CONFIG)
    history = train(model, *data, TrainConfig(steps=60, batch_size=8, context_length=32, lr=3e-3, warmup_steps=6,
                                              eval_interval=20, progress=False))
    assert history["val_loss"][-1] < history["val_loss"][0] - 1.0
    assert history["tokens_per_s"] > 0


def test_resuming_continues_the_exact_trajectory(data, tmp_path):
    cfg = TrainConfig(steps=20, batch_size=4, context_length=16, warmup_steps=4, eval_interval=5, progress=False)
    torch.manual_seed(1)
    straight = train(Llama(CONFIG), *data, cfg)
    torch.manual_seed(1)
    train(Llama(CONFIG), *data, cfg, out_dir=tmp_path, until=10)          # "interrupted" after 10 steps
    fresh = Llama(CONFIG)                                                 # another process, other weights
    resumed = train(fresh, *data, cfg, out_dir=tmp_path, resume=True)
    assert resumed["train_loss"] == straight["train_loss"]                # bit for bit, all 20 steps
    assert resumed["val_loss"] == straight["val_loss"]


class Crash(BaseException):
    """A simulated power cut: not an Exception, so nothing in the code under test can catch it."""


def crash_at(k, monkeypatch, calls):
    """Make the k-th file operation (mkdir, fsync, replace, rename, unlink, rmdir) crash before it
    runs; an fsync that crashes first truncates its file to half (the write never reached the disk).
    Every operation is recorded in ``calls``; k=None records without crashing."""
    import os
    import stat

    def wrap(name, real):
        def operation(*args, **kwargs):
            calls.append((name, args[0]))
            if len(calls) == k:
                if name == "fsync" and stat.S_ISREG(os.fstat(args[0]).st_mode):
                    os.ftruncate(args[0], os.fstat(args[0]).st_size // 2)
                raise Crash(f"power cut at {name}")
            return real(*args, **kwargs)
        return operation

    for name in ("mkdir", "fsync", "replace", "rename", "unlink", "rmdir"):
        monkeypatch.setattr(os, name, wrap(name, getattr(os, name)))


def test_a_crash_at_every_file_operation_of_a_save_resumes_from_the_newest_complete_checkpoint(
        data, tmp_path, monkeypatch):
    import shutil

    import llama_course.train.checkpoint as training

    cfg = TrainConfig(steps=8, batch_size=2, context_length=8, warmup_steps=1, eval_interval=4,
                      checkpoint_interval=4, progress=False)
    torch.manual_seed(0)
    straight = train(Llama(CONFIG), *data, cfg)
    torch.manual_seed(0)
    template = tmp_path / "template"
    train(Llama(CONFIG), *data, cfg, out_dir=template, until=4)          # a complete checkpoint at step 4
    save = training.save_checkpoint

    def run_with_crash_at(k, run):
        calls = []

        def save_with_faults(*args, **kwargs):
            with monkeypatch.context() as m:
                crash_at(k, m, calls)
                save(*args, **kwargs)
        monkeypatch.setattr(training, "save_checkpoint", save_with_faults)
        try:
            train(Llama(CONFIG), *data, cfg, out_dir=run, resume=True)     # steps 4..7, then saves step 8
        except Crash:
            pass
        monkeypatch.setattr(training, "save_checkpoint", save)
        return calls

    n_operations = len(run_with_crash_at(None, Path(shutil.copytree(template, tmp_path / "no-crash"))))
    assert n_operations >= 8                                              # mkdir, 4 files, renames, deletes
    resumed_from = []
    for k in range(1, n_operations + 1):
        run = Path(shutil.copytree(template, tmp_path / f"crash-{k}"))
        run_with_crash_at(k, run)
        resumed_from.append(json.loads((training.find_checkpoint(run / "checkpoint") / "manifest.json")
                                       .read_text())["step"])
        history = train(Llama(CONFIG), *data, cfg, out_dir=run, resume=True)
        assert history["train_loss"] == straight["train_loss"], f"crash at operation {k}"
        save(run / "checkpoint", Llama(CONFIG), make_optimizer(Llama(CONFIG), cfg), 9, torch.Generator(),
             history, cfg)                                                # a later save still works
        assert sorted(p.name for p in run.glob("checkpoint*")) == ["checkpoint"], f"crash at operation {k}"
        assert load_checkpoint(run / "checkpoint", Llama(CONFIG))[0] == 9
    first_new = resumed_from.index(8)                                     # once step 8 is complete, never 4
    assert resumed_from == [4] * first_new + [8] * (n_operations - first_new) and 0 < first_new < n_operations


KILLED_BETWEEN_THE_RENAMES = """
import os, sys, torch
from llama_course import LlamaConfig
from llama_course.model import Llama
from llama_course.train import TrainConfig, train
config = LlamaConfig(vocab_size=300, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=64)
data = torch.arange(2000) % 300
cfg = TrainConfig(steps=8, batch_size=2, context_length=8, warmup_steps=1, eval_interval=4, checkpoint_interval=4,
                  progress=False)
real_replace, renames = os.replace, []
def replace(source, target):
    renames.append(target)
    if len(renames) == 3:          # the second save: checkpoint -> checkpoint.old is done, .tmp not yet promoted
        os._exit(9)
    real_replace(source, target)
os.replace = replace
torch.manual_seed(0)
train(Llama(config), data, data, cfg, out_dir=sys.argv[1])
"""


@pytest.mark.slow
def test_a_process_killed_between_the_renames_resumes_from_the_new_checkpoint(tmp_path):
    from llama_course.train import find_checkpoint

    run = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_THE_RENAMES, str(tmp_path)], timeout=300,
                         capture_output=True, text=True)
    assert run.returncode == 9, run.stderr
    assert not (tmp_path / "checkpoint").exists()                          # the moment the old code lost both
    assert find_checkpoint(tmp_path / "checkpoint") == tmp_path / "checkpoint.tmp"
    data = torch.arange(2000) % 300
    cfg = TrainConfig(steps=8, batch_size=2, context_length=8, warmup_steps=1, eval_interval=4,
                      checkpoint_interval=4, progress=False)
    history = train(Llama(CONFIG), data, data, cfg, out_dir=tmp_path, resume=True)
    assert history["step"] == list(range(8))                              # steps 0-7 done, from the step-8 save
    torch.manual_seed(0)
    assert history["train_loss"] == train(Llama(CONFIG), data, data, cfg)["train_loss"]


def test_a_leftover_old_checkpoint_does_not_break_saves(data, tmp_path):
    cfg = TrainConfig(steps=4, batch_size=2, context_length=8, warmup_steps=1, eval_interval=2, progress=False)
    model = Llama(CONFIG)
    train(model, *data, cfg, out_dir=tmp_path)
    (tmp_path / "checkpoint.old").mkdir()
    (tmp_path / "checkpoint.old" / "model.safetensors").write_bytes(b"stale")
    save_checkpoint(tmp_path / "checkpoint", model, make_optimizer(model, cfg), 5, torch.Generator(), {}, cfg)
    assert load_checkpoint(tmp_path / "checkpoint", Llama(CONFIG))[0] == 5
    assert not (tmp_path / "checkpoint.old").exists() and not (tmp_path / "checkpoint.tmp").exists()


def test_a_flipped_byte_is_detected(data, tmp_path):
    cfg = TrainConfig(steps=2, batch_size=2, context_length=8, warmup_steps=1, progress=False)
    train(Llama(CONFIG), *data, cfg, out_dir=tmp_path)
    for name in ("model.safetensors", "state.pt", "config.json"):
        path = tmp_path / "checkpoint" / name
        original = path.read_bytes()
        flipped = bytearray(original)
        flipped[len(flipped) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match=f"{name} is corrupted"):
            load_checkpoint(tmp_path / "checkpoint", Llama(CONFIG))
        path.write_bytes(original)
    assert load_checkpoint(tmp_path / "checkpoint", Llama(CONFIG))[0] == 2


def test_every_config_field_is_compared_on_resume(data, tmp_path):
    scaled = CONFIG.replace(rope_scaling={"rope_type": "linear", "factor": 2.0})
    cfg = TrainConfig(steps=2, batch_size=2, context_length=8, warmup_steps=1, progress=False)
    train(Llama(scaled), *data, cfg, out_dir=tmp_path)
    with pytest.raises(ValueError, match="rope_scaling: checkpoint"):
        load_checkpoint(tmp_path / "checkpoint", Llama(CONFIG))
    with pytest.raises(ValueError, match="train.lr: checkpoint 0.003, run 0.001"):
        train(Llama(scaled), *data, TrainConfig(steps=2, batch_size=2, context_length=8, warmup_steps=1, lr=1e-3,
                                                progress=False), out_dir=tmp_path, resume=True)


def test_checkpoint_interval(data, tmp_path, monkeypatch):
    import llama_course.train.checkpoint as training

    saved = []
    monkeypatch.setattr(training, "save_checkpoint", lambda path, model, opt, step, *rest: saved.append(step))
    cfg = TrainConfig(steps=7, batch_size=2, context_length=8, warmup_steps=1, eval_interval=7,
                      checkpoint_interval=3, progress=False)
    train(Llama(CONFIG), *data, cfg, out_dir=tmp_path)
    assert saved == [3, 6, 7]


def test_resume_with_nothing_to_resume_says_so(data, tmp_path):
    cfg = TrainConfig(steps=2, batch_size=2, context_length=8, warmup_steps=1, progress=False)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(Llama(CONFIG), *data, cfg, out_dir=tmp_path, resume=True)
    (tmp_path / "checkpoint.tmp").mkdir()                                 # a first save that crashed
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(Llama(CONFIG), *data, cfg, out_dir=tmp_path, resume=True)


def test_a_non_finite_loss_stops_the_run_without_a_nan_checkpoint(data, tmp_path):
    model = Llama(CONFIG)
    calls = []

    def poison(module, args, output):                                     # the 4th forward pass returns NaN
        calls.append(1)
        return output * float("nan") if len(calls) == 4 else output

    model.register_forward_hook(poison)
    cfg = TrainConfig(steps=10, batch_size=2, context_length=8, warmup_steps=1, eval_interval=100,
                      checkpoint_interval=2, progress=False)
    with pytest.raises(FloatingPointError, match="non-finite loss nan at step 3"):
        train(model, *data, cfg, out_dir=tmp_path)
    assert all(torch.isfinite(p).all() for p in model.parameters())      # stopped before the update
    step, history = load_checkpoint(tmp_path / "checkpoint", fresh := Llama(CONFIG))
    assert step == 2 and all(math.isfinite(x) for x in history["train_loss"])
    assert all(torch.isfinite(p).all() for p in fresh.parameters())


@pytest.mark.parametrize("field, value", [("steps", 0), ("batch_size", 0), ("context_length", 0),
                                          ("eval_interval", 0), ("lr", float("nan")), ("checkpoint_interval", -1)])
def test_train_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})
    with pytest.raises(TypeError, match=field):
        TrainConfig(**{field: "1"})


def test_bf16_autocast_only_where_the_gpu_supports_it(monkeypatch):
    import warnings

    from llama_course.train.loop import _autocast

    for supported, dtype in ((True, torch.bfloat16), (False, torch.float16)):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True, s=supported: s)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                               # "CUDA is not available" on this machine
            assert _autocast(torch.device("cuda")).fast_dtype == dtype
    assert not _autocast(torch.device("cpu"))._enabled                    # float32 on the CPU


def test_fp16_gradient_scaler_step(data):
    """The fp16 path (GradScaler) on the CPU: same step as without a scaler when nothing overflows."""
    from llama_course.train import train_step

    x = get_batch(data[0], 2, 8, torch.Generator().manual_seed(0))
    cfg = TrainConfig(progress=False)
    torch.manual_seed(0)
    a = Llama(CONFIG)
    b = Llama(CONFIG)
    b.load_state_dict(a.state_dict())
    loss_a = train_step(a, make_optimizer(a, cfg), x, 1e-3, cfg)
    loss_b = train_step(b, make_optimizer(b, cfg), x, 1e-3, cfg, torch.amp.GradScaler("cpu", init_scale=2.0**4))
    assert loss_a == loss_b
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)


def test_bad_input(data, tmp_path):
    model = Llama(CONFIG)
    with pytest.raises(ValueError, match=r"context_length \+ 1 \(65\) exceeds the model's max_seq_len \(64\)"):
        train(model, *data, TrainConfig(context_length=64, progress=False))
    with pytest.raises(ValueError, match="fewer than one window"):
        train(model, torch.arange(10), torch.arange(10), TrainConfig(context_length=16, progress=False))
    train(model, *data, TrainConfig(steps=2, batch_size=2, context_length=8, warmup_steps=1, progress=False),
          out_dir=tmp_path)
    other = Llama(CONFIG.replace(d_model=48, d_ff=None, head_dim=None))
    with pytest.raises(ValueError, match="d_model: checkpoint 32, model 48"):
        load_checkpoint(tmp_path / "checkpoint", other)


@pytest.mark.slow
def test_command_line(tmp_path, capsys):
    from llama_course.train import main

    options = ["--config", "tiny", "--steps", "3", "--context-length", "16", "--batch-size", "2",
               "--out", str(tmp_path / "run")]
    run = subprocess.run([sys.executable, "-m", "llama_course.train", *options, "--vocab-size", "300"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "final validation loss" in run.stdout
    assert (tmp_path / "run" / "checkpoint" / "model.safetensors").exists()
    tokenizer = (tmp_path / "run" / "tokenizer.json").read_bytes()
    with pytest.raises(SystemExit) as exit_:                              # another vocabulary: nothing written
        main([*options, "--vocab-size", "320", "--resume"])
    assert exit_.value.code == 2 and "vocab_size: checkpoint 300, model 320" in capsys.readouterr().err
    assert (tmp_path / "run" / "tokenizer.json").read_bytes() == tokenizer


@pytest.mark.parametrize("options, message", [
    (["--steps", "0"], "steps must be an int >= 1"), (["--batch-size", "0"], "batch_size must be"),
    (["--context-length", "0"], "context_length must be"), (["--eval-interval", "0"], "eval_interval must be"),
    (["--out", ""], "must name a folder"), (["--resume"], "nothing to resume"),
    (["--context-length", "256"], "--context-length + 1 (257) exceeds --config tiny's max_seq_len (256)"),
    (["--vocab-size", "256"], "--vocab-size must be at least 257")])
def test_command_line_argument_errors_come_first(tmp_path, capsys, monkeypatch, options, message):
    import llama_course.tokenizer
    from llama_course.train import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(llama_course.tokenizer, "train_bpe", lambda *a, **k: train_bpe(TEXT, 300, ["<|endoftext|>"]))
    with pytest.raises(SystemExit) as exit_:
        main(["--out", str(tmp_path / "run"), *options])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []                                 # nothing written anywhere
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "file")])
    assert "exists and is not a folder" in capsys.readouterr().err


def test_documents_are_shuffled_before_the_split():
    from llama_course.data import course_corpus
    from llama_course.train import shuffle_documents

    text = shuffle_documents(course_corpus(), seed=0)
    documents = text.split("<|endoftext|>")
    assert len(documents) == course_corpus().count("Title:") + course_corpus().count("标题：")
    tail = "".join(documents[-len(documents) // 10:])
    assert "Title:" in tail  # not just the Chinese file, which ends the corpus
    assert shuffle_documents(course_corpus(), seed=0) == text != shuffle_documents(course_corpus(), seed=1)


# ------------------------------------------------------------------ a run folder holds one run (issue 31)

TINY_CLI = ["--steps", "2", "--context-length", "16", "--batch-size", "2", "--eval-interval", "2"]


@pytest.fixture
def course_tokenizer(monkeypatch):
    """The command line's tokenizer, trained on TEXT instead of the course corpus (seconds, not minutes)."""
    import llama_course.tokenizer

    tokenizer = train_bpe(TEXT, 300, ["<|endoftext|>"])
    monkeypatch.setattr(llama_course.tokenizer, "train_bpe", lambda *a, **k: tokenizer)
    return tokenizer


def test_a_fresh_run_refuses_a_folder_that_holds_an_earlier_runs_checkpoint(data, tmp_path, capsys):
    from llama_course.train import main

    cfg = TrainConfig(steps=3, batch_size=2, context_length=8, warmup_steps=1, eval_interval=3, progress=False)
    train(Llama(CONFIG), *data, cfg, out_dir=tmp_path)
    before = (tmp_path / "checkpoint" / "manifest.json").read_bytes()
    with pytest.raises(ValueError, match=r"earlier run \(step 3, in .*checkpoint\).*resume"):
        train(Llama(CONFIG), *data, cfg, out_dir=tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["--out", str(tmp_path), *TINY_CLI])
    assert exit_.value.code == 2 and "earlier run (step 3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--resume", "--overwrite", *TINY_CLI])
    assert "pass one of them" in capsys.readouterr().err
    assert (tmp_path / "checkpoint" / "manifest.json").read_bytes() == before      # untouched
    from argparse import Namespace

    from llama_course.train.cli import _check_resume, _parser
    with pytest.raises(SystemExit):                   # under torchrun --shard: refused before any work
        _check_resume(_parser(), Namespace(out=tmp_path, shard=True), CONFIG, cfg)
    assert "is a whole-model checkpoint; resume it without --shard" in capsys.readouterr().err


@pytest.mark.slow
def test_overwrite_starts_a_new_run_and_resume_extends_a_finished_one(tmp_path, capsys, course_tokenizer):
    from llama_course.train import main

    run = ["--out", str(tmp_path), *TINY_CLI]
    assert main(run) == 0
    assert main([*run, "--overwrite"]) == 0
    assert "cosine decay to 0.0003 at step 2\n" in capsys.readouterr().out
    step = json.loads((tmp_path / "checkpoint" / "manifest.json").read_text())["step"]
    assert step == 2
    assert main([*run, "--resume", "--steps", "3"]) == 0            # a finished run, extended by one step
    out = capsys.readouterr().out
    assert "warmup to 0.003 over 1 steps, cosine decay to 0.0003 at step 2, then 0.0003 until step 3" in out
    assert json.loads((tmp_path / "checkpoint" / "manifest.json").read_text())["step"] == 3


def test_extending_a_finished_run_keeps_its_schedule(data, tmp_path):
    from llama_course.train import describe_schedule

    cfg = TrainConfig(steps=6, batch_size=2, context_length=8, warmup_steps=2, eval_interval=3, progress=False)
    longer = TrainConfig(steps=8, decay_steps=6, batch_size=2, context_length=8, warmup_steps=2, eval_interval=3,
                         progress=False)
    assert [lr_at(s, longer) for s in range(6)] == [lr_at(s, cfg) for s in range(6)]
    assert lr_at(6, longer) == lr_at(7, longer) == pytest.approx(cfg.lr * cfg.min_lr_ratio)
    assert describe_schedule(longer).endswith("cosine decay to 0.0003 at step 6, then 0.0003 until step 8")
    torch.manual_seed(0)
    straight = train(Llama(CONFIG), *data, longer)
    torch.manual_seed(0)
    train(Llama(CONFIG), *data, cfg, out_dir=tmp_path)                      # finished at step 6
    with pytest.raises(ValueError, match=r"train.decay_steps: checkpoint 6, run 8; .*decay_steps=6"):
        train(Llama(CONFIG), *data, TrainConfig(**{**vars(longer), "decay_steps": None}), out_dir=tmp_path,
              resume=True)
    extended = train(Llama(CONFIG), *data, longer, out_dir=tmp_path, resume=True)
    assert extended["step"] == list(range(8))
    assert extended["train_loss"] == straight["train_loss"]                 # the same run as 8 steps in one go
    with pytest.raises(ValueError, match="decay_steps must be"):
        TrainConfig(decay_steps=0)


def test_two_runs_on_one_folder_the_second_names_the_lock_and_its_holder(tmp_path, capsys, course_tokenizer):
    import os

    from llama_course.train import World, main, run_lock

    with run_lock(tmp_path, World()):                                   # a run in progress
        with pytest.raises(SystemExit) as exit_:
            main(["--out", str(tmp_path), *TINY_CLI])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"process {os.getpid()} holds {tmp_path / 'train.lock'}" in err
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / "tokenizer.json").exists()
    hold = ("import time; from pathlib import Path; from llama_course.train import World, run_lock\n"
            f"with run_lock(Path({str(tmp_path)!r}), World()):\n print('held', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path), *TINY_CLI])
        assert f"process {holder.pid} holds" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    with run_lock(tmp_path, World()):                                   # released when its process ended
        pass


def test_a_stray_file_in_a_sharded_checkpoint_is_ignored_a_listed_one_checked(tmp_path):
    from llama_course.train import checkpoint_problem, commit_checkpoint

    shards = tmp_path / "checkpoint.tmp" / "dcp"
    shards.mkdir(parents=True)
    (shards / ".metadata").write_bytes(b"metadata")
    (shards / "__0_0.distcp").write_bytes(b"rank 0's shard")
    commit_checkpoint(tmp_path / "checkpoint", 5, {"state.pt": b"state", "config.json": b"{}"},
                      ("dcp/.metadata", "dcp/__0_0.distcp"))
    checkpoint = tmp_path / "checkpoint"
    assert checkpoint_problem(checkpoint) is None
    (checkpoint / "dcp" / "notes.txt").write_text("a file someone copied in")
    assert checkpoint_problem(checkpoint) is None                          # not listed: ignored
    (checkpoint / "dcp" / "__0_0.distcp").write_bytes(b"rank 0's shard, changed")
    assert "__0_0.distcp is corrupted" in checkpoint_problem(checkpoint)   # listed: checked


def test_a_checkpoint_older_than_a_config_field_resumes_as_its_default(tmp_path):
    """A checkpoint written before LlamaConfig gained a field (e.g. single_expert_moe) lacks it in its
    config.json: the field reads as its default, and a real difference is still named."""
    import dataclasses

    from llama_course.train import check_same_config

    config = LlamaConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=32)
    model = json.loads(json.dumps(dataclasses.asdict(config)))
    del model["single_expert_moe"]
    check_same_config(tmp_path, {"model": model}, config)                      # accepted: the default holds
    with pytest.raises(ValueError, match="single_expert_moe: checkpoint False, model True"):
        check_same_config(tmp_path, {"model": model}, config.replace(single_expert_moe=True))
    model["n_layers"] = 3
    with pytest.raises(ValueError, match="n_layers: checkpoint 3, model 2"):
        check_same_config(tmp_path, {"model": model}, config)
