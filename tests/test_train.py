"""Training: the recipe's pieces, exact resumption, atomic checkpoints, bad input, the CLI."""

import math
import subprocess
import sys

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


def test_an_interrupted_save_leaves_the_last_checkpoint(data, tmp_path, monkeypatch):
    cfg = TrainConfig(steps=4, batch_size=2, context_length=8, warmup_steps=1, eval_interval=2, progress=False)
    model = Llama(CONFIG)
    train(model, *data, cfg, out_dir=tmp_path)
    import safetensors.torch

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power cut while writing")

    monkeypatch.setattr(safetensors.torch, "save_file", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path / "checkpoint", model, make_optimizer(model, cfg), 99, torch.Generator(), {}, cfg)
    monkeypatch.undo()
    step, _ = load_checkpoint(tmp_path / "checkpoint", Llama(CONFIG))
    assert step == 4                                                      # the complete one, untouched


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


def test_command_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "llama_course.train", "--config", "tiny", "--steps", "3",
                          "--vocab-size", "300", "--context-length", "16", "--batch-size", "2",
                          "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "final validation loss" in run.stdout
    assert (tmp_path / "run" / "checkpoint" / "model.safetensors").exists()
    assert (tmp_path / "run" / "tokenizer.json").exists()


def test_documents_are_shuffled_before_the_split():
    from llama_course.data import course_corpus
    from llama_course.train import shuffle_documents

    text = shuffle_documents(course_corpus(), seed=0)
    documents = text.split("<|endoftext|>")
    assert len(documents) == course_corpus().count("Title:") + course_corpus().count("标题：")
    tail = "".join(documents[-len(documents) // 10:])
    assert "Title:" in tail  # not just the Chinese file, which ends the corpus
    assert shuffle_documents(course_corpus(), seed=0) == text != shuffle_documents(course_corpus(), seed=1)
