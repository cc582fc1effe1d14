"""Tokenizers (Chapter 2): byte-level BPE from scratch, and Llama 3's production tokenizer."""

from .bpe import GPT2_PATTERN, BPETokenizer, merge_pair, train_bpe
from .llama3 import LLAMA3_PATTERN, LLAMA3_SPECIAL_TOKENS, llama3_tokenizer

__all__ = ["BPETokenizer", "GPT2_PATTERN", "LLAMA3_PATTERN", "LLAMA3_SPECIAL_TOKENS", "llama3_tokenizer", "merge_pair",
           "train_bpe"]
