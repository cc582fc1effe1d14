"""The capstone (Chapter 14, "Your LLaMA"): grade a model assembled from a student's exercises/ alone.

    python -m llama_course.grade capstone [exercises/] [--parts abcd] [--quick] [--json FILE] [--plot FILE]

The model is llama_course.your_llama.YourLlama: every piece (tokenizer, embedding, loss, RMSNorm,
attention and its mask, RoPE, SwiGLU, block, model, KV cache, sampling, GQA) is the student's
function, wired to the student's other pieces; the run first prints which file served each piece.
Graded parts (100 points; PARTS: each part's public checks below, its hidden tests the rest):

    (a) 30  logits equal transformers' LlamaForCausalLM on a seeded random checkpoint: MHA with an
            untied head (10), GQA with a tied head (10); |diff| <= 1e-4 + 1e-4 |expected|, the
            tolerance of the graded parity tests. Hidden: 10.
    (b) 25  cached decode (the student's KVCache, decode_step, gqa_attention) equals the student's
            own full forward at every step (10); greedy_generate's tokens equal transformers'
            generate (5). Hidden: 10.
    (c) 30  the student's train_bpe / encode / decode on the course corpus: merges equal the
            package's tokenizer's and decode(encode(text)) == text (5); the Chapter 11 loop
            (AdamW, warmup + cosine, clipping) with the student's next_token_loss reaches a
            validation loss within MARGIN nats of the package's Llama trained from the same
            initial weights on the same batches (15). Hidden: 10.
    (d) 15  text sampled with the student's top_p_filter and softmax through the KV cache: each
            token equals the draw of the same generator from the package's nucleus of the
            student's full-forward logits (6); the student's decode equals the package's (4).
            Hidden: 5.

The hidden tests (tests/hidden/capstone_checks.py: the instructor's copy only, never the student
release) run after each part's public checks, under the same watcher; where this copy has
none (the student release) the part says how many points they carry and that they are not
checked here.

A failing part names the first of the student's pieces that disagrees: starting from the reference
(the instructor's key, solutions/, when this copy has it; else the package's functions for the
pieces it has), the student's pieces go in one at a time and the part's check is re-run.

The rule of the grader applies to the whole, every part and check (the tokenizer and the training
of part (c) included): before any file is imported, the grader's import rule (rules.file_problems)
is read on each piece file, and a file that breaks it gives no piece; a piece whose function is
not defined in the student's file (the package's, imported under its name) is NOT YOURS and
gives nothing; and while every check runs, a call watcher records any call from the student's
files into the package's answering modules (attention, norm, rope, ffn, model, kv_cache,
generate, gqa, loss, embedding, tokenizer); one such call costs the check its points, and
every later check that uses the calling piece (the part's messages say which); a watcher that
student code replaced costs every piece.

Where the student's code runs: the command (`make capstone`, the Gradescope assignment) runs it
in the grader's sandbox, the chapter grader's confinement (sandbox.confine: as root, a user of its
own that cannot read the key, the hidden tests or the results, mount and network namespaces where
the kernel allows them, memory, file and process limits; refused, grading nothing, where it cannot
be had). The student's side (Bench: their pieces, and each computation that runs them, returning
plain data) lives in the worker; the oracles, the hidden tests and every verdict stay in the
grader. There, a failing part is localised against the package's functions (the key is hidden
from the worker). `--in-process` (and grade() without a bench, as the book calls it) runs the
student's own code in this process: a self-check, never for other people's code.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import re
import sys
import tempfile
import textwrap
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from llama_course import your_llama as yl
from llama_course.config import LlamaConfig

REPO = Path(__file__).resolve().parents[2]
TOL = dict(rtol=1e-4, atol=1e-4)
MARGIN = 0.05            # nats of validation loss between the student's model and the package's
SPECIAL = ("<|endoftext|>",)
WATCHED_MODULES = ("attention", "norm", "rope", "ffn", "model", "kv_cache", "generate", "gqa", "loss",
                   "embedding", "tokenizer.bpe")
ALLOWED_CALLS = ("BPETokenizer.__init__",)   # train_bpe's return value is the package's container
# part: (its points, of which its public checks carry); its hidden tests carry the rest, shared by weight
PARTS = {"a": (30, 20), "b": (25, 15), "c": (30, 20), "d": (15, 10)}
HIDDEN = REPO / "tests" / "hidden" / "capstone_checks.py"   # never in the student release
ORDER = ("tokenizer", "embedding", "loss", "RMSNorm", "attention", "RoPE", "SwiGLU", "GQA", "block", "model",
         "KV cache", "sampling")


@dataclass
class Sizes:
    """How big the capstone runs: the default (`make capstone`: the key's parts a-d took 241 CPU-seconds
    and 406 MB in one process, 26 minutes of wall time on a 2-core machine at load average 7 to 21;
    not measured idle) or quick (tests, Ch14's stored output)."""

    corpus_parts: tuple = ("stories_a.txt", "stories_b.txt", "explainers.txt")
    corpus_chars: int | None = None
    vocab_size: int = 320
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 172
    steps: int = 100
    batch_size: int = 8
    context_length: int = 64
    lr: float = 3e-3
    warmup_steps: int = 10
    eval_batches: int = 4
    new_tokens: int = 60
    device: str = "cpu"


QUICK = Sizes(corpus_parts=("stories_a.txt",), corpus_chars=20_000, vocab_size=300, d_model=32, n_heads=4,
              n_kv_heads=2, d_ff=64, steps=6, batch_size=4, context_length=32, warmup_steps=2, eval_batches=2,
              new_tokens=12)


@dataclass
class Check:
    name: str
    points: float
    score: float = 0.0
    message: str = ""


@dataclass
class Part:
    key: str
    title: str
    checks: list = field(default_factory=list)
    culprit: str = ""
    notes: list = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(c.score for c in self.checks)

    @property
    def points(self) -> float:
        return sum(c.points for c in self.checks)


class CheckFailed(AssertionError):
    pass


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """CheckFailed unless |actual - expected| <= atol + rtol |expected| everywhere (shapes equal)."""
    if not isinstance(actual, torch.Tensor):
        raise CheckFailed(f"{what}: got {type(actual).__name__}, expected a tensor")
    if actual.shape != expected.shape:
        raise CheckFailed(f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    diff = (actual.detach().double() - expected.detach().double()).abs()
    bound = TOL["atol"] + TOL["rtol"] * expected.detach().double().abs()
    if not bool((diff <= bound).all()):
        raise CheckFailed(f"{what}: max |difference| {diff.max().item():.3g} exceeds the tolerance "
                          f"(1e-4 + 1e-4 |expected|)")


# ------------------------------------------------------------------------------ the call watcher


class Watcher:
    """sys.setprofile hook: the package's answering functions called directly from ``folder``'s files."""

    def __init__(self, folder: Path):
        import importlib

        self.folder = str(folder.resolve())
        self.codes, self.seen = {}, []
        for short in WATCHED_MODULES:
            module = importlib.import_module(f"llama_course.{short}")
            for name, value in vars(module).items():
                for qualname, code in _codes(name, value, module.__name__):
                    if qualname not in ALLOWED_CALLS:
                        self.codes[id(code)] = f"llama_course.{short}.{qualname}"

    def __enter__(self):
        self.previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self.previous)
        return False

    def _profile(self, frame, event, arg):
        if event != "call":
            return
        name = self.codes.get(id(frame.f_code))
        caller = frame.f_back
        if name and caller is not None and caller.f_code.co_filename.startswith(self.folder):
            where = f"{Path(caller.f_code.co_filename).name} line {caller.f_lineno}"
            if (name, where) not in [s[:2] for s in self.seen]:
                self.seen.append((name, where, Path(caller.f_code.co_filename).stem, caller.f_code.co_name))



TAMPERED = "your code replaced the grader's call watcher (sys.setprofile or threading.setprofile)"


def seen_pieces(seen) -> list[str]:
    """The pieces whose functions made the calls ``seen`` (Watcher.seen's entries): the caller's piece,
    else every piece of its file."""
    out = []
    for _, _, stem, function in seen:
        found = [yl.NAMES[function]] if function in yl.NAMES else [
            piece for piece, (file, _) in yl.PIECES.items() if file == stem]
        out += [piece for piece in found if piece not in out]
    return out


def seen_problem(seen, tampered: bool = False) -> str:
    if tampered:
        return f"no points: {TAMPERED}. Every piece of the capstone must run where the grader can watch it."
    if not seen:
        return ""
    return ("no points: your files called the package's " +
            "; ".join(f"{name} ({where})" for name, where, *_ in seen[:3]) +
            ". Every piece of the capstone must be your own function.")


def _codes(name, value, module_name):
    if getattr(value, "__module__", None) != module_name:
        return
    if isinstance(value, type):
        for attr, member in vars(value).items():
            member = getattr(member, "__func__", getattr(member, "fget", member))
            code = getattr(member, "__code__", None)
            if code is not None:
                yield f"{name}.{attr}", code
    elif getattr(value, "__code__", None) is not None:
        yield name, value.__code__


def rule_problems(folder: Path) -> dict[str, str]:
    """{file stem: why} for the piece files that break the grader's import rule (rules.file_problems,
    read before any of them is imported): their pieces score nothing."""
    from llama_course.grade import rules

    out = {}
    for stem in dict.fromkeys(stem for stem, _ in yl.PIECES.values()):
        path = Path(folder) / f"{stem}.py"
        problems = rules.file_problems(path) if path.is_file() else []
        if problems:
            out[stem] = rules.message(path.name, problems)
    return out


def hidden_checks(path: Path = HIDDEN) -> dict[str, list]:
    """{part: [(name, weight, factory)]} of the hidden tests, or {} where this copy has none."""
    if not path.is_file():
        return {}
    return yl.load_module(path).CHECKS


# ------------------------------------------------------------------------------ references


def reference_pieces() -> yl.Pieces:
    """The key (solutions/) when this copy has it, else the package's functions for the pieces it has."""
    key = REPO / "solutions"
    if (key / "ch07_model.py").is_file():
        return yl.load_pieces(key, label="the key")
    return package_pieces()


def package_pieces() -> yl.Pieces:
    import importlib

    from llama_course.tokenizer import BPETokenizer

    attention, embedding, ffn, generate, gqa, loss, norm, rope = (  # modules (the package's generate is a function)
        importlib.import_module(f"llama_course.{m}")
        for m in ("attention", "embedding", "ffn", "generate", "gqa", "loss", "norm", "rope"))
    from llama_course.tokenizer.bpe import train_bpe

    def encode(text, vocab, merges, special_tokens=(), pattern=None):
        return BPETokenizer(vocab, merges, special_tokens, pattern).encode(text)

    def decode(ids, vocab):
        return BPETokenizer(vocab, []).decode(ids)

    found = {"train_bpe": train_bpe, "encode": encode, "decode": decode, "embed": embedding.embed,
             "next_token_loss": loss.next_token_loss, "rms_norm": norm.rms_norm, "softmax": attention.softmax,
             "causal_mask": attention.causal_mask,
             "scaled_dot_product_attention": attention.scaled_dot_product_attention,
             "rope_inv_freq": rope.rope_inv_freq, "apply_rope": rope.apply_rope, "silu": ffn.silu,
             "swiglu": ffn.swiglu, "top_p_filter": generate.top_p_filter, "repeat_kv": gqa.repeat_kv,
             "gqa_attention": gqa.gqa_attention}
    pieces = yl.Pieces()
    for piece, (_, names) in yl.PIECES.items():
        if piece == "tokenizer" or all(n in found for n in names):
            for n in names:
                if n in found:
                    pieces.functions[n], pieces.source[n] = found[n], "the package"
        else:
            pieces.missing[piece] = "the package has no function for this piece (the key is not in this copy)"
    return pieces


def localise(check, bench, order=ORDER) -> str:
    """The first piece (in ``order``) that makes ``check`` fail when it alone is the student's.

    Pieces the bench's reference lacks (the package has no block, model or KV cache to stand in for
    the student's) stay the student's throughout; if those alone already fail, they are named together.
    """
    lacking = tuple(bench.lacking)
    if not _passes(check, bench, ()):
        if lacking:
            return f"one of {', '.join(lacking)} (this copy has no reference to tell them apart)"
        return "(the reference itself fails this check: no piece can be named)"
    for piece in order:
        if piece not in lacking and not _passes(check, bench, (piece,)):
            return piece
    return "(no single piece: the pieces fail only together)"


def _passes(check, bench, take) -> bool:
    try:
        bench.use(take)
        check(bench)
        return True
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):  # a worker that died says so at the next check
            bench.use(None)


# ------------------------------------------------------------------------------ oracles


def hf_model(n_kv_heads: int, tie: bool, seed: int, rope_theta: float = 10000.0):
    """A seeded random LlamaForCausalLM (realistic scale) and the course config of the same shape."""
    import transformers

    from llama_course.grade.testing import realistic_weights_

    config = transformers.LlamaConfig(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=n_kv_heads, intermediate_size=160,
                                      tie_word_embeddings=tie, rms_norm_eps=1e-5, max_position_embeddings=128,
                                      rope_theta=rope_theta, attn_implementation="eager")
    torch.manual_seed(seed)
    model = realistic_weights_(transformers.LlamaForCausalLM(config).eval(), std=0.2)
    course = LlamaConfig(vocab_size=97, d_model=64, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, d_ff=160,
                         norm_eps=1e-5, max_seq_len=128, tie_embeddings=tie, rope_layout="half", rope_theta=rope_theta)
    state = {n: t.detach().clone() for n, t in model.state_dict().items() if not (tie and n == "lm_head.weight")}
    return model, course, state


# ------------------------------------------------------------------------------ the student's side


def _watched(method):
    """Run a Bench method under the call watcher; record what it saw, and whether the hook was replaced."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        watcher = Watcher(self.folder)
        with watcher:
            try:
                return method(self, *args, **kwargs)
            finally:
                self.tampered = self.tampered or sys.getprofile() != watcher._profile
                self.seen += [entry for entry in watcher.seen if entry not in self.seen]
    return run


class Bench:
    """The student's side of the capstone: their pieces, and every computation that runs them, each
    returning plain data (tensors, lists, numbers, text) for the grader to judge.

    In-process (``grade(..., sandboxed=False)``, the book) it is called directly. Sandboxed (the
    command, the Gradescope assignment) it lives in the grader's confined worker (sandbox.Sandbox
    imports this file there) and the grader holds a Remote: the oracles, the hidden tests and every
    verdict stay in the grader, which the student's code cannot reach."""

    def __init__(self, folder, refused: dict, reference: str = "package", device: str = "cpu"):
        self.folder = Path(folder)
        self.student = yl.load_pieces(folder, refused=refused)
        self.reference = reference_pieces() if reference == "key" else package_pieces()
        self.lacking = tuple(piece for piece in yl.PIECES if piece in self.reference.missing)
        self.pieces, self.device, self.store = self.student, device, {}
        self.seen, self.tampered = [], False

    def served_by(self) -> dict:
        return self.student.served_by()

    def refuse(self, piece: str, why: str) -> None:
        self.student.refuse(piece, why)

    def use(self, take) -> None:
        """Run on the student's pieces (None), or on the reference with only ``take``'s pieces theirs
        (and the pieces the reference lacks)."""
        if take is None:
            self.pieces = yl.wire(self.student)
            return
        base = yl.mix(self.reference, self.student, self.lacking) if self.lacking else self.reference
        self.pieces = yl.mix(base, self.student, tuple(take))

    def report(self) -> tuple[list, bool]:
        """(the calls into the package seen, whether the watcher was replaced) since the last report."""
        seen, tampered, self.seen, self.tampered = self.seen, self.tampered, [], False
        return [list(entry) for entry in seen], tampered

    @_watched
    def logits(self, config, state, ids):
        """Your model's logits (B, T, V) of ``ids`` with the weights ``state``."""
        with torch.no_grad():
            return yl.YourLlama(config, self.pieces, state)(ids)

    @_watched
    def cached_logits(self, config, state, ids, prefill: int):
        """Your full forward's logits (B, T, V); your decode_step's after a prefill of ``prefill``
        tokens and then after each next token: [(B, V)] at positions prefill-1 .. T-1."""
        P = self.pieces
        model = yl.YourLlama(config, P, state)
        with torch.no_grad():
            full = model(ids)                                                                  # (B, T, V)
        cache = P.KVCache(config, ids.shape[0], ids.shape[1])
        steps = [P.decode_step(model, ids[:, :prefill], cache)]                                # (B, V)
        return full, steps + [P.decode_step(model, ids[:, t:t + 1], cache) for t in range(prefill, ids.shape[1])]

    @_watched
    def greedy(self, config, state, prompt, new_tokens: int):
        return self.pieces.greedy_generate(yl.YourLlama(config, self.pieces, state), prompt, new_tokens)

    @_watched
    def train_bpe(self, name: str, text: str, vocab_size: int):
        """Train your tokenizer on ``text``, keep it as ``name``: (its merges, its vocabulary size)."""
        tok = self.pieces.train_bpe(text, vocab_size, SPECIAL)
        self.store[name] = tok
        return [tuple(merge) for merge in tok.merges], len(tok.vocab)

    @_watched
    def encode(self, name: str, text: str) -> list:
        tok = self.store[name]
        return list(self.pieces.encode(text, tok.vocab, tok.merges, SPECIAL))

    @_watched
    def decode(self, name: str, ids: list) -> str:
        return self.pieces.decode(list(ids), self.store[name].vocab)

    def vocab(self, name: str) -> dict:
        return {int(i): bytes(b) for i, b in self.store[name].vocab.items()}

    @_watched
    def loss_and_grad(self, logits, ids):
        """Your next_token_loss of ``logits`` against ``ids``, and its gradient with respect to the logits."""
        logits = logits.detach().clone().requires_grad_(True)
        loss = self.pieces.next_token_loss(logits, ids)
        loss.backward()
        return loss.detach(), logits.grad

    @_watched
    def training_losses(self, config, init, x, steps: int):
        """Your model from ``init`` on x's device, ``steps`` AdamW steps on the batch x: the losses (steps,)."""
        model = yl.YourLlama(config, self.pieces, init).to(x.device)
        return torch.stack(adam_losses(model, self.pieces.next_token_loss, x, steps))

    @_watched
    def train(self, config, init, train_text: str, val_text: str, sizes, tokenizer=None) -> dict:
        """Your tokenizer (the one kept as ``tokenizer``, else one trained now), your model from ``init``
        and your loss through the Chapter 11 loop: its history, with your vocabulary's size."""
        P = self.pieces
        tok = self.store.get(tokenizer) or P.train_bpe(train_text, sizes.vocab_size, SPECIAL)
        history = {"vocab_size": len(tok.vocab)}
        if len(tok.vocab) != config.vocab_size:
            return history
        train_ids, val_ids = (torch.tensor(P.encode(text, tok.vocab, tok.merges, SPECIAL), device=sizes.device)
                              for text in (train_text, val_text))
        model = yl.YourLlama(config, P, init).to(sizes.device)
        history.update(train_loop(model, P.next_token_loss, train_ids, val_ids, sizes))
        self.store["model"], self.store["trained"] = model, tok
        return history

    @_watched
    def sample(self, config, init, tokenizer: str, prompt: str, new_tokens: int, temperature: float, top_p: float,
               seed: int):
        """Your sampler through your KV cache after ``prompt``, with part (c)'s trained model (config
        None) or one of ``init``: the tokens (1, T + n), the prompt's length T, and your full
        forward's last logits before each new token [(1, V)]."""
        P = self.pieces
        model = self.store["model"] if config is None else yl.YourLlama(config, P, init).to(self.device)
        model.pieces, tok = P, self.store[tokenizer]
        device = next(model.parameters()).device
        ids = torch.tensor([P.encode(prompt, tok.vocab, tok.merges, SPECIAL)], device=device)        # (1, T)
        tokens = yl.sample_tokens(model, ids, new_tokens, temperature, top_p, seed)              # (1, T + n)
        with torch.no_grad():
            logits = [model(tokens[:, :i])[:, -1] for i in range(ids.shape[1], tokens.shape[1])]  # [(1, V)]
        return tokens, ids.shape[1], logits


def train_loop(model, loss_fn, train_ids, val_ids, sizes: Sizes, seed: int = 0) -> dict:
    """The Chapter 11 loop: AdamW (decay on matrices), warmup + cosine, clipping; returns its history."""
    from llama_course.train import TrainConfig, get_batch, lr_at, make_optimizer

    s = sizes
    cfg = TrainConfig(steps=s.steps, batch_size=s.batch_size, context_length=s.context_length, lr=s.lr,
                      warmup_steps=s.warmup_steps, eval_batches=s.eval_batches, seed=seed, progress=False)
    optimizer, generator = make_optimizer(model, cfg), torch.Generator().manual_seed(seed)
    history = {"step": [], "train_loss": [], "val_loss": None}
    model.train()
    for step in range(cfg.steps):
        x = get_batch(train_ids, cfg.batch_size, cfg.context_length, generator, s.device)   # (B, T+1)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        history["step"].append(step)
        history["train_loss"].append(loss.item())
    model.eval()
    val_gen, losses = torch.Generator().manual_seed(seed + 1), []
    with torch.no_grad():
        for _ in range(cfg.eval_batches):
            x = get_batch(val_ids, cfg.batch_size, cfg.context_length, val_gen, s.device)
            losses.append(loss_fn(model(x), x).item())
    history["val_loss"] = sum(losses) / len(losses)
    return history


# ------------------------------------------------------------------------------ parts


class Capstone:
    """The grader's side: oracles, checks and verdicts. ``bench``: the student's side (a Bench, or
    a Remote for one in the sandbox's worker); None: a Bench in this process."""

    def __init__(self, folder: Path, sizes: Sizes, out=print, hidden: bool = True, bench=None):
        self.folder, self.sizes, self.out = folder, sizes, out
        key = "key" if (REPO / "solutions" / "ch07_model.py").is_file() else "package"
        self.bench = bench if bench is not None else Bench(folder, rule_problems(folder), key, sizes.device)
        self.hidden = hidden_checks() if hidden else {}
        self.trained = False  # part (c) trained your model: part (d) samples from it
        self.curves = {}
        self._hf = {}

    def hf(self, n_kv_heads, tie, seed, rope_theta=10000.0):
        key = (n_kv_heads, tie, seed, rope_theta)
        if key not in self._hf:
            self._hf[key] = hf_model(n_kv_heads, tie, seed, rope_theta)
        return self._hf[key]

    def run_check(self, part: Part, check: Check, fn, order=ORDER, localise_with=None):
        """Run ``fn(bench)`` (the call watcher watches each of the bench's computations, training
        included); on failure name the first disagreeing piece."""
        from llama_course.grade.sandbox import StudentCrash, StudentTimeout

        try:
            self.bench.report()  # forget what localising an earlier check saw
            fn(self.bench)
            seen, tampered = self.bench.report()
            problem = seen_problem(seen, tampered)
            if problem:
                for piece in (seen_pieces(seen) if not tampered else yl.PIECES):  # and every later check using them
                    self.bench.refuse(piece, problem)
                raise CheckFailed(problem)
            check.score = check.points
            check.message = "passed"
        except Exception as error:
            check.message = _describe(error)
            if not part.culprit and not isinstance(error, (StudentCrash, StudentTimeout)):
                part.culprit = localise(localise_with or fn, self.bench, order)
        part.checks.append(check)

    # (a) ------------------------------------------------------------------------------------
    def logits_check(self, n_kv_heads, tie, seed, shape=(2, 8), rope_theta=10000.0, what=""):
        """Your logits of seeded ids of ``shape`` against transformers' (the hidden tests call it with
        other shapes and rope_theta; ``what`` names them)."""
        hf, config, state = self.hf(n_kv_heads, tie, seed, rope_theta)
        ids = torch.randint(0, 97, shape, generator=torch.Generator().manual_seed(seed + 1))     # (B, T)
        with torch.no_grad():
            expected = hf(ids).logits                                                          # (B, T, V)
        what = what or f"({'GQA' if n_kv_heads < 4 else 'MHA'}, {'tied' if tie else 'untied'} head)"

        def check(S):
            close(S.logits(config, state, ids), expected, f"logits {what} vs transformers' LlamaForCausalLM")
        return check

    def part_a(self) -> Part:
        part = Part("a", "logits equal transformers' LlamaForCausalLM")
        self.run_check(part, Check("MHA, untied head", 10), self.logits_check(4, False, 0))
        self.run_check(part, Check("GQA, tied head", 10), self.logits_check(2, True, 2))
        return self.run_hidden(part, ORDER)

    # (b) ------------------------------------------------------------------------------------
    def cache_check(self, n_kv_heads: int = 2, tie: bool = False, seed: int = 4, shape=(2, 9), prefill: int = 5,
                    what: str = ""):
        """Your KV cache: a prefill of ``prefill`` tokens, then one token a step, each step's logits
        against your own full forward (the hidden tests call it with other shapes; ``what`` names them)."""
        _, config, state = self.hf(n_kv_heads, tie, seed)
        ids = torch.randint(0, 97, shape, generator=torch.Generator().manual_seed(seed + 1))   # (B, T)

        def check(S):
            full, steps = S.cached_logits(config, state, ids, prefill)                         # (B, T, V), [(B, V)]
            if not isinstance(steps, list) or len(steps) != shape[1] - prefill + 1:
                raise CheckFailed(f"decode_step{what} gave {len(steps)} steps' logits, expected "
                                  f"{shape[1] - prefill + 1}")
            close(steps[0], full[:, prefill - 1], f"prefill's last logits{what} vs your full forward")
            for t, step in zip(range(prefill, shape[1]), steps[1:]):
                close(step, full[:, t], f"decode step at position {t}{what} (your KV cache) vs your full forward")
        return check

    def greedy_check(self, n_kv_heads: int = 2, tie: bool = False, seed: int = 6, shape=(2, 4), new_tokens: int = 6,
                     what: str = ""):
        """greedy_generate's tokens from a seeded prompt of ``shape`` against transformers' generate."""
        hf, config, state = self.hf(n_kv_heads, tie, seed)
        prompt = torch.randint(0, 97, shape, generator=torch.Generator().manual_seed(seed + 1))   # (B, T)
        with torch.no_grad():
            expected = hf.generate(prompt, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                                   pad_token_id=0, attention_mask=torch.ones_like(prompt))

        def check(S):
            tokens = S.greedy(config, state, prompt, new_tokens)
            if not isinstance(tokens, torch.Tensor) or not torch.equal(tokens, expected):
                raise CheckFailed(f"greedy tokens{what} {getattr(tokens, 'tolist', lambda: tokens)()} differ from "
                                  f"transformers' generate {expected.tolist()}")
        return check

    def part_b(self) -> Part:
        part = Part("b", "cached decode equals your full forward; greedy equals transformers")
        order = ("KV cache", "embedding", "RMSNorm", "attention", "RoPE", "SwiGLU", "GQA", "block", "model")
        self.run_check(part, Check("KV-cache decode vs full forward", 10), self.cache_check(), order)
        self.run_check(part, Check("greedy_generate vs transformers' generate", 5), self.greedy_check(), order)
        return self.run_hidden(part, order)

    # (c) ------------------------------------------------------------------------------------
    def corpus(self) -> tuple[str, str]:
        from llama_course.data import course_corpus
        from llama_course.train import shuffle_documents

        text = shuffle_documents(course_corpus(self.sizes.corpus_parts), seed=0)
        text = text[:self.sizes.corpus_chars] if self.sizes.corpus_chars else text
        cut = int(len(text) * 0.9)
        return text[:cut], text[cut:]

    def tokenizer_check(self, train_text, val_text, name="tokenizer"):
        """Your train_bpe's merges, encode's ids of the validation text and decode(encode(text)) against
        the package tokenizer's; your tokenizer is kept as ``name``."""
        from llama_course.tokenizer.bpe import train_bpe

        expected = train_bpe(train_text, self.sizes.vocab_size, SPECIAL)
        merges = [tuple(merge) for merge in expected.merges]

        def check(S):
            mine, _ = S.train_bpe(name, train_text, self.sizes.vocab_size)
            if mine != merges:
                first = next((i for i, (a, b) in enumerate(zip(mine, merges)) if a != b), min(len(mine), len(merges)))
                raise CheckFailed(f"train_bpe: merge {first} differs from the package tokenizer's "
                                  f"({len(mine)} merges, expected {len(merges)})")
            ids = S.encode(name, val_text)
            if ids != expected.encode(val_text):
                raise CheckFailed("encode: the validation text's ids differ from the package tokenizer's")
            if S.decode(name, ids) != val_text:
                raise CheckFailed("decode(encode(text)) is not the text")
        return check

    def small_config(self, vocab_size: int) -> LlamaConfig:
        s = self.sizes
        return LlamaConfig(vocab_size=vocab_size, d_model=s.d_model, n_layers=s.n_layers, n_heads=s.n_heads,
                           n_kv_heads=s.n_kv_heads, d_ff=s.d_ff, max_seq_len=max(128, s.context_length + s.new_tokens
                                                                                  + 16),
                           rope_layout="half", tie_embeddings=False)

    def package_model(self, config: LlamaConfig, seed: int = 0):
        from llama_course.model import Llama

        torch.manual_seed(seed)
        model = Llama(config)
        state = {("lm_head.weight" if n == "lm_head.weight" else "model." + n): t.detach().clone()
                 for n, t in model.state_dict().items()}
        return model, state

    def package_run(self, train_text, val_text):
        """The package's tokenizer and Llama trained by the Chapter 11 loop: (config, initial weights,
        its history). Both models start from these weights and see the same batches."""
        from llama_course.loss import next_token_loss
        from llama_course.tokenizer.bpe import train_bpe

        device = self.sizes.device
        tokenizer = train_bpe(train_text, self.sizes.vocab_size, SPECIAL)
        config = self.small_config(len(tokenizer.vocab))
        package, init = self.package_model(config)
        train_ids, val_ids = (torch.tensor(tokenizer.encode(text), device=device) for text in (train_text, val_text))
        history = train_loop(package.to(device), next_token_loss, train_ids, val_ids, self.sizes)
        self.curves["package"] = history
        return config, init, history

    def training_check(self, train_text, val_text, tokenizer):
        """The check of part (c)'s 15 points: your tokenizer (kept as ``tokenizer``, None: trained in
        the check), loss and model trained as the package's was; the validation losses within MARGIN."""
        started = time.perf_counter()
        config, init, reference = self.package_run(train_text, val_text)

        def check(S):
            history = S.train(config, init, train_text, val_text, self.sizes, tokenizer)
            if history.get("vocab_size") != config.vocab_size:
                raise CheckFailed(f"your tokenizer has {history.get('vocab_size')} tokens, the package's "
                                  f"{config.vocab_size}")
            self.trained, self.curves["yours"] = True, history
            gap = history["val_loss"] - reference["val_loss"]
            self.out(f"    validation loss: yours {history['val_loss']:.4f}, the package's "
                     f"{reference['val_loss']:.4f} (difference {gap:+.4f}; margin {MARGIN}); "
                     f"{self.sizes.steps} steps each, {time.perf_counter() - started:.0f} s for both")
            if not math.isfinite(history["val_loss"]) or abs(gap) > MARGIN:
                raise CheckFailed(f"validation loss {history['val_loss']:.4f} is not within {MARGIN} of the "
                                  f"package's {reference['val_loss']:.4f} (same initial weights, batches "
                                  f"and budget)")
        return check

    def training_proxy(self, train_text):
        """A quick stand-in for the training check, to name the piece: a little tokenizer training
        and three AdamW steps on one fixed batch, against the package's tokenizer and model."""
        from llama_course.loss import next_token_loss
        from llama_course.tokenizer.bpe import train_bpe

        device = self.sizes.device
        sample = train_text[:3000]
        reference = train_bpe(sample, 272, SPECIAL)
        config = self.small_config(len(reference.vocab))
        package, init = self.package_model(config, seed=1)
        x = torch.tensor(reference.encode(sample)[:4 * 17], device=device).view(4, 17)        # (4, 17)
        expected = torch.stack(adam_losses(package.to(device), next_token_loss, x, steps=3))  # (3,)

        def proxy(S):
            S.train_bpe("proxy", sample, 272)
            ids = S.encode("proxy", sample)
            if ids != reference.encode(sample) or S.decode("proxy", ids) != sample:
                raise CheckFailed("tokenizer")
            close(S.training_losses(config, init, x, 3), expected, "training losses")
        return proxy

    def part_c(self) -> Part:
        part = Part("c", "training with your tokenizer, loss and model")
        train_text, val_text = self.corpus()
        self.run_check(part, Check("tokenizer: merges, encode and decode", 5),
                       self.tokenizer_check(train_text, val_text), ("tokenizer",))
        tokenizer = "tokenizer" if part.checks[0].score else None  # else the training check trains yours anew
        order = ("tokenizer", "loss", "RMSNorm", "attention", "RoPE", "SwiGLU", "block", "model")
        self.run_check(part, Check(f"validation loss within {MARGIN} of the package's model", 15),
                       self.training_check(train_text, val_text, tokenizer), order,
                       localise_with=self.training_proxy(train_text))
        return self.run_hidden(part, order)

    # (d) ------------------------------------------------------------------------------------
    def sampling_check(self, state: dict, temperature: float = 0.8, top_p: float = 0.9, seed: int = 0):
        """Part (d)'s sampling check: your sampler through your KV cache, token by token against the
        package's nucleus of your full-forward logits (same generator); ``state`` gets the tokens
        and the tokenizer's name."""
        from llama_course.attention import softmax
        from llama_course.generate import top_p_filter

        def sampling(S):
            config, init, tokenizer = self.sampling_model(S)
            tokens, start, logits = S.sample(config, init, tokenizer, "Title: The", self.sizes.new_tokens,
                                             temperature, top_p, seed)                      # (1, T + n), T, [(1, V)]
            if tokens.shape[1] - start != self.sizes.new_tokens or len(logits) != self.sizes.new_tokens:
                raise CheckFailed(f"sample_tokens gave {tokens.shape[1] - start} new tokens, expected "
                                  f"{self.sizes.new_tokens}")
            generator = torch.Generator().manual_seed(seed)   # on the CPU, as yl.draw_next draws
            for i, step in zip(range(start, tokens.shape[1]), logits):
                probs = softmax(top_p_filter(step.float() / temperature, top_p), dim=-1).to(generator.device)
                expected = torch.multinomial(probs, 1, generator=generator)                       # (1, 1)
                if int(tokens[0, i]) != int(expected[0, 0]):
                    raise CheckFailed(f"sampled token {i - start} is {int(tokens[0, i])}; the package's nucleus "
                                      f"of your logits with the same generator gives {int(expected[0, 0])}")
            state["tokens"], state["tokenizer"] = tokens, tokenizer
        return sampling

    def sampling_model(self, S):
        """(config, initial weights, tokenizer name) for part (d): (None, None, "trained"), part (c)'s
        trained model and tokenizer; without them, a small tokenizer of yours and seeded package weights."""
        if self.trained:
            return None, None, "trained"
        _, vocab_size = S.train_bpe("sampling", self.corpus()[0][:20_000], 300)
        config = self.small_config(vocab_size)
        return config, self.package_model(config, seed=3)[1], "sampling"

    def part_d(self) -> Part:
        from llama_course.tokenizer import BPETokenizer

        part, state = Part("d", "text from your sampler"), {}

        def decoding(S):
            if "tokens" not in state:
                raise CheckFailed("no sampled text to decode (the sampling check failed)")
            ids, name = state["tokens"][0].tolist(), state["tokenizer"]
            text = S.decode(name, ids)
            if text != BPETokenizer(S.vocab(name), [], SPECIAL).decode(ids):
                raise CheckFailed("your decode of the sampled ids differs from the package's")
            state["text"] = text

        order = ("sampling", "attention", "KV cache", "GQA", "embedding", "RMSNorm", "RoPE", "SwiGLU", "block",
                 "model", "tokenizer")
        self.run_check(part, Check("sampled tokens (top_p 0.9, temperature 0.8)", 6), self.sampling_check(state),
                       order)
        self.run_check(part, Check("decode of the sampled text", 4), decoding, ("tokenizer",))
        if "text" in state:
            part.notes.append("your LLaMA writes: " + repr(state["text"]))
        return self.run_hidden(part, order)


    def run_hidden(self, part: Part, order) -> Part:
        """The part's hidden tests, their points the part's hidden share divided by weight; or, where
        this copy has none, a note of the points they carry."""
        points, public = PARTS[part.key]
        checks = self.hidden.get(part.key, [])
        if not checks:
            part.notes.append(f"hidden tests: {points - public:g} more points, not checked here (they run in the "
                              f"instructor's copy)")
            return part
        total = sum(weight for _, weight, _ in checks)
        for name, weight, factory in checks:
            self.run_check(part, Check(f"hidden: {name}", (points - public) * weight / total), factory(self), order)
        return part


def adam_losses(model, loss_fn, x: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The training loss before each of ``steps`` AdamW steps (lr 1e-2) on the one batch ``x``."""
    optimizer, losses = torch.optim.AdamW(model.parameters(), lr=1e-2), []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model(x), x)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses


def _describe(error: Exception) -> str:
    file, line, function = _last_frame(error)
    if isinstance(error, NotImplementedError):
        return f"not implemented yet ({file}, {function})"
    if isinstance(error, CheckFailed):
        return str(error)
    return f"{type(error).__name__}: {error} ({file} line {line}, {function})"


def _last_frame(error: Exception) -> tuple[str, int, str]:
    """(file name, line, function) where ``error`` was raised: in this process, or in the sandbox's
    worker (its traceback travels in the error's notes)."""
    notes = [note for note in getattr(error, "__notes__", []) if note.startswith("in your code:")]
    found = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', notes[-1]) if notes else []
    if found:
        return Path(found[-1][0]).name, int(found[-1][1]), found[-1][2]
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return Path(frame.filename).name, frame.lineno, frame.name


# ------------------------------------------------------------------------------ command


@dataclass
class Graded:
    """What a capstone run returns: its parts, in order, and part (c)'s training curves {name: history}."""

    parts: list
    curves: dict

    @property
    def score(self) -> float:
        return sum(p.score for p in self.parts)

    @property
    def points(self) -> float:
        return sum(p.points for p in self.parts)


def grade(folder, parts: str = "abcd", sizes: Sizes | None = None, out=print, hidden: bool = True, bench=None,
          on_part=None, hidden_messages: bool = True) -> Graded:
    """Run the capstone's parts on the exercise files in ``folder``; print them and return them.
    ``hidden=False``: only the public checks, as the student release runs (the book shows that).
    ``bench``: the student's side (sandboxed() gives one in the sandbox's worker); None: in this
    process. ``on_part(parts so far)`` after each part; ``hidden_messages=False``: a failing hidden
    check prints no message (no input or expected value reaches the student)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder must be a folder of chNN_*.py files, got {folder}")
    if set(parts) - set("abcd") or not parts:
        raise ValueError(f"parts must be letters from 'abcd', got {parts!r}")
    torch.manual_seed(0)
    out = _wrapping(out)
    capstone = Capstone(folder, sizes or Sizes(), out, hidden, bench)
    out(f"Your LLaMA, assembled from {folder}/ (each piece's functions, and where they came from):")
    for piece, where in capstone.bench.served_by().items():
        out(f"  {piece:<10} {where}")
    results = []
    for key in "abcd":
        if key in parts:
            out(f"part ({key}) ...")
            part = getattr(capstone, f"part_{key}")()
            results.append(part)
            _print_part(part, out, hidden_messages)
            if on_part:
                on_part(results)
    graded = Graded(results, capstone.curves)
    out(f"capstone: {graded.score:g} / {graded.points:g} points")
    return graded


@contextlib.contextmanager
def sandboxed(path, sizes: Sizes, out=print, upload: bool = False, same_user: bool = False,
              timeout: float = 3600.0, memory_limit: int | None = None):
    """(staged folder, a Bench in the grader's sandbox) for the submission at ``path``: the chapter
    grader's confinement (sandbox.confine: as root, a user of this run's own that cannot read the
    key, the hidden tests or the results; mount and network namespaces where the kernel allows;
    memory, file and process limits), which raises sandbox.ConfinementError where it cannot be had.
    The worker imports this file and holds the student's pieces; ``timeout`` seconds for all of it.
    ``upload``: ``path`` is an upload (chNN_*.py files at any depth, zips too), as on Gradescope."""
    from llama_course.grade import autograder, grader, sandbox

    own = Path(path).resolve().is_relative_to((REPO / "exercises").resolve())
    confinement, warnings = sandbox.confine(grader.hidden_paths([]), sandbox.MEMORY_LIMIT if memory_limit is None
                                            else memory_limit, same_user, own)
    out(sandbox.describe(confinement))
    for warning in warnings:
        out(f"warning: {warning}")
    with tempfile.TemporaryDirectory(prefix="llama-course-capstone-") as staging:
        folder = Path(staging) / "submission"
        if upload:
            for note in autograder.collect(Path(path), folder):
                out(f"submission: {note}")
        else:
            folder.mkdir()
            grader.stage(grader.find_submission(Path(path).resolve()), folder)
        if confinement.uid is not None:  # readable by this run's worker only
            grader.make_private(Path(staging), confinement.gid)
        refused = rule_problems(folder)  # read before the worker imports anything
        try:
            with sandbox.Sandbox(Path(__file__), timeout=timeout, confinement=confinement) as box:
                yield folder, box.module.Bench(str(folder), refused, "package", sizes.device)
        finally:
            if confinement.uid is not None:
                sandbox.end_processes_of(confinement.uid)
                sandbox.remove_files_of(confinement.uid)


def _wrapping(out, width: int = 78):
    """``out`` with each line wrapped at ``width`` columns (a book column, a terminal), its
    continuation lines indented four more than the line itself."""
    def emit(line: str) -> None:
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out(textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False))
    return emit


def _print_part(part: Part, out, hidden_messages: bool = True) -> None:
    out(f"({part.key}) {part.title}: {part.score:g} / {part.points:g}")
    for check in part.checks:
        message = check.message if hidden_messages or not check.name.startswith("hidden:") else _hidden_message(check)
        out(f"    {'PASS' if check.score else 'FAIL'} {check.name} ({check.score:g}/{check.points:g}): {message}")
    if part.culprit:
        out(f"    the first of your pieces to disagree: {part.culprit}")
    for note in part.notes:
        out(f"    {note}")


def _hidden_message(check: Check) -> str:
    if check.score == check.points:
        return "passed"
    return "failed (a hidden test: its inputs and expected values are not shown)"


def gradescope_results(parts: list, lines: list, unfinished: str = "") -> dict:
    """Gradescope's results.json: one row per check, hidden checks' rows with no message but the
    piece named, their visibility HIDDEN_VISIBILITY (default after_published); the output is the
    run's own (which of the student's functions served each piece, each part's lines)."""
    from llama_course.grade.grader import VISIBILITIES

    visibility = os.environ.get("HIDDEN_VISIBILITY", "after_published")
    if visibility not in VISIBILITIES:
        raise ValueError(f"HIDDEN_VISIBILITY must be one of {', '.join(VISIBILITIES)}, got {visibility!r}")
    tests = []
    for part in parts:
        for check in part.checks:
            hidden = check.name.startswith("hidden:")
            output = _hidden_message(check) if hidden else check.message
            if check.score < check.points and part.culprit:
                output += f"\n(the first of your pieces to disagree in part ({part.key}): {part.culprit})"
            tests.append({"name": f"Capstone ({part.key}) :: {check.name}", "score": check.score,
                          "max_score": check.points, "output": output,
                          "visibility": visibility if hidden else "visible"})
    output = "\n".join(lines + ([unfinished] if unfinished else []))
    return {"score": sum(t["score"] for t in tests), "output": output, "tests": tests}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llama_course.grade capstone",
                                     description="Grade the model assembled from your exercise files (Chapter 14).")
    parser.add_argument("folder", nargs="?", default="exercises", help="folder of chNN_*.py files (exercises/)")
    parser.add_argument("--parts", default="abcd", help="which parts to run, e.g. ab (default: abcd)")
    parser.add_argument("--quick", action="store_true", help="the smallest sizes (seconds; for tests)")
    parser.add_argument("--device", default="cpu", help="device for part (c)'s training (default: cpu)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    parser.add_argument("--plot", type=Path, default=None, help="write part (c)'s training curves here (PNG)")
    parser.add_argument("--in-process", action="store_true",
                        help="run your code in this process, not the grader's sandbox (a self-check of your own code)")
    parser.add_argument("--same-user", action="store_true",
                        help="run student code as the grader's own user even as root (not for untrusted code)")
    parser.add_argument("--upload", action="store_true",
                        help="FOLDER is an upload (Gradescope): chNN_*.py files at any depth")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds the student's code may take in all")
    parser.add_argument("--gradescope", type=Path, default=None, help="write Gradescope's results.json here")
    return parser


def main(argv=None) -> int:
    from llama_course.grade import grader, sandbox

    parser = _parser()
    args = parser.parse_args(argv)
    sizes = Sizes(**{**vars(QUICK if args.quick else Sizes()), "device": args.device})
    lines = []

    def out(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    def progress(parts: list) -> None:
        if args.gradescope:
            grader.write_atomically(args.gradescope, gradescope_results(parts, lines, "grading unfinished: the "
                                                                        "parts not listed were not graded"))

    if args.gradescope:
        grader.clear_results(args.gradescope.resolve())
        args.gradescope = args.gradescope.resolve()
    try:
        if args.in_process:
            graded = grade(args.folder, args.parts, sizes, out)
        else:
            with sandboxed(args.folder, sizes, out, args.upload, args.same_user, args.timeout) as (folder, bench):
                graded = grade(folder, args.parts, sizes, out, bench=bench, on_part=progress,
                               hidden_messages=not args.gradescope)
    except sandbox.ConfinementError as error:  # fail closed: nothing is graded, and everyone is told why
        out(f"grading refused: {error}")
        if args.gradescope:
            grader.write_atomically(args.gradescope, gradescope_results([], lines))
        return 2
    except ValueError as error:
        parser.error(str(error))
    if args.gradescope:
        grader.write_atomically(args.gradescope, gradescope_results(graded.parts, lines))
    if args.json:
        args.json.write_text(json.dumps({"score": graded.score, "parts": [
            {"part": p.key, "title": p.title, "score": p.score, "max_score": p.points, "culprit": p.culprit,
             "checks": [vars(c) for c in p.checks], "notes": p.notes} for p in graded.parts]}, indent=1))
    if args.plot and graded.curves:
        yl.plot_curves(graded.curves, args.plot)
    return 0 if graded.score == graded.points or args.gradescope else 1  # Gradescope: graded is success
