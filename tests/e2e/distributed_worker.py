"""The 2-process side of tests/e2e/test_distributed.py, run under
``python -m torch.distributed.run --standalone --nproc-per-node 2 tests/e2e/distributed_worker.py OUT SCENARIO``.

Scenarios: "all" (DDP and FSDP2 training, checkpoints at step 5, tensor parallel, Meta shards into
tensor parallel) writes OUT/*.pt for the test to compare with one process; "fail" makes rank 1 raise;
"disagree" runs the command line with other options on rank 1; "tp-generate" decodes greedily with a
tensor-parallel model; "full-disk" saves an FSDP2 checkpoint onto a (simulated) full disk.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from llama_course import parallel
from llama_course.config import LlamaConfig
from llama_course.model import Llama
from llama_course.train import TrainConfig, train

CONFIG = LlamaConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=32)
TRAIN = TrainConfig(steps=10, batch_size=8, context_length=16, lr=3e-3, warmup_steps=2, eval_interval=5,
                    eval_batches=2, progress=False)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded tokens with something to learn (a token is often its predecessor + 1)."""
    return parallel.demo_data(CONFIG.vocab_size)


def fresh_model() -> Llama:
    torch.manual_seed(0)
    return Llama(CONFIG)


def full_state(model) -> dict[str, torch.Tensor]:
    """Whole tensors (FSDP2's shards gathered) of the model's parameters."""
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
            for k, v in model.state_dict().items()}


def run_training(out: Path, par: parallel.Parallel, name: str) -> None:
    train_data, val_data = data()
    model = fresh_model()
    history = train(par.wrap(model), train_data, val_data, TRAIN, world=par)
    trained = full_state(model)
    # per-rank parameter + AdamW state after one step of a second copy (the optimizer state now exists)
    probe = fresh_model()
    wrapped = par.wrap(probe)
    optimizer = torch.optim.AdamW(probe.parameters())
    x = torch.randint(0, CONFIG.vocab_size, (2, 9), device=par.device)
    wrapped(x).float().mean().backward()
    optimizer.step()
    memory = parallel.state_bytes(probe, optimizer)
    memories = [None] * par.world_size
    dist.all_gather_object(memories, memory)
    # a run that stops at step 5 and leaves a checkpoint, for the 1-process resume
    until5 = fresh_model()
    train(par.wrap(until5), train_data, val_data, TRAIN, out_dir=out / f"{name}-until5", until=5, world=par)
    if par.is_main:
        torch.save({"history": history, "state": trained, "memory": memories}, out / f"{name}.pt")


def run_accumulation(out: Path, par: parallel.Parallel) -> None:
    """DDP with 2 micro-batches per step: gradients all-reduced once, on the second."""
    model = fresh_model()
    history = train(par.wrap(model), *data(), dataclasses.replace(TRAIN, accum_steps=2), world=par)
    if par.is_main:
        torch.save({"history": history, "state": full_state(model)}, out / "ddp-accum.pt")


def run_tensor_parallel(out: Path, par: parallel.Parallel) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from llama_course.parallel import apply_tp

    mesh = init_device_mesh("cpu", (par.world_size,))
    reference = fresh_model()
    model = apply_tp(fresh_model(), mesh)
    x = torch.randint(0, CONFIG.vocab_size, (2, 12), generator=torch.Generator().manual_seed(3)).to(mesh.device_type)
    outputs = []
    for m in (reference, model):
        logits = m(x)                                   # (B, T, V)
        (logits.float() ** 2).mean().backward()
        outputs.append(logits.detach())
    grads = {name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad)
             for name, p in model.named_parameters()}
    local_shapes = {name: tuple(p.to_local().shape) for name, p in model.named_parameters() if hasattr(p, "to_local")}
    if par.is_main:
        torch.save({"x": x, "logits": outputs[1], "reference_logits": outputs[0],
                    "grads": grads, "reference_grads": {n: p.grad for n, p in reference.named_parameters()},
                    "local_shapes": local_shapes}, out / "tp.pt")


def run_meta_shards(out: Path, par: parallel.Parallel) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from llama_course.parallel import load_meta_tensor_parallel, split_for_meta, write_meta

    mesh = init_device_mesh("cpu", (par.world_size,))
    directory = out / "meta"
    if par.is_main:
        params = {"dim": CONFIG.d_model, "n_layers": CONFIG.n_layers, "n_heads": CONFIG.n_heads,
                  "n_kv_heads": CONFIG.n_kv_heads, "multiple_of": 16, "ffn_dim_multiplier": 0.75,
                  "norm_eps": CONFIG.norm_eps,
                  "max_seq_len": CONFIG.max_seq_len}
        write_meta(directory, split_for_meta(fresh_model().state_dict(), par.world_size), params)
    parallel.barrier(par)
    model = load_meta_tensor_parallel(directory, mesh)
    x = torch.randint(0, CONFIG.vocab_size, (2, 12), generator=torch.Generator().manual_seed(4)).to(mesh.device_type)
    logits = model(x).detach()
    if par.is_main:
        torch.save({"x": x, "logits": logits}, out / "meta_tp.pt")


def run_tensor_parallel_generate(out: Path, par: parallel.Parallel) -> None:
    """Greedy decoding with a KV cache on tensor-parallel models (CONFIG's 2 key/value heads, and 4:
    plain multi-head attention) and on the whole ones; writes the tokens of every rank and the shape
    of the cache each rank filled to OUT/tp-generate.pt."""
    from torch.distributed.device_mesh import init_device_mesh

    from llama_course.generate import generate
    from llama_course.parallel import apply_tp

    mesh = init_device_mesh("cpu", (par.world_size,))
    prompt = torch.randint(0, CONFIG.vocab_size, (2, 5), generator=torch.Generator().manual_seed(5))
    result = {}
    for n_kv_heads in (CONFIG.n_kv_heads, CONFIG.n_heads):
        whole, sharded = (Llama(CONFIG.replace(n_kv_heads=n_kv_heads)).eval() for _ in range(2)
                          if torch.manual_seed(0))                # the same weights twice
        apply_tp(sharded, mesh)
        seen = []
        forward = sharded.forward

        def spy(input_ids, positions=None, cache=None, *args, **kwargs):
            seen.append(tuple(cache.keys[0].shape))
            return forward(input_ids, positions, cache, *args, **kwargs)
        sharded.forward = spy                 # nn.Module.__call__ calls the instance's forward
        tokens = generate(sharded, prompt, 12)
        gathered = [None] * par.world_size
        dist.all_gather_object(gathered, (tokens, seen[0]))
        attn = sharded.layers[0].self_attn
        result[n_kv_heads] = {"reference": generate(whole, prompt, 12), "ranks": gathered,
                              "config": sharded.config, "heads": (attn.n_heads, attn.n_kv_heads)}
    whole, sharded = (Llama(CONFIG).eval() for _ in range(2) if torch.manual_seed(0))
    parallel.apply_fsdp(sharded)               # FSDP2 gathers every head whole for each forward
    result["fsdp"] = {"reference": generate(whole, prompt, 12), "tokens": generate(sharded, prompt, 12)}
    if par.is_main:
        torch.save(result, out / "tp-generate.pt")


def run_full_disk(out: Path, par: parallel.Parallel) -> None:
    """An FSDP2 run whose checkpoint save meets a full disk: every file torch.distributed.checkpoint
    opens accepts 4096 bytes, then its write raises OSError(ENOSPC), as a file on a full disk does.
    Each rank writes what it raised to OUT/full-disk-RANK.txt."""
    import contextlib
    import errno

    from torch.distributed.checkpoint.filesystem import FileSystem

    class FullDisk:
        def __init__(self, stream):
            self.stream, self.written = stream, 0

        def write(self, data):
            self.written += len(memoryview(data).cast("B"))
            if self.written > 4096:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.stream.write(data)

        def __getattr__(self, name):
            return getattr(self.stream, name)

    original = FileSystem.create_stream

    @contextlib.contextmanager
    def create_stream(self, path, mode):
        with original(self, path, mode) as stream:
            yield FullDisk(stream) if "w" in mode else stream
    FileSystem.create_stream = create_stream
    sharded = dataclasses.replace(par, shard=True)
    try:
        train(sharded.wrap(fresh_model()), *data(), TRAIN, out_dir=out / "full-disk", until=5, world=sharded)
        raised = "nothing"
    except BaseException as err:       # what the user sees (dcp's CheckpointException is a BaseException)
        raised = f"{type(err).__name__}: {err}"
    finally:
        FileSystem.create_stream = original
    (out / f"full-disk-{par.rank}.txt").write_text(raised)


def run_disagreement(out: Path, par: parallel.Parallel) -> None:
    """The command line on two ranks launched with different --lr and --steps: each rank writes its
    exit status and what it printed to OUT/disagree-RANK.txt."""
    import contextlib
    import io

    from llama_course.parallel.launch import main

    lr, steps = ("0.003", "300") if par.rank == 0 else ("0.001", "200")
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed):
        try:
            status = main(["--out", str(out / "disagree"), "--lr", lr, "--steps", steps])
        except SystemExit as stop:
            status = stop.code
    (out / f"disagree-{par.rank}.txt").write_text(f"{status}\n{printed.getvalue()}")


def main() -> int:
    return run(Path(sys.argv[1]), sys.argv[2])


def run(out: Path, scenario: str) -> int:
    """One rank's part: the environment says which (torchrun's variables, or the test's)."""
    torch.set_num_threads(1)
    par = parallel.setup(timeout_s=60)
    try:
        if scenario == "disagree":
            run_disagreement(out, par)
            return 0
        if scenario == "full-disk":
            run_full_disk(out, par)
            return 0
        if scenario == "tp-generate":
            run_tensor_parallel_generate(out, par)
            return 0
        if scenario == "fail":
            if par.rank == 1:
                raise RuntimeError("rank 1 fails on purpose")
            parallel.barrier(par, timeout_s=60)      # rank 0 waits for a rank that never comes
            return 0
        sharded = dataclasses.replace(par, shard=True)
        for name, run in (("ddp", lambda: run_training(out, par, "ddp")),
                          ("fsdp", lambda: run_training(out, sharded, "fsdp")),
                          ("ddp with accumulation", lambda: run_accumulation(out, par)),
                          ("tensor parallel", lambda: run_tensor_parallel(out, par)),
                          ("meta shards", lambda: run_meta_shards(out, par))):
            started = time.perf_counter()
            run()
            if par.is_main:
                print(f"{name}: {time.perf_counter() - started:.1f} s", flush=True)
        parallel.barrier(par)
    finally:
        parallel.teardown()
    return 0


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    sys.exit(record(main)())
