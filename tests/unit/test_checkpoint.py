"""Loading checkpoints: Hugging Face directories (sharded, tied, bf16) and Meta's format give
transformers' logits; malformed or ambiguous checkpoints raise errors naming the file and field."""

import json
import shutil

import pytest
import torch

from llama_course.checkpoint import CheckpointError, load_hf, load_meta, meta_to_course_name
from llama_course.grade.testing import realistic_weights_
from llama_course.rope import half_to_interleaved

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

CONFIGS = {
    "mha-untied": dict(vocab_size=101, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=4, intermediate_size=176),
    "gqa-tied": dict(vocab_size=97, hidden_size=64, num_hidden_layers=3, num_attention_heads=8,
                     num_key_value_heads=2, intermediate_size=160, tie_word_embeddings=True),
    "mqa-theta": dict(vocab_size=257, hidden_size=96, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=1, intermediate_size=256, rope_theta=500000.0),
}


def hf_model(name, seed=0):
    config = transformers.LlamaConfig(**CONFIGS[name], max_position_embeddings=256, rms_norm_eps=1e-5,
                                      attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    realistic_weights_(model, std=0.2)
    return model


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def saved(request, tmp_path_factory):
    model = hf_model(request.param)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path, max_shard_size="100KB")  # several shards and an index
    return model, path


def test_left_padding_matches(saved):
    reference, path = saved
    ours = load_hf(path)
    ids = torch.randint(0, reference.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    attention_mask = torch.ones(2, 9, dtype=torch.long)
    attention_mask[0, :3] = 0                                  # row 0: 3 pads, then 6 real tokens
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)   # each row's first real token is 0
    with torch.no_grad():
        expected = reference(ids, attention_mask=attention_mask, position_ids=positions).logits
        logits = ours(ids, attention_mask=attention_mask)
    real = attention_mask.bool()
    torch.testing.assert_close(logits[real], expected[real], rtol=1e-5, atol=1e-5)
    alone = ours(ids[:1, 3:])                                  # the padded row, unpadded, alone
    torch.testing.assert_close(logits[0, 3:], alone[0], rtol=1e-5, atol=1e-5)


def test_from_hf_logits_match(saved, device):
    reference, path = saved
    ours = load_hf(path, device=device)
    assert len(list(path.glob("model-*.safetensors"))) > 1
    ids = torch.randint(0, reference.config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(ids).logits
        logits = ours(ids.to(device))
    torch.testing.assert_close(logits.cpu(), expected, rtol=1e-5, atol=1e-5)



def test_bf16_within_tolerance(saved):
    reference, path = saved
    ours = load_hf(path, dtype=torch.bfloat16)
    assert ours.embed_tokens.weight.dtype == torch.bfloat16
    ids = torch.randint(0, reference.config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = reference(ids).logits
        logits = ours(ids).float()
    scale = expected.abs().max().item()
    # bf16 keeps 8 mantissa bits: a few roundings per layer, measured against the logits' scale
    torch.testing.assert_close(logits, expected, rtol=0, atol=0.05 * scale)


MODULE_TO_META = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
                  "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
                  "mlp.gate_proj": "feed_forward.w1", "mlp.up_proj": "feed_forward.w3",
                  "mlp.down_proj": "feed_forward.w2", "input_layernorm": "attention_norm",
                  "post_attention_layernorm": "ffn_norm"}


def write_meta(model, path):
    """Meta's release format from a transformers model: short names, interleaved RoPE rows
    (the inverse of the permutation Hugging Face's conversion script applies)."""
    config = model.config
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "model.embed_tokens.weight":
            state["tok_embeddings.weight"] = tensor
        elif name == "model.norm.weight":
            state["norm.weight"] = tensor
        elif name == "lm_head.weight":
            state["output.weight"] = tensor
        else:
            layer, module = name.split(".")[2], ".".join(name.split(".")[3:-1])
            if module == "self_attn.q_proj":
                tensor = half_to_interleaved(tensor, config.num_attention_heads)
            elif module == "self_attn.k_proj":
                tensor = half_to_interleaved(tensor, config.num_key_value_heads)
            state[f"layers.{layer}.{MODULE_TO_META[module]}.weight"] = tensor
    path.mkdir(parents=True, exist_ok=True)
    torch.save(state, path / "consolidated.00.pth")
    (path / "params.json").write_text(json.dumps({
        "dim": config.hidden_size, "n_layers": config.num_hidden_layers, "n_heads": config.num_attention_heads,
        "n_kv_heads": config.num_key_value_heads, "vocab_size": -1, "norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_parameters["rope_theta"], "max_seq_len": 256,
        # Meta's d_ff rule; with multiple_of = d_ff and no multiplier it lands exactly on d_ff here
        "multiple_of": config.intermediate_size, "ffn_dim_multiplier": None}))


def test_from_meta_gives_the_same_logits(saved, tmp_path):
    reference, path = saved
    if reference.config.tie_word_embeddings:
        pytest.skip("Meta's releases never tie the head")
    write_meta(reference, tmp_path / "meta")
    ours = load_meta(tmp_path / "meta")
    assert ours.config.rope_layout == "interleaved" and ours.config.d_ff == reference.config.intermediate_size
    assert not torch.equal(ours.layers[0].self_attn.q_proj.weight, reference.model.layers[0].self_attn.q_proj.weight)
    ids = torch.randint(0, reference.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), reference(ids).logits, rtol=1e-5, atol=1e-5)


def test_mismatched_checkpoints_are_listed(tmp_path):
    model = hf_model("mha-untied")
    model.save_pretrained(tmp_path / "ok")
    config = json.loads((tmp_path / "ok" / "config.json").read_text())
    config["num_hidden_layers"] = 3
    config["intermediate_size"] = 180
    (tmp_path / "ok" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as error:
        load_hf(tmp_path / "ok")
    text = str(error.value)
    assert "missing: layers.2.mlp.gate_proj.weight" in text
    assert "wrong shape: model.layers.0.mlp.gate_proj.weight" in text
    with pytest.raises(ValueError, match="config.json"):
        load_hf(tmp_path)
    config["model_type"] = "gpt2"
    (tmp_path / "ok" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="supported: llama, qwen3, mixtral"):
        load_hf(tmp_path / "ok")


def test_meta_names():
    assert meta_to_course_name("layers.3.feed_forward.w1.weight") == "layers.3.mlp.gate_proj.weight"


@pytest.fixture
def sharded(tmp_path):
    """A fresh copy of a sharded, untied checkpoint (each test may damage its own)."""
    hf_model("mha-untied").save_pretrained(tmp_path / "ckpt", max_shard_size="100KB")
    return tmp_path / "ckpt"


def shard_of(path, key):
    index = json.loads((path / "model.safetensors.index.json").read_text())
    return path / index["weight_map"][key]


def test_the_same_tensor_in_two_shards_names_both(sharded):
    first, second = shard_of(sharded, "model.norm.weight"), shard_of(sharded, "model.embed_tokens.weight")
    assert first != second
    tensors = safetensors_torch.load_file(second)
    tensors["model.norm.weight"] = torch.zeros_like(safetensors_torch.load_file(first)["model.norm.weight"])
    safetensors_torch.save_file(tensors, second, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="model.norm.weight is in two shards") as error:
        load_hf(sharded)
    assert first.name in str(error.value) and second.name in str(error.value)


def test_two_file_tensors_for_one_parameter_are_refused(sharded):
    shard = shard_of(sharded, "model.norm.weight")
    tensors = safetensors_torch.load_file(shard)
    tensors["norm.weight"] = tensors["model.norm.weight"] + 1.0          # the same parameter, other values
    safetensors_torch.save_file(tensors, shard, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"model.norm.weight and norm.weight both map to the parameter "
                                              r"norm.weight"):
        load_hf(sharded)


def test_quantized_checkpoints_are_refused_with_one_message(sharded):
    edit_json(sharded / "config.json", lambda c: c.update(quantization_config={"quant_method": "fp8"}))
    with pytest.raises(ValueError, match=r"quantization_config \(quant_method 'fp8'\): a quantized checkpoint"):
        load_hf(sharded)
    edit_json(sharded / "config.json", lambda c: c.pop("quantization_config"))
    shard = shard_of(sharded, "model.layers.0.mlp.up_proj.weight")
    original = safetensors_torch.load_file(shard)
    for dtype in (torch.float8_e4m3fn, torch.int8, torch.complex64):
        tensors = dict(original, **{"model.layers.0.mlp.up_proj.weight":
                                    original["model.layers.0.mlp.up_proj.weight"].to(dtype)})
        safetensors_torch.save_file(tensors, shard, metadata={"format": "pt"})
        for cast in (None, torch.float32):                                  # dtype= does not hide it
            with pytest.raises(CheckpointError, match=f"model.layers.0.mlp.up_proj.weight is {dtype}; the course "
                                                      f"loads floating-point weights"):
                load_hf(sharded, dtype=cast)


def test_the_index_must_match_the_shards(sharded):
    norm_shard, embed_shard = shard_of(sharded, "model.norm.weight"), shard_of(sharded, "model.embed_tokens.weight")
    edit_json(sharded / "model.safetensors.index.json",
              lambda c: c["weight_map"].update({"model.norm.weight": embed_shard.name}))
    with pytest.raises(ValueError, match=f"weight_map does not match the shards: model.norm.weight \\(index: "
                                         f"{embed_shard.name}, found in {norm_shard.name}\\)"):
        load_hf(sharded)
    edit_json(sharded / "model.safetensors.index.json",
              lambda c: c["weight_map"].update({"model.norm.weight": norm_shard.name, "model.extra.weight":
                                                norm_shard.name}))
    with pytest.raises(ValueError, match=r"model.extra.weight \(index: .*, found in none\)"):
        load_hf(sharded)


def test_deeply_nested_json_is_a_clear_error(sharded, tmp_path):
    from llama_course.tokenizer import BPETokenizer

    (sharded / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="config.json: cannot be read as JSON \\(nested too deeply\\)"):
        load_hf(sharded)
    (tmp_path / "tokenizer.json").write_text('{"format": "llama-course-bpe", "vocab": ' + "[" * 100_000 + "]" * 100_000
                                             + "}")
    with pytest.raises(ValueError, match="tokenizer.json: JSON nested too deeply"):
        BPETokenizer.load(tmp_path / "tokenizer.json")


def test_a_tied_head_stored_with_other_values_is_an_error(tmp_path):
    model = hf_model("gqa-tied")
    model.save_pretrained(tmp_path / "ckpt")                   # one file; the tied head is not stored
    path = tmp_path / "ckpt" / "model.safetensors"
    tensors = safetensors_torch.load_file(path)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    safetensors_torch.save_file(tensors, path, metadata={"format": "pt"})
    ours = load_hf(tmp_path / "ckpt")                    # the same values: fine, one matrix
    assert ours.lm_head.weight is ours.embed_tokens.weight
    tensors["lm_head.weight"] = tensors["lm_head.weight"] + 1.0
    safetensors_torch.save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="tie_word_embeddings is true but lm_head.weight differs"):
        load_hf(tmp_path / "ckpt")


def test_mixed_dtypes_are_an_error_at_load(sharded):
    shard = shard_of(sharded, "model.layers.1.mlp.down_proj.weight")
    tensors = {k: v.to(torch.bfloat16) for k, v in safetensors_torch.load_file(shard).items()}
    safetensors_torch.save_file(tensors, shard, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="mixes dtypes.*torch.bfloat16.*pass dtype="):
        load_hf(sharded)
    model = load_hf(sharded, dtype=torch.float32)        # one dtype asked for: loads
    assert {p.dtype for p in model.parameters()} == {torch.float32}


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / "config.json").write_text("{not json"), r"config.json: cannot be read as JSON"),
    (lambda p: edit_json(p / "config.json", lambda c: c.pop("hidden_size")),
     r"config.json: missing field 'hidden_size'"),
    (lambda p: edit_json(p / "config.json", lambda c: c.update(hidden_size="64")), r"config.json: d_model must be"),
    (lambda p: (p / "config.json").write_text("[1, 2]"), r"config.json: expected a JSON object"),
    (lambda p: (p / "model.safetensors.index.json").write_text("{"), r"index.json: cannot be read as JSON"),
    (lambda p: edit_json(p / "model.safetensors.index.json", lambda c: c.pop("weight_map")),
     r"index.json: field 'weight_map'"),
    (lambda p: edit_json(p / "model.safetensors.index.json",
                         lambda c: c["weight_map"].update({"model.norm.weight": "../other/model.safetensors"})),
     r"shard '../other/model.safetensors' is not a file in .* \(outside the checkpoint\)"),
    (lambda p: edit_json(p / "model.safetensors.index.json",
                         lambda c: c["weight_map"].update({"model.norm.weight": "gone.safetensors"})),
     r"shard 'gone.safetensors' is missing"),
    (lambda p: shard_of(p, "model.norm.weight").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00garbage"),
     r"safetensors: not a readable safetensors file"),
])
def test_malformed_hugging_face_files_are_named(sharded, damage, message):
    damage(sharded)
    with pytest.raises(ValueError, match=message):
        load_hf(sharded)


def edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_an_index_entry_outside_the_checkpoint_is_not_read(tmp_path):
    hf_model("mha-untied").save_pretrained(tmp_path / "other")        # a complete, valid checkpoint next door
    hf_model("mha-untied").save_pretrained(tmp_path / "ckpt", max_shard_size="100KB")
    index = tmp_path / "ckpt" / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"] = {k: "../other/model.safetensors" for k in data["weight_map"]}
    index.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="outside the checkpoint"):
        load_hf(tmp_path / "ckpt")


def test_malformed_meta_files_are_named(tmp_path):
    reference = hf_model("mha-untied")
    write_meta(reference, tmp_path / "meta")
    params = json.loads((tmp_path / "meta" / "params.json").read_text())
    del params["dim"]
    (tmp_path / "meta" / "params.json").write_text(json.dumps(params))
    with pytest.raises(ValueError, match="params.json: missing field 'dim'"):
        load_meta(tmp_path / "meta")
    write_meta(reference, tmp_path / "meta")
    (tmp_path / "meta" / "consolidated.00.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="consolidated.00.pth: not a readable PyTorch checkpoint"):
        load_meta(tmp_path / "meta")
    write_meta(reference, tmp_path / "meta")
    state = torch.load(tmp_path / "meta" / "consolidated.00.pth", weights_only=True)
    state.pop("norm.weight")
    torch.save(state, tmp_path / "meta" / "consolidated.01.pth")       # a second shard missing a tensor
    with pytest.raises(ValueError, match="consolidated.01.pth: holds other tensors"):
        load_meta(tmp_path / "meta")
    shutil.rmtree(tmp_path / "meta")
