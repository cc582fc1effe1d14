"""Chapter 13 on CPU processes: DDP, FSDP2 and tensor parallel against one process, checkpoints
across process counts, failures that end the run, bad use, and the memory arithmetic.

The 2-process runs (tests/e2e/distributed_worker.py, gloo) are forked once from this process and write
what they computed; the one-process references are computed here with the ordinary ``train``. The
failure test launches torchrun itself, as a user would.

Tolerances. Two ranks and one process see exactly the same windows, learning rates and initial
weights; only the order of float32 additions differs (each rank sums its own rows, then the
gradients are averaged across ranks, instead of one sum over all rows). Measured over 10 AdamW
steps: losses differ by at most 4.8e-7 (one float32 ulp at a loss of about 4) and weights by at
most 1.9e-7. The tests allow 10 ulp-sized steps: 5e-6 on losses and 2e-6 on weights; a real
mistake (a rank reading the wrong rows, gradients summed instead of averaged, a step skipped)
changes the loss in the third decimal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from llama_course import parallel
from llama_course.checkpoint import load_meta
from llama_course.config import LlamaConfig
from llama_course.model import Llama
from llama_course.train import train
from llama_course.train.checkpoint import SHARDED
from llama_course.train.data import check_batch, local_rows

sys.path.insert(0, str(Path(__file__).parent))
import distributed_worker as worker  # noqa: E402  (the worker's model, data and config)

ROOT = Path(__file__).resolve().parents[2]
LOSS_TOL, WEIGHT_TOL = 5e-6, 2e-6


def _rank(rank: int, out: Path, scenario: str, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    worker.run(out, scenario)


def fork_two_ranks(out: Path, scenario: str, timeout: float) -> None:
    """Two ranks forked from this process (torch already imported: seconds instead of a launcher's
    half minute on a busy machine), with the variables torchrun would set."""
    import socket

    import torch.distributed.checkpoint  # noqa: F401  imported once here, not once per rank
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401
    import torch.multiprocessing as mp
    import torch.nn.parallel  # noqa: F401

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.start_processes(_rank, args=(out, scenario, port), nprocs=2, start_method="fork", join=False)
    deadline = time.monotonic() + timeout
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the two ranks did not finish within {timeout} s")


def launch(out: Path, scenario: str, timeout: float) -> subprocess.CompletedProcess:
    """torchrun, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(ROOT / "tests" / "e2e" / "distributed_worker.py"), str(out), scenario]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("two_ranks")
    fork_two_ranks(out, "all", timeout=240)
    return out


@pytest.fixture(scope="module")
def reference():
    """One process, the whole batch of 8, 10 steps."""
    model = worker.fresh_model()
    history = train(model, *worker.data(), worker.TRAIN)
    return history, model.state_dict()


def assert_same_run(history, state, ref_history, ref_state) -> None:
    assert history["step"] == ref_history["step"] == list(range(10))
    diffs = [abs(a - b) for a, b in zip(history["train_loss"], ref_history["train_loss"])]
    assert max(diffs) < LOSS_TOL, diffs
    assert history["val_step"] == ref_history["val_step"]
    assert max(abs(a - b) for a, b in zip(history["val_loss"], ref_history["val_loss"])) < LOSS_TOL
    assert state.keys() == ref_state.keys()
    for name, tensor in ref_state.items():
        assert (state[name] - tensor).abs().max().item() < WEIGHT_TOL, name
    assert ref_history["train_loss"][-1] < ref_history["train_loss"][0] - 0.05   # it did learn


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ddp", "fsdp", "ddp-accum"])
def test_two_ranks_equal_one_process_with_the_whole_batch(runs, reference, name):
    result = torch.load(runs / f"{name}.pt", weights_only=False)
    assert_same_run(result["history"], result["state"], *reference)


def test_gradient_accumulation_equals_the_whole_batch_at_once(reference):
    model = worker.fresh_model()
    history = train(model, *worker.data(), dataclasses.replace(worker.TRAIN, accum_steps=4))
    assert_same_run(history, model.state_dict(), *reference)


@pytest.mark.slow
def test_fsdp_holds_half_the_parameter_and_optimizer_state_per_rank(runs):
    ddp = torch.load(runs / "ddp.pt", weights_only=False)["memory"]
    fsdp = torch.load(runs / "fsdp.pt", weights_only=False)["memory"]
    params = sum(p.numel() * 4 for p in worker.fresh_model().parameters())
    assert all(m["parameters"] == params and m["optimizer"] == 2 * params for m in ddp)  # whole copies, m and v
    for rank in fsdp:
        assert 0.45 < rank["total"] / ddp[0]["total"] < 0.55, rank
    assert sum(m["parameters"] for m in fsdp) == params                                  # the shards add up


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ddp", "fsdp"])
def test_two_rank_checkpoint_resumes_on_one_process(runs, reference, name, tmp_path):
    directory = shutil.copytree(runs / f"{name}-until5", tmp_path / name)   # the run adds its own checkpoint
    assert (directory / "checkpoint" / SHARDED).is_dir() == (name == "fsdp")
    model = worker.fresh_model()                # one process; Chapter 13's checkpointer reads the shards
    history = train(model, *worker.data(), worker.TRAIN, out_dir=directory, resume=True,
                    world=parallel.Parallel())
    assert_same_run(history, model.state_dict(), *reference)


@pytest.mark.slow
def test_a_sharded_checkpoint_is_saved_by_the_crash_safe_protocol(runs, tmp_path):
    from llama_course.train import checkpoint_problem

    checkpoint = shutil.copytree(runs / "fsdp-until5" / "checkpoint", tmp_path / "checkpoint")
    listed = json.loads((checkpoint / "manifest.json").read_text())
    shards = sorted(f.relative_to(checkpoint).as_posix() for f in (checkpoint / SHARDED).rglob("*"))
    assert listed["step"] == 5 and sorted(listed["sha256"]) == sorted(["config.json", "state.pt", *shards])
    assert not any((runs / "fsdp-until5" / f"checkpoint{end}").exists() for end in (".tmp", ".old"))
    assert checkpoint_problem(checkpoint) is None
    shard = next(f for f in (checkpoint / SHARDED).iterdir() if f.suffix == ".distcp")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF                                   # one flipped byte in one rank's shard
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted"):
        train(worker.fresh_model(), *worker.data(), worker.TRAIN, out_dir=tmp_path, resume=True,
              world=parallel.Parallel())


@pytest.mark.slow
def test_tensor_parallel_forward_and_backward_equal_one_process(runs):
    tp = torch.load(runs / "tp.pt", weights_only=False)
    torch.testing.assert_close(tp["logits"], tp["reference_logits"], rtol=0, atol=1e-6)
    for name, grad in tp["reference_grads"].items():
        torch.testing.assert_close(tp["grads"][name], grad, rtol=1e-5, atol=1e-8, msg=name)
    c = worker.CONFIG
    shapes = tp["local_shapes"]   # each rank: half the heads, half the hidden units
    assert shapes["layers.0.self_attn.q_proj.weight"] == (c.n_heads * c.head_dim // 2, c.d_model)
    assert shapes["layers.0.self_attn.k_proj.weight"] == (c.n_kv_heads * c.head_dim // 2, c.d_model)
    assert shapes["layers.0.self_attn.o_proj.weight"] == (c.d_model, c.n_heads * c.head_dim // 2)
    assert shapes["layers.0.mlp.gate_proj.weight"] == (c.d_ff // 2, c.d_model)
    assert shapes["layers.0.mlp.down_proj.weight"] == (c.d_model, c.d_ff // 2)


@pytest.mark.slow
def test_meta_shards_load_straight_into_tensor_parallel(runs):
    result = torch.load(runs / "meta_tp.pt", weights_only=False)
    merged = load_meta(runs / "meta")                        # the package's merge-first loader
    torch.testing.assert_close(result["logits"], merged(result["x"]), rtol=0, atol=1e-6)
    torch.testing.assert_close(result["logits"], worker.fresh_model()(result["x"]), rtol=0, atol=1e-6)


@pytest.mark.slow
def test_a_failing_rank_ends_the_run_with_its_error(tmp_path):
    started = time.perf_counter()
    result = launch(tmp_path, "fail", timeout=120)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "rank 1 fails on purpose" in output and "ChildFailedError" in output
    assert time.perf_counter() - started < 100        # ended, not waited out


def test_a_tensor_parallel_model_generates_the_tokens_of_the_whole_model(tmp_path):
    """Each rank's KV cache holds only its n_kv_heads / 2 heads (it was sized from the config's global
    count: twice too large with 2 key/value heads, a broadcast error with 4); the greedy tokens of
    both ranks equal the unsharded model's. The tensor-parallel plan changes no head count: the
    attention layers read theirs from the sharded weights' widths."""
    fork_two_ranks(tmp_path, "tp-generate", timeout=120)
    result = torch.load(tmp_path / "tp-generate.pt", weights_only=False)
    c = worker.CONFIG
    for n_kv_heads in (c.n_kv_heads, c.n_heads):
        reference = result[n_kv_heads]["reference"]
        assert reference.shape == (2, 5 + 12)
        for tokens, cache_shape in result[n_kv_heads]["ranks"]:
            assert torch.equal(tokens, reference), n_kv_heads
            assert cache_shape == (2, n_kv_heads // 2, 5 + 12 - 1, c.head_dim)
        # the plan changes the weights only: the config and the layers keep the whole model's heads
        assert result[n_kv_heads]["config"] == c.replace(n_kv_heads=n_kv_heads)
        assert result[n_kv_heads]["heads"] == (c.n_heads, n_kv_heads)
    # FSDP2 shards the same weights between passes, but each forward computes every head
    assert torch.equal(result["fsdp"]["tokens"], result["fsdp"]["reference"])


def test_a_sharded_save_on_a_full_disk_says_so_and_names_the_folder(tmp_path):
    """FSDP2's save onto a full disk (simulated where torch.distributed.checkpoint opens its files:
    each accepts 4096 bytes, then write raises OSError(ENOSPC), as on a full disk; no root, no real
    filesystem filled). It said 'RuntimeError: [enforce fail at inline_container.cc:672] unexpected
    pos'; now every rank says no space is left, names the folder, and no checkpoint is promoted."""
    fork_two_ranks(tmp_path, "full-disk", timeout=120)
    for rank in (0, 1):
        raised = (tmp_path / f"full-disk-{rank}.txt").read_text()
        assert raised.startswith("OSError: ") and "No space left on device" in raised, raised
        assert str(tmp_path / "full-disk" / "checkpoint.tmp") in raised, raised
    assert not (tmp_path / "full-disk" / "checkpoint").exists()


def test_ranks_launched_with_different_options_all_stop_naming_each_difference(tmp_path):
    started = time.perf_counter()
    fork_two_ranks(tmp_path, "disagree", timeout=120)
    for rank in (0, 1):
        status, printed = (tmp_path / f"disagree-{rank}.txt").read_text().split("\n", 1)
        assert status == "2", printed                                  # argparse's status for bad options
        error = printed.split("error: ")[-1]
        assert error == ("the processes were launched with different options: --lr: rank 0 0.003, rank 1 0.001; "
                         "--steps: rank 0 300, rank 1 200. Launch every process with the same arguments\n")
    assert not (tmp_path / "disagree").exists()                        # stopped before writing anything
    assert time.perf_counter() - started < 60                          # not a collective's 300 s timeout


@pytest.mark.slow
def test_bad_use_is_a_clear_error(tmp_path, monkeypatch, runs):
    with pytest.raises(ValueError, match="divisible by world_size"):
        check_batch(10, 4)
    with pytest.raises(ValueError, match=r"world_size \(2\) x accum_steps \(3\)"):
        check_batch(8, 2, 3)
    three_ranks = parallel.Parallel(rank=0, world_size=3)
    with pytest.raises(ValueError, match=r"batch_size \(8\) must be divisible by world_size \(3\)"):
        train(worker.fresh_model(), *worker.data(), worker.TRAIN, world=three_ranks)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="--shard .* at least 2"):
        parallel.setup(shard=True)
    other = Llama(LlamaConfig(vocab_size=64, d_model=32, n_layers=3, n_heads=4, d_ff=64, max_seq_len=32))
    with pytest.raises(ValueError, match="another model or run: n_layers: checkpoint 2, model 3"):
        train(other, *worker.data(), worker.TRAIN, out_dir=runs / "fsdp-until5", resume=True,
              world=parallel.Parallel())
    with pytest.raises(ValueError, match="sharded checkpoint .* llama_course.parallel"):
        train(worker.fresh_model(), *worker.data(), worker.TRAIN, out_dir=runs / "fsdp-until5", resume=True)
    with pytest.raises(ValueError, match="another model or run: n_layers: checkpoint 2, model 3"):
        train(other, *worker.data(), worker.TRAIN, out_dir=runs / "ddp-until5", resume=True)


def test_ranks_read_disjoint_halves_of_the_batch():
    windows = torch.arange(8 * 5).reshape(8, 5)
    halves = [parallel.Parallel(rank=r, world_size=2).rows(windows) for r in (0, 1)]
    assert [h.shape[0] for h in halves] == [4, 4]
    assert torch.equal(torch.cat(halves), windows)                       # together: exactly the batch
    with pytest.raises(ValueError, match="divisible"):
        local_rows(windows[:7], 0, 2)


def test_memory_and_communication_match_the_zero_paper():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, mixed precision with Adam (K = 12)
    gb = 1e9
    assert parallel.memory_per_gpu(7.5e9, 64, "ddp") / gb == pytest.approx(120)
    assert parallel.memory_per_gpu(7.5e9, 64, "zero1") / gb == pytest.approx(31.4, abs=0.05)
    assert parallel.memory_per_gpu(7.5e9, 64, "zero2") / gb == pytest.approx(16.6, abs=0.05)
    assert parallel.memory_per_gpu(7.5e9, 64, "zero3") / gb == pytest.approx(1.88, abs=0.01)
    # Section 7: ZeRO-1/2 communicate as much as data parallelism, ZeRO-3 1.5 times as much
    ddp = parallel.communication_bytes(7.5e9, 64, "ddp")
    assert parallel.communication_bytes(7.5e9, 64, "zero2") == ddp
    assert parallel.communication_bytes(7.5e9, 64, "zero3") == pytest.approx(1.5 * ddp)
    # ring all-reduce (Patarasuk and Yuan 2009): each GPU sends 2 (N - 1) / N of the fp16 gradients
    assert ddp == pytest.approx(2 * 63 / 64 * 7.5e9 * 2)
    with pytest.raises(ValueError, match="strategy"):
        parallel.memory_per_gpu(1e9, 8, "zero4")
    with pytest.raises(ValueError, match="n_gpus"):
        parallel.communication_bytes(1e9, 0)
