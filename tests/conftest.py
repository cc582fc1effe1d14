"""Shared test configuration. The graded-test machinery (--impl, --isolate, the `impl` and
`device` fixtures, the `graded` marker) lives in llama_course.grade.plugin so the grader can
load it for any folder of tests. This file ships with tests/graded in the autograder zip."""

import pytest
import torch

pytest_plugins = ["llama_course.grade.plugin"]

# Test suites made for the grader's own tests; they grade deliberately misbehaving code.
collect_ignore = ["grader_cases"]


@pytest.fixture
def hf_llama_and_ours(tmp_path):
    """make(seed, std, **sizes) -> (hf, ours): transformers' LlamaForCausalLM with the given
    LlamaConfig sizes (eager attention, pad id 0, no EOS so that generate() never stops early) and
    realistic weights of that std, and the course's Llama loaded from its saved checkpoint."""
    def make(seed: int, std: float, **sizes):
        transformers = pytest.importorskip("transformers")
        from llama_course.checkpoint import load_hf
        from llama_course.grade.testing import realistic_weights_

        config = transformers.LlamaConfig(**sizes, attn_implementation="eager", pad_token_id=0)
        torch.manual_seed(seed)
        hf = transformers.LlamaForCausalLM(config).eval()
        realistic_weights_(hf, std=std)
        hf.generation_config.eos_token_id = None
        hf.save_pretrained(tmp_path)
        return hf, load_hf(tmp_path)

    return make
