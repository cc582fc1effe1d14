"""Points: one table, set per problem by the author, divided across the problem's tests.

``PROBLEMS`` lists every exercise and homework of the course once, with its points. The graded
tests carry no points, only a relative ``weight`` (``@pytest.mark.graded(LABEL, weight=2)``,
default 1). A problem of P points whose public checks (tests/graded) carry P_pub gives its hidden
tests (tests/hidden) the rest, P_hid = P - P_pub. Within each part, a test function of weight w
gets

    share(test) = P_part * w / (sum of the weights of the part's test functions)

and its parametrized cases (the devices it runs on among them) split that share equally:

    share(case) = share(test) / (number of its cases)

so a problem is worth P whatever the number of its tests, cases or devices. Shares may be
fractions of a point; ``fmt`` prints them with at most two decimals.

The rules the table follows (book/instructors.md states them for instructors):

* Practice (``Exercise N.k``): 1 point each. Its tests are public and the package holds an
  answer, so it carries little weight. Where hidden tests also grade it, they carry half.
* Homework (``Homework N.X``): by difficulty, in three tiers (``TIERS``): short (6), a formula or
  a mask written in a few lines once the statement is read; standard (9), several steps that
  combine pieces the book built (shapes, a loop, a small data structure); long (12), an algorithm
  or derivation the book does not carry out (a backward pass by hand, a search, an acceptance
  rule, capacity-limited routing). Its public checks (form and worked example) carry 1 point; its
  hidden tests the rest.

A synthetic graded test module (the grader's own test cases) may declare its problems in a
module-level ``POINTS = {"Exercise 97.1": problem("first", 3)}``; it cannot redefine the course's.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

KINDS = {"Exercise": "practice", "Homework": "homework"}
TIERS = {"short": 6, "standard": 9, "long": 12}
PRACTICE_POINTS = 1
HOMEWORK_PUBLIC = 1          # what a homework's public checks carry


@dataclass(frozen=True)
class Problem:
    """One exercise or homework: its function's name, its points, the part its public checks
    carry (the rest comes from hidden tests) and, for homework, its difficulty tier."""

    name: str
    points: Fraction
    public: Fraction
    tier: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        if not 0 <= self.public <= self.points or self.points <= 0:
            raise ValueError(f"{self.name}: need 0 <= public <= points and points > 0, "
                             f"got public={self.public}, points={self.points}")

    @property
    def hidden(self) -> Fraction:
        return self.points - self.public


def problem(name: str, points: float, public: float | None = None) -> Problem:
    """Any problem: ``points`` in all, ``public`` of them (default: all) carried by public checks."""
    points = Fraction(points)
    return Problem(name, points, points if public is None else Fraction(public))


def practice(name: str, points: float = PRACTICE_POINTS, hidden: bool = False) -> Problem:
    """A practice exercise; ``hidden=True`` when hidden tests grade half of it."""
    points = Fraction(points)
    return Problem(name, points, points / 2 if hidden else points)


def homework(name: str, tier: str) -> Problem:
    """A homework problem of difficulty ``tier`` (short, standard or long)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    return Problem(name, Fraction(TIERS[tier]), Fraction(HOMEWORK_PUBLIC), tier)


PROBLEMS: dict[str, Problem] = {
    "Exercise 1.1": practice("ffn_hidden_dim"),
    "Exercise 1.2": practice("count_parameters", hidden=True),
    "Exercise 2.1": practice("count_pairs"),
    "Exercise 2.2": practice("merge_pair"),
    "Exercise 2.3": practice("train_bpe", hidden=True),
    "Exercise 2.4": practice("encode"),
    "Exercise 2.5": practice("decode"),
    "Exercise 2.6": practice("embed"),
    "Exercise 2.7": practice("next_token_loss"),
    "Homework 2.A": homework("wordpiece_tokenize", "standard"),
    "Homework 2.B": homework("smoothed_next_token_loss", "short"),
    "Exercise 3.1": practice("rms_norm"),
    "Exercise 3.2": practice("layer_norm"),
    "Exercise 3.3": practice("pre_norm_residual"),
    "Homework 3.A": homework("rms_norm_backward", "long"),
    "Homework 3.B": homework("fold_norm_weights", "standard"),
    "Exercise 4.1": practice("softmax"),
    "Exercise 4.2": practice("causal_mask"),
    "Exercise 4.3": practice("scaled_dot_product_attention"),
    "Exercise 4.4": practice("split_heads"),
    "Exercise 4.5": practice("merge_heads"),
    "Exercise 4.6": practice("multi_head_attention", hidden=True),
    "Homework 4.A": homework("alibi_bias", "short"),
    "Homework 4.B": homework("prefix_lm_mask", "short"),
    "Exercise 5.1": practice("rope_inv_freq"),
    "Exercise 5.2": practice("apply_rope (interleaved)", hidden=True),
    "Exercise 5.3": practice("apply_rope (half)"),
    "Exercise 5.4": practice("interleaved_to_half", hidden=True),
    "Homework 5.A": homework("apply_partial_rope", "standard"),
    "Homework 5.B": homework("apply_rope_2d", "standard"),
    "Exercise 6.1": practice("silu"),
    "Exercise 6.2": practice("swiglu"),
    "Homework 6.A": homework("swiglu_backward", "long"),
    "Homework 6.B": homework("prune_ffn", "standard"),
    "Exercise 7.1": practice("llama_block"),
    "Exercise 7.2": practice("llama_forward"),
    "Exercise 7.3": practice("hf_to_course_names"),
    "Homework 7.A": homework("parallel_block", "standard"),
    "Homework 7.B": homework("logit_lens", "standard"),
    "Exercise 8.1": practice("KVCache.update"),
    "Exercise 8.2": practice("decode_step"),
    "Exercise 8.3": practice("greedy_generate"),
    "Exercise 8.4": practice("top_p_filter"),
    "Exercise 8.5": practice("kv_cache_bytes"),
    "Homework 8.A": homework("beam_search", "long"),
    "Homework 8.B": homework("speculative_accept", "long"),
    "Homework 8.C": homework("min_p_filter", "short"),
    "Exercise 9.1": practice("repeat_kv"),
    "Exercise 9.2": practice("gqa_attention"),
    "Exercise 9.3": practice("mha_to_gqa"),
    "Homework 9.A": homework("Int8KVCache.update", "standard"),
    "Homework 9.B": homework("ragged_attention", "standard"),
    "Exercise 10.1": practice("route_topk"),
    "Exercise 10.2": practice("moe_forward", hidden=True),
    "Exercise 10.3": practice("load_balancing_loss"),
    "Homework 10.A": homework("expert_choice_moe", "standard"),
    "Homework 10.B": homework("priority_dispatch", "long"),
    "Exercise 12.1": practice("banded_mask"),
    "Exercise 12.2": practice("mla_absorbed_attention"),
    "Exercise 12.3": practice("group_limited_topk"),
    "Homework 12.A": homework("attention_sink_mask", "short"),
    "Homework 12.B": homework("sequence_balance_loss", "standard"),
    "Exercise 13.1": practice("memory_per_gpu"),
    "Exercise 13.2": practice("communication_bytes"),
    "Exercise 13.3": practice("tensor_parallel_swiglu"),
    "Homework 13.A": homework("pipeline_bubble_fraction", "short"),
    "Homework 13.B": homework("all_to_all_counts", "standard"),
}


def problem_id(label: str) -> str:
    """"Exercise 4.1 softmax" -> "Exercise 4.1"."""
    return " ".join(label.split()[:2])


def kind_of(label: str) -> str:
    """"practice" or "homework", from the label's first word."""
    word = label.split()[0] if label.split() else ""
    if word not in KINDS:
        raise ValueError(f"label must start with Exercise or Homework, got {label!r}")
    return KINDS[word]


def label_of(ident: str, problems: dict[str, Problem] = PROBLEMS) -> str:
    """"Exercise 4.1" -> "Exercise 4.1 softmax", the label the graded tests use."""
    return f"{ident} {problems[ident].name}"


@dataclass(frozen=True)
class Split:
    """A problem's points: in all, the part its public checks carry, the part from hidden tests."""

    total: Fraction
    public: Fraction
    hidden: Fraction


def split(label: str, problems: dict[str, Problem] = PROBLEMS) -> Split:
    """Total, public-checks and hidden-tests points of an exercise ("Homework 4.A" or its full
    label). A student release, which has no hidden tests, can check ``public`` of ``total``."""
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")
    ident = problem_id(label)
    if ident not in problems:
        raise ValueError(f"label {label!r} is not in the points table (llama_course/grade/points.py)")
    problem = problems[ident]
    return Split(problem.points, problem.public, problem.hidden)


def chapter_totals(chapter: int, problems: dict[str, Problem] = PROBLEMS) -> dict[str, Fraction]:
    """{"practice": ..., "Homework 4.A": ..., ...}: what a chapter's Exercises section states."""
    totals = {"practice": Fraction(0)}
    for ident, problem in problems.items():
        if ident.split()[1].split(".")[0] != str(chapter):
            continue
        if kind_of(ident) == "practice":
            totals["practice"] += problem.points
        else:
            totals[ident] = problem.points
    return totals


def fmt(points: float | Fraction) -> str:
    """Points as printed: at most two decimals, no trailing zeros ("3", "0.5", "0.33")."""
    text = f"{float(points):.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# --------------------------------------------------------------------------------------------
# Dividing a problem's points across its collected tests
# --------------------------------------------------------------------------------------------

class PointsError(ValueError):
    """A graded test whose problem is not in the table, or whose marker disagrees with it."""


HIDDEN_FOLDER = "hidden"   # the hidden tests' folder (tests/hidden): is_hidden and grader.runs_hidden_tests


def is_hidden(item) -> bool:
    """Whether a test comes from a hidden test file: its function's own file is in tests/hidden
    (a suite that re-exports hidden tests elsewhere keeps them hidden)."""
    function = getattr(item, "function", None) or getattr(item, "obj", None)
    try:
        source = inspect.getsourcefile(function) if function is not None else None
    except TypeError:
        source = None
    path = Path(source) if source else Path(str(getattr(item, "path", "")))
    return path.parent.name == HIDDEN_FOLDER


def problems_for(item) -> dict[str, Problem]:
    """The course table, plus the problems a synthetic test module declares in ``POINTS``."""
    extra = getattr(getattr(item, "module", None), "POINTS", None) or {}
    clash = sorted(set(extra) & set(PROBLEMS))
    if clash:
        raise PointsError(f"{item.nodeid}: POINTS cannot redefine the course's {', '.join(clash)}")
    return {**PROBLEMS, **extra} if extra else PROBLEMS


def item_points(items, marker_of) -> dict[str, float]:
    """{nodeid: points} for every graded item (``marker_of(item)``: its Graded marker or None)."""
    weights: dict[tuple[str, bool], dict[str, float]] = {}   # (problem, hidden) -> {test: weight}
    cases: dict[str, list] = {}                              # test (nodeid without [params]) -> items
    totals: dict[tuple[str, bool], Fraction] = {}
    for item in items:
        graded = marker_of(item)
        if graded is None:
            continue
        problems, ident = problems_for(item), problem_id(graded.label)
        if ident not in problems:
            raise PointsError(f"{item.nodeid}: {graded.label!r} is not in the points table "
                              f"(llama_course/grade/points.py): add it there")
        if graded.label != label_of(ident, problems):
            raise PointsError(f"{item.nodeid}: label {graded.label!r} differs from the points table's "
                              f"{label_of(ident, problems)!r}")
        if graded.kind != kind_of(ident):
            raise PointsError(f"{item.nodeid}: kind={graded.kind!r}, but {ident} is {kind_of(ident)}")
        part, test = (ident, is_hidden(item)), item.nodeid.split("[", 1)[0]
        problem = problems[ident]
        totals[part] = problem.hidden if part[1] else problem.public
        if not totals[part]:
            where = "hidden" if part[1] else "public"
            raise PointsError(f"{item.nodeid}: a {where} test of {ident}, which has 0 {where} points in the points "
                              f"table (llama_course/grade/points.py): it would be worth nothing; give {ident} "
                              f"{where} points there or move the test")
        weights.setdefault(part, {})[test] = graded.weight
        cases.setdefault(test, []).append((item, part))
    points = {}
    for test, members in cases.items():
        part = members[0][1]
        share = float(totals[part]) * weights[part][test] / sum(weights[part].values())
        for item, _ in members:
            points[item.nodeid] = share / len(members)
    return points
