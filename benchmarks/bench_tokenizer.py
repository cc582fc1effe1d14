"""Encoding speed of the course's BPE (with Llama 3's ranks) against tiktoken, on one core.

    python benchmarks/bench_tokenizer.py [--lengths 1000 2000 4000 8000 16000] [--repeats 3]

A run of n identical CJK characters ("一" * n) is one pre-token of 3n bytes under Llama 3's
pattern: the worst case of BPE's merge loop. For each n both encoders run in the same process,
pinned to one CPU core, with the course tokenizer's cache cleared before every call. Goal (the
reliability issue): time roughly proportional to n (the heap makes it O(n log n); the rescanning
loop it replaced was O(n^2), 46 s at n = 8,000) and 8,000 characters well under a second. The
ratio to tiktoken (Rust) shows how far plain Python is from it; it is not a bar to pass. The
outputs are checked to be identical before any time is reported.
"""

import argparse
import os
import platform

from llama_course.cost import best_time
from llama_course.tokenizer import LLAMA3_PATTERN, LLAMA3_SPECIAL_TOKENS, llama3_tokenizer
from llama_course.tokenizer.llama3 import llama3_ranks_path, load_tiktoken_ranks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 2000, 4000, 8000, 16000])
    parser.add_argument("--text", default="一", help="the character repeated (default: a CJK letter)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import tiktoken

    ranks = load_tiktoken_ranks(llama3_ranks_path())
    reference = tiktoken.Encoding("llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                                  special_tokens={t: len(ranks) + i for i, t in enumerate(LLAMA3_SPECIAL_TOKENS)})
    ours = llama3_tokenizer()
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, one core; "
          f"tiktoken {tiktoken.__version__}; text = {args.text!r} * n; best of {args.repeats} after a warm-up")
    print(f"{'n':>7} {'course (s)':>11} {'tiktoken (s)':>13} {'ratio':>7} {'course s / n, x1e6':>19}")

    def encode(text):
        ours._cache.clear()
        return ours.encode(text)

    for n in args.lengths:
        text = args.text * n
        assert encode(text) == reference.encode(text), f"outputs differ at n = {n}"
        course = best_time(lambda: encode(text), "cpu", args.repeats)
        theirs = best_time(lambda: reference.encode(text), "cpu", args.repeats)
        print(f"{n:>7} {course:>11.4f} {theirs:>13.5f} {course / theirs:>7.0f} {course / n * 1e6:>19.1f}")


if __name__ == "__main__":
    main()
