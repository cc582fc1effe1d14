"""The LLaMA-style SentencePiece set-up the chapter relies on (sentencepiece is the oracle)."""

import pytest

pytest.importorskip("sentencepiece", reason="pip install sentencepiece (make install does)")

from llama_course.data import ENGLISH, course_corpus  # noqa: E402
from llama_course.tokenizer.spm import train_sentencepiece  # noqa: E402


@pytest.fixture(scope="module")
def sp():
    return train_sentencepiece(course_corpus(ENGLISH), 1000)


def test_llama_special_ids(sp):
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2)
    assert [sp.id_to_piece(i) for i in range(3)] == ["<unk>", "<s>", "</s>"]
    assert sp.get_piece_size() == 1000


def test_spaces_belong_to_words_and_digits_split(sp):
    pieces = sp.encode("The cat sat 2024", out_type=str)
    assert pieces[0] == "▁The" and "▁sat" in pieces
    assert pieces[-4:] == ["2", "0", "2", "4"]


def test_unseen_characters_fall_back_to_bytes(sp):
    pieces = sp.encode("中", out_type=str)  # the English corpus has no Chinese
    assert pieces[-3:] == ["<0xE4>", "<0xB8>", "<0xAD>"]
    assert sp.unk_id() not in sp.encode("中文 👋")
    assert sp.decode(sp.encode("The robot said: 中文 👋!")) == "The robot said: 中文 👋!"


def test_training_is_deterministic(sp):
    again = train_sentencepiece(course_corpus(ENGLISH), 1000)
    assert again.serialized_model_proto() == sp.serialized_model_proto()
