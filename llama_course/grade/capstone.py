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
every later check that uses the calling piece (the part's messages say which). Unlike the chapter
grader, the capstone runs the student's code in this process (it is a self-check and an
instructor's tool, not yet a sandboxed Gradescope assignment).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
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
    """How big the capstone runs: the default (`make capstone`; its time is not yet measured on an idle
    CPU: on a 2-core machine shared at load average 14-20 it did not finish part (c) in 25 minutes,
    195 CPU-seconds, 405 MB peak) or quick (tests, Ch14's stored output: seconds)."""

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

    def pieces(self) -> list[str]:
        """The pieces whose functions made the calls seen: the caller's piece, else every piece of its file."""
        out = []
        for _, _, stem, function in self.seen:
            found = [yl.NAMES[function]] if function in yl.NAMES else [
                piece for piece, (file, _) in yl.PIECES.items() if file == stem]
            out += [piece for piece in found if piece not in out]
        return out

    def problem(self) -> str:
        if not self.seen:
            return ""
        return ("no points: your files called the package's " +
                "; ".join(f"{name} ({where})" for name, where, *_ in self.seen[:3]) +
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


def localise(check, student: yl.Pieces, reference: yl.Pieces, order=ORDER) -> str:
    """The first piece (in ``order``) that makes ``check`` fail when it alone is the student's.

    Pieces the reference lacks (the package has no block, model or KV cache to stand in for the
    student's) stay the student's throughout; if those alone already fail, they are named together.
    """
    lacking = tuple(piece for piece in yl.PIECES if piece in reference.missing)
    base = yl.mix(reference, student, lacking) if lacking else reference
    if not _passes(check, yl.wire(base)):
        if lacking:
            return f"one of {', '.join(lacking)} (this copy has no reference to tell them apart)"
        return "(the reference itself fails this check: no piece can be named)"
    for piece in order:
        if piece in lacking:
            continue
        if not _passes(check, yl.mix(base, student, (piece,))):
            return piece
    return "(no single piece: the pieces fail only together)"


def _passes(check, pieces) -> bool:
    try:
        check(pieces)
        return True
    except Exception:
        return False
    finally:
        yl.wire(pieces)


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


# ------------------------------------------------------------------------------ parts


class Capstone:
    def __init__(self, folder: Path, sizes: Sizes, out=print, hidden: bool = True):
        self.folder, self.sizes, self.out = folder, sizes, out
        self.student = yl.load_pieces(folder, refused=rule_problems(folder))
        self.reference = reference_pieces()
        self.hidden = hidden_checks() if hidden else {}
        self.trained = None   # (model, tokenizer) from part (c)
        self.curves = {}
        self._hf = {}

    def hf(self, n_kv_heads, tie, seed, rope_theta=10000.0):
        key = (n_kv_heads, tie, seed, rope_theta)
        if key not in self._hf:
            self._hf[key] = hf_model(n_kv_heads, tie, seed, rope_theta)
        return self._hf[key]

    def run_check(self, part: Part, check: Check, fn, order=ORDER, localise_with=None):
        """Run ``fn(student pieces)`` under the call watcher (every check, training included); on
        failure name the first disagreeing piece."""
        watcher = Watcher(self.folder)
        try:
            with watcher:
                fn(yl.wire(self.student))
            problem = watcher.problem()
            if problem:
                for piece in watcher.pieces():  # and every later check that uses these pieces
                    self.student.refuse(piece, problem)
                raise CheckFailed(problem)
            check.score = check.points
            check.message = "passed"
        except Exception as error:
            check.message = _describe(error)
            if not part.culprit:
                part.culprit = localise(localise_with or fn, self.student, self.reference, order)
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

        def check(P):
            with torch.no_grad():
                close(yl.YourLlama(config, P, state)(ids), expected, f"logits {what} vs transformers' LlamaForCausalLM")
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
        B, T = shape

        def check(P):
            model = yl.YourLlama(config, P, state)
            with torch.no_grad():
                full = model(ids)                                                   # (B, T, V)
            cache = P.KVCache(config, B, T)
            close(P.decode_step(model, ids[:, :prefill], cache), full[:, prefill - 1],
                  f"prefill's last logits{what} vs your full forward")
            for t in range(prefill, T):
                close(P.decode_step(model, ids[:, t:t + 1], cache), full[:, t],
                      f"decode step at position {t}{what} (your KV cache) vs your full forward")
        return check

    def greedy_check(self, n_kv_heads: int = 2, tie: bool = False, seed: int = 6, shape=(2, 4), new_tokens: int = 6,
                     what: str = ""):
        """greedy_generate's tokens from a seeded prompt of ``shape`` against transformers' generate."""
        hf, config, state = self.hf(n_kv_heads, tie, seed)
        prompt = torch.randint(0, 97, shape, generator=torch.Generator().manual_seed(seed + 1))   # (B, T)
        with torch.no_grad():
            expected = hf.generate(prompt, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                                   pad_token_id=0, attention_mask=torch.ones_like(prompt))

        def check(P):
            tokens = P.greedy_generate(yl.YourLlama(config, P, state), prompt, new_tokens)
            if not torch.equal(tokens, expected):
                raise CheckFailed(f"greedy tokens{what} {tokens.tolist()} differ from transformers' generate "
                                  f"{expected.tolist()}")
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

    def tokenizer_check(self, train_text, val_text, store):
        from llama_course.tokenizer.bpe import train_bpe

        expected = train_bpe(train_text, self.sizes.vocab_size, SPECIAL)

        def check(P, text=train_text):
            tok = P.train_bpe(text, self.sizes.vocab_size, SPECIAL)
            if list(tok.merges) != list(expected.merges):
                first = next((i for i, (a, b) in enumerate(zip(tok.merges, expected.merges)) if a != b),
                             min(len(tok.merges), len(expected.merges)))
                raise CheckFailed(f"train_bpe: merge {first} differs from the package tokenizer's "
                                  f"({len(tok.merges)} merges, expected {len(expected.merges)})")
            ids = P.encode(val_text, tok.vocab, tok.merges, SPECIAL)
            if list(ids) != expected.encode(val_text):
                raise CheckFailed("encode: the validation text's ids differ from the package tokenizer's")
            if P.decode(list(ids), tok.vocab) != val_text:
                raise CheckFailed("decode(encode(text)) is not the text")
            store["tokenizer"] = tok
        return check, expected

    def train(self, model, loss_fn, train_ids, val_ids, seed=0):
        """The Chapter 11 loop: AdamW (decay on matrices), warmup + cosine, clipping; returns history."""
        from llama_course.train import TrainConfig, get_batch, lr_at, make_optimizer

        s = self.sizes
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
        train_ids, val_ids = (torch.tensor(tokenizer.encode(text)).to(device) for text in (train_text, val_text))
        history = self.train(package.to(device), next_token_loss, train_ids, val_ids)
        self.curves["package"] = history
        return config, init, history

    def training_check(self, train_text, val_text, store):
        """The check of part (c)'s 20 points: your tokenizer, loss and model trained as the package's
        was; the validation losses within MARGIN."""
        started = time.perf_counter()
        config, init, reference = self.package_run(train_text, val_text)

        def check(P):
            history = self.train_yours(P, config, init, train_text, val_text, store)
            gap = history["val_loss"] - reference["val_loss"]
            self.out(f"    validation loss: yours {history['val_loss']:.4f}, the package's "
                     f"{reference['val_loss']:.4f} (difference {gap:+.4f}; margin {MARGIN}); "
                     f"{self.sizes.steps} steps each, {time.perf_counter() - started:.0f} s for both")
            if not math.isfinite(history["val_loss"]) or abs(gap) > MARGIN:
                raise CheckFailed(f"validation loss {history['val_loss']:.4f} is not within {MARGIN} of the "
                                  f"package's {reference['val_loss']:.4f} (same initial weights, batches "
                                  f"and budget)")
        return check

    def train_yours(self, P, config, init, train_text, val_text, store) -> dict:
        """Your tokenizer's ids, your model from the package's initial weights, the same loop: its history."""
        device = self.sizes.device
        tok = store.get("tokenizer") or P.train_bpe(train_text, self.sizes.vocab_size, SPECIAL)
        if len(tok.vocab) != config.vocab_size:
            raise CheckFailed(f"your tokenizer has {len(tok.vocab)} tokens, the package's {config.vocab_size}")
        train_ids, val_ids = (torch.tensor(P.encode(text, tok.vocab, tok.merges, SPECIAL)).to(device)
                              for text in (train_text, val_text))
        model = yl.YourLlama(config, P, init).to(device)
        history = self.train(model, P.next_token_loss, train_ids, val_ids)
        self.curves["yours"] = history
        store["model"] = model
        return history

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
        expected = adam_losses(package.to(device), next_token_loss, x, steps=3)

        def proxy(P):
            tok = P.train_bpe(sample, 272, SPECIAL)
            ids = list(P.encode(sample, tok.vocab, tok.merges, SPECIAL))
            if ids != reference.encode(sample) or P.decode(ids, tok.vocab) != sample:
                raise CheckFailed("tokenizer")
            mine = yl.YourLlama(config, P, init).to(device)
            close(torch.stack(adam_losses(mine, P.next_token_loss, x, steps=3)), torch.stack(expected),
                  "training losses")
        return proxy

    def part_c(self) -> Part:
        part = Part("c", "training with your tokenizer, loss and model")
        train_text, val_text = self.corpus()
        store = {}
        tok_check, _ = self.tokenizer_check(train_text, val_text, store)
        self.run_check(part, Check("tokenizer: merges, encode and decode", 5), tok_check, ("tokenizer",))
        order = ("tokenizer", "loss", "RMSNorm", "attention", "RoPE", "SwiGLU", "block", "model")
        self.run_check(part, Check(f"validation loss within {MARGIN} of the package's model", 15),
                       self.training_check(train_text, val_text, store), order,
                       localise_with=self.training_proxy(train_text))
        self.trained = (store.get("model"), store.get("tokenizer"))
        return self.run_hidden(part, order)

    # (d) ------------------------------------------------------------------------------------
    def sampling_check(self, state: dict, temperature: float = 0.8, top_p: float = 0.9, seed: int = 0):
        """Part (d)'s sampling check: your sampler through your KV cache, token by token against the
        package's nucleus of your full-forward logits (same generator); ``state`` gets the tokens
        and the tokenizer."""
        from llama_course.attention import softmax
        from llama_course.generate import top_p_filter

        def sampling(P):
            model, tok = self.sampling_model(P)
            device = next(model.parameters()).device
            prompt = torch.tensor([P.encode("Title: The", tok.vocab, tok.merges, SPECIAL)], device=device)  # (1, T)
            tokens = yl.sample_tokens(model, prompt, self.sizes.new_tokens, temperature, top_p, seed)
            generator = torch.Generator().manual_seed(seed)   # on the CPU, as yl.draw_next draws
            with torch.no_grad():
                for i in range(prompt.shape[1], tokens.shape[1]):
                    logits = model(tokens[:, :i])[:, -1].float() / temperature                          # (1, V)
                    probs = softmax(top_p_filter(logits, top_p), dim=-1).to(generator.device)          # (1, V)
                    expected = torch.multinomial(probs, 1, generator=generator)
                    if int(tokens[0, i]) != int(expected[0, 0]):
                        raise CheckFailed(f"sampled token {i - prompt.shape[1]} is {int(tokens[0, i])}; the "
                                          f"package's nucleus of your logits with the same generator gives "
                                          f"{int(expected[0, 0])}")
            state["tokens"], state["tok"] = tokens, tok
        return sampling

    def sampling_model(self, P):
        """Part (c)'s trained model and tokenizer, now wired to ``P``; without them (part (c) not run or
        failed), a small tokenizer of P's and a model of P's pieces from seeded package weights."""
        model, tok = self.trained or (None, None)
        if tok is None:
            tok = P.train_bpe(self.corpus()[0][:20_000], 300, SPECIAL)
        if model is None:
            config = self.small_config(len(tok.vocab))
            model = yl.YourLlama(config, P, self.package_model(config, seed=3)[1]).to(self.sizes.device)
        model.pieces = P
        return model, tok

    def part_d(self) -> Part:
        from llama_course.tokenizer import BPETokenizer

        part, state = Part("d", "text from your sampler"), {}

        def decoding(P):
            if "tokens" not in state:
                raise CheckFailed("no sampled text to decode (the sampling check failed)")
            ids, tok = state["tokens"][0].tolist(), state["tok"]
            text = P.decode(ids, tok.vocab)
            if text != BPETokenizer(tok.vocab, tok.merges, SPECIAL).decode(ids):
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
    if isinstance(error, NotImplementedError):
        frame = traceback.extract_tb(error.__traceback__)[-1]
        return f"not implemented yet ({Path(frame.filename).name}, {frame.name})"
    if isinstance(error, CheckFailed):
        return str(error)
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{type(error).__name__}: {error} ({Path(frame.filename).name} line {frame.lineno}, {frame.name})"


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


def grade(folder, parts: str = "abcd", sizes: Sizes | None = None, out=print, hidden: bool = True) -> Graded:
    """Run the capstone's parts on the exercise files in ``folder``; print them and return them.
    ``hidden=False``: only the public checks, as the student release runs (the book shows that)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder must be a folder of chNN_*.py files, got {folder}")
    if set(parts) - set("abcd") or not parts:
        raise ValueError(f"parts must be letters from 'abcd', got {parts!r}")
    torch.manual_seed(0)
    out = _wrapping(out)
    capstone = Capstone(folder, sizes or Sizes(), out, hidden)
    out(f"Your LLaMA, assembled from {folder}/ (each piece's functions, and where they came from):")
    for piece, where in capstone.student.served_by().items():
        out(f"  {piece:<10} {where}")
    results = []
    for key in "abcd":
        if key in parts:
            out(f"part ({key}) ...")
            part = getattr(capstone, f"part_{key}")()
            results.append(part)
            _print_part(part, out)
    graded = Graded(results, capstone.curves)
    out(f"capstone: {graded.score:g} / {graded.points:g} points")
    return graded


def _wrapping(out, width: int = 78):
    """``out`` with each line wrapped at ``width`` columns (a book column, a terminal), its
    continuation lines indented four more than the line itself."""
    def emit(line: str) -> None:
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out(textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False))
    return emit


def _print_part(part: Part, out) -> None:
    out(f"({part.key}) {part.title}: {part.score:g} / {part.points:g}")
    for check in part.checks:
        out(f"    {'PASS' if check.score else 'FAIL'} {check.name} ({check.score:g}/{check.points:g}): {check.message}")
    if part.culprit:
        out(f"    the first of your pieces to disagree: {part.culprit}")
    for note in part.notes:
        out(f"    {note}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_course.grade capstone",
                                     description="Grade the model assembled from your exercise files (Chapter 14).")
    parser.add_argument("folder", nargs="?", default="exercises", help="folder of chNN_*.py files (exercises/)")
    parser.add_argument("--parts", default="abcd", help="which parts to run, e.g. ab (default: abcd)")
    parser.add_argument("--quick", action="store_true", help="the smallest sizes (seconds; for tests)")
    parser.add_argument("--device", default="cpu", help="device for part (c)'s training (default: cpu)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    parser.add_argument("--plot", type=Path, default=None, help="write part (c)'s training curves here (PNG)")
    args = parser.parse_args(argv)
    sizes = Sizes(**{**vars(QUICK if args.quick else Sizes()), "device": args.device})
    try:
        graded = grade(args.folder, args.parts, sizes)
    except ValueError as error:
        parser.error(str(error))
    if args.json:
        args.json.write_text(json.dumps({"score": graded.score, "parts": [
            {"part": p.key, "title": p.title, "score": p.score, "max_score": p.points, "culprit": p.culprit,
             "checks": [vars(c) for c in p.checks], "notes": p.notes} for p in graded.parts]}, indent=1))
    if args.plot and graded.curves:
        yl.plot_curves(graded.curves, args.plot)
    return 0 if graded.score == graded.points else 1
