"""Tokenizers (Chapter 2): byte-level BPE from scratch, Llama 3's production
tokenizer, and LLaMA-1/2's SentencePiece BPE (``spm``; needs the optional
``sentencepiece`` package when used)."""

from . import spm
from .bpe import GPT2_PATTERN, BPETokenizer, bpe_merge, merge_pair, train_bpe
from .llama3 import LLAMA3_PATTERN, LLAMA3_SPECIAL_TOKENS, llama3_tokenizer
from .spm import train_sentencepiece

__all__ = ["BPETokenizer", "GPT2_PATTERN", "LLAMA3_PATTERN",
           "LLAMA3_SPECIAL_TOKENS", "bpe_merge", "llama3_tokenizer",
           "merge_pair", "spm", "train_bpe", "train_sentencepiece"]
