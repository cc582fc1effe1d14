"""Training speed of the course's BPE against Hugging Face `tokenizers`, on one core.

    python benchmarks/bench_train_bpe.py [--vocab-size 500] [--repeats 5]

Both train a byte-level BPE with the same vocabulary size on the same ~127 KB of English (the
course corpus's two story files), in the same process, pinned to one CPU core. Bar (Chapter 2):
the course trainer finishes in under 1.5 s. The ratio says how far plain Python is from Rust.
"""

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers starts its thread pool

from llama_course.data import course_corpus  # noqa: E402
from llama_course.tokenizer import train_bpe  # noqa: E402


def time_it(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    text = course_corpus(("stories_a.txt", "stories_b.txt"))
    print(f"text: {len(text.encode()):,} bytes; vocab_size {args.vocab_size}; "
          f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, one core")

    ours = time_it(lambda: train_bpe(text, args.vocab_size, special_tokens=["<|endoftext|>"]), args.repeats)
    print(f"llama_course.tokenizer.train_bpe : {ours:.3f} s (median of {args.repeats})")

    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        print("tokenizers is not installed: no comparison")
        return

    def hf():
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tokenizer.train_from_iterator([text], trainer)
        return tokenizer

    theirs = time_it(hf, args.repeats)
    print(f"tokenizers BpeTrainer (Rust)     : {theirs:.3f} s (median of {args.repeats})")
    print(f"ratio course / tokenizers        : {ours / theirs:.1f}x")
    print(f"bar: under 1.5 s -> {'met' if ours < 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
