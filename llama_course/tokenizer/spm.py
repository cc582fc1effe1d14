"""SentencePiece BPE, as LLaMA-1 and Llama 2 use it (Chapter 2).

LLaMA-1/2's tokenizer is a SentencePiece BPE model with 32,000 pieces: spaces become "▁" and
belong to the following word, digits are split one by one, and characters the model never saw
fall back to their UTF-8 bytes (<0xE4> <0xB8> <0xAD> for 中) instead of <unk>. Ids 0, 1, 2 are
<unk>, <s> (BOS) and </s> (EOS).
"""

from __future__ import annotations

import io
from collections.abc import Iterable


def train_sentencepiece(texts: str | Iterable[str], vocab_size: int, character_coverage: float = 0.9995,
                        **options):
    """Train a LLaMA-style SentencePiece BPE model in memory; returns a SentencePieceProcessor.

    Settings as in LLaMA's tokenizer: model_type=bpe, byte_fallback, split_digits, ids
    unk=0 / bos=1 / eos=2, no pad, whitespace kept as written (no normalization of runs of spaces).
    ``num_threads=1`` makes the model bytes identical on every machine. ``options`` override any
    sentencepiece trainer flag.
    """
    import sentencepiece as spm  # optional dependency: pip install sentencepiece

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
    lines = [texts] if isinstance(texts, str) else list(texts)
    sentences = [line for text in lines for line in text.splitlines() if line.strip()]
    model = io.BytesIO()
    settings = dict(model_type="bpe", vocab_size=vocab_size, byte_fallback=True, split_digits=True,
                    character_coverage=character_coverage, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                    normalization_rule_name="identity", remove_extra_whitespaces=False,
                    add_dummy_prefix=True, num_threads=1, max_sentence_length=1 << 16,
                    minloglevel=2)
    settings.update(options)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, **settings)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())
