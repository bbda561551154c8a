"""Integration: save_pretrained / from_pretrained for every class of every family.

* in-process round trip through safetensors is bit-exact (state dict and outputs), with the code files and a complete
  `auto_map` in the folder;
* the Auto classes load the folders without trust_remote_code while the plugin is imported;
* a fresh interpreter in which transformer_zoo cannot be imported loads every class with trust_remote_code=True and
  reproduces the outputs and generated tokens exactly, and refuses without trust_remote_code;
* seq2seq keeps its shared source/target embedding after a reload whatever tie_word_embeddings says.
"""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

import transformer_zoo as tz
from integration_helpers import (
    ALL_CLASSES,
    PACKAGE_DIR,
    assert_tensors_equal,
    model_inputs,
    output_tensors,
    run_fresh_python,
    tiny_config,
)


GENERATE_KWARGS = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)
GENERATORS = ("ZooDecoderForCausalLM", "ZooSeq2SeqForConditionalGeneration")


def _auto_class(name: str):
    import transformers

    return getattr(transformers, name)


def _generation_inputs(class_name: str) -> dict[str, torch.Tensor]:
    # Left padding for the decoder-only model (what generate expects), right padding for the encoder-decoder.
    input_ids = torch.tensor([[11, 12, 13, 14, 15, 16], [0, 0, 21, 22, 23, 24]])
    attention_mask = (input_ids != 0).long()
    if class_name == "ZooSeq2SeqForConditionalGeneration":
        input_ids = torch.tensor([[11, 12, 13, 14, 15, 16], [21, 22, 23, 24, 0, 0]])
        attention_mask = (input_ids != 0).long()
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def _forward_inputs(entry) -> dict[str, torch.Tensor]:
    return {key: value for key, value in entry["inputs"].items() if not key.startswith("gen_")}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Every class built from its family's tiny preset, saved once; with reference outputs and generations."""
    root = tmp_path_factory.mktemp("zoo_saved")
    entries = {}
    for index, (name, (model_type, auto_name, model_class)) in enumerate(ALL_CLASSES.items()):
        torch.manual_seed(1000 + index)
        model = model_class(tiny_config(model_type)).eval()
        folder = root / name
        model.save_pretrained(folder)
        inputs = model_inputs(name)
        with torch.no_grad():
            outputs = output_tensors(model(**inputs))
        generated = {}
        if name in GENERATORS:
            generation_inputs = _generation_inputs(name)
            generated["greedy"] = model.generate(**generation_inputs, **GENERATE_KWARGS)
            generated["beam"] = model.generate(**generation_inputs, num_beams=3, **GENERATE_KWARGS)
            inputs = {**inputs, **{f"gen_{key}": value for key, value in generation_inputs.items()}}
        entries[name] = dict(
            model=model, folder=folder, inputs=inputs, outputs=outputs, generated=generated,
            model_type=model_type, auto_name=auto_name,
        )
    return entries


# ================================================================================================ in-process
@pytest.mark.parametrize("name", list(ALL_CLASSES))
def test_save_load_round_trip_is_bit_exact(saved, name):
    entry = saved[name]
    model, folder, model_type = entry["model"], entry["folder"], entry["model_type"]
    model_class = ALL_CLASSES[name][2]
    family = model_type.removeprefix("zoo_")

    # Files: config, safetensors weights only, and the code needed for trust_remote_code, copied verbatim.
    files = {path.name for path in folder.iterdir()}
    code_files = {"configuration_zoo_common.py", f"configuration_zoo_{family}.py", f"modeling_zoo_{family}.py",
                  "modeling_zoo_layers.py", "modeling_zoo_positions.py", "modeling_zoo_checks.py",
                  "modeling_zoo_losses.py", "modeling_zoo_attention_kernels.py", "modeling_zoo_dropout.py",
                  "modeling_zoo_stack.py"}
    if family in ("decoder", "seq2seq"):
        code_files.add("modeling_zoo_generation.py")
    assert {"config.json", "model.safetensors"} | code_files <= files, files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".ckpt"))], files
    assert [f for f in files if "safetensors" in f] == ["model.safetensors"], files
    for code_file in code_files:
        assert (folder / code_file).read_text() == (PACKAGE_DIR / code_file).read_text(), code_file
    if name in GENERATORS:
        assert "generation_config.json" in files

    # auto_map names every Auto class of the family, pointing at the copied files.
    config_json = json.loads((folder / "config.json").read_text())
    assert config_json["model_type"] == model_type
    config_class, family_models = tz.FAMILIES[model_type]
    expected_map = {"AutoConfig": f"configuration_zoo_{family}.{config_class.__name__}"}
    expected_map.update(
        {auto.__name__: f"modeling_zoo_{family}.{cls.__name__}" for auto, cls in family_models}
    )
    assert config_json["auto_map"] == expected_map
    assert config_json["architectures"] == [name]

    # Weights and outputs identical after the reload.
    reloaded, info = model_class.from_pretrained(folder, output_loading_info=True)
    reloaded.eval()
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert type(reloaded) is model_class
    ignored = {"_name_or_path"}  # the folder it came from
    assert {k: v for k, v in reloaded.config.to_dict().items() if k not in ignored} == {
        k: v for k, v in model.config.to_dict().items() if k not in ignored
    }
    original_state, reloaded_state = model.state_dict(), reloaded.state_dict()
    assert original_state.keys() == reloaded_state.keys()
    for key in original_state:
        assert torch.equal(original_state[key], reloaded_state[key]), key
    with torch.no_grad():
        assert_tensors_equal(output_tensors(reloaded(**_forward_inputs(entry))), entry["outputs"], name)
    # Ties survive the reload.
    output_embeddings = reloaded.get_output_embeddings()
    if output_embeddings is not None:
        assert output_embeddings.weight is reloaded.get_input_embeddings().weight
    if name in GENERATORS:
        generation_inputs = _generation_inputs(name)
        assert torch.equal(reloaded.generate(**generation_inputs, **GENERATE_KWARGS), entry["generated"]["greedy"])


@pytest.mark.parametrize("name", list(ALL_CLASSES))
def test_auto_classes_load_with_plugin_without_remote_code(saved, name):
    entry = saved[name]
    folder, model_type = entry["folder"], entry["model_type"]
    config = AutoConfig.from_pretrained(folder)
    assert type(config) is tz.FAMILIES[model_type][0]
    model = _auto_class(entry["auto_name"]).from_pretrained(folder).eval()
    # The registered plugin class, not a transformers_modules copy of the saved code.
    assert type(model) is ALL_CLASSES[name][2]
    with torch.no_grad():
        assert_tensors_equal(output_tensors(model(**_forward_inputs(entry))), entry["outputs"], name)
    # Every other Auto class of the family accepts the folder too (heads load from a base checkpoint and back).
    for auto_class, model_class in tz.FAMILIES[model_type][1]:
        assert type(auto_class.from_pretrained(folder)) is model_class


# ================================================================================================ fresh process
FRESH_SCRIPT = r"""
import transformers
from safetensors.torch import load_file, save_file

torch.set_num_threads(ARGS["threads"])
results = {"classes": {}, "refused": {}, "cross": {}}
for name, spec in ARGS["classes"].items():
    auto_class = getattr(transformers, spec["auto"])
    config = transformers.AutoConfig.from_pretrained(spec["folder"], trust_remote_code=True)
    model = auto_class.from_pretrained(spec["folder"], trust_remote_code=True).eval()
    inputs = load_file(spec["inputs"])
    forward_inputs = {k: v for k, v in inputs.items() if not k.startswith("gen_")}
    with torch.no_grad():
        outputs = model(**forward_inputs)
    tensors = {k: v.detach().contiguous() for k, v in outputs.items() if isinstance(v, torch.Tensor)}
    if spec["generate"]:
        generation_inputs = {k.removeprefix("gen_"): v for k, v in inputs.items() if k.startswith("gen_")}
        kwargs = ARGS["generate_kwargs"]
        tensors["generated_greedy"] = model.generate(**generation_inputs, **kwargs).contiguous()
        tensors["generated_beam"] = model.generate(**generation_inputs, num_beams=3, **kwargs).contiguous()
    save_file(tensors, f"out_{name}.safetensors")
    results["classes"][name] = {
        "model_module": type(model).__module__,
        "model_class": type(model).__name__,
        "config_module": type(config).__module__,
        "config_class": type(config).__name__,
    }
    # Without trust_remote_code (stdin closed, so no prompt): refused, for the config and the model.
    refusals = []
    for loader in (transformers.AutoConfig, auto_class):
        try:
            loader.from_pretrained(spec["folder"])
        except ValueError as error:
            refusals.append("trust_remote_code" in str(error))
        else:
            refusals.append(False)
    results["refused"][name] = refusals

# auto_map is complete: every Auto class of the family loads any folder of that family.
for name, spec in ARGS["classes"].items():
    results["cross"][name] = {
        auto_name: type(getattr(transformers, auto_name).from_pretrained(spec["folder"], trust_remote_code=True)).__name__
        for auto_name in spec["family_autos"]
    }
emit(results)
"""


def test_fresh_process_trust_remote_code_without_plugin(saved, tmp_path):
    classes = {}
    for name, entry in saved.items():
        inputs_file = tmp_path / f"inputs_{name}.safetensors"
        save_file({k: v.contiguous() for k, v in entry["inputs"].items()}, inputs_file)
        classes[name] = {
            "folder": str(entry["folder"]),
            "auto": entry["auto_name"],
            "inputs": str(inputs_file),
            "generate": name in GENERATORS,
            "family_autos": [auto.__name__ for auto, _ in tz.FAMILIES[entry["model_type"]][1]],
        }
    results = run_fresh_python(
        FRESH_SCRIPT,
        cwd=tmp_path,
        args={"classes": classes, "threads": torch.get_num_threads(), "generate_kwargs": GENERATE_KWARGS},
    )

    for name, entry in saved.items():
        info = results["classes"][name]
        # Loaded from the copied code (transformers_modules), under the same class names.
        assert info["model_module"].startswith("transformers_modules."), info
        assert info["config_module"].startswith("transformers_modules."), info
        assert info["model_class"] == name
        assert info["config_class"] == tz.FAMILIES[entry["model_type"]][0].__name__
        assert results["refused"][name] == [True, True], f"{name} loaded without trust_remote_code"

        produced = load_file(tmp_path / f"out_{name}.safetensors")
        expected = dict(entry["outputs"])
        if name in GENERATORS:
            expected["generated_greedy"] = entry["generated"]["greedy"]
            expected["generated_beam"] = entry["generated"]["beam"]
        assert_tensors_equal(produced, expected, f"fresh process {name}")

        family_autos = tz.FAMILIES[entry["model_type"]][1]
        assert results["cross"][name] == {auto.__name__: cls.__name__ for auto, cls in family_autos}


# ================================================================================================ ties
def _embedding_identity(model):
    inner = model.model
    shared = inner.shared.weight
    return {
        "encoder": inner.encoder.embed_tokens.weight is shared,
        "decoder": inner.decoder.embed_tokens.weight is shared,
        "lm_head": model.lm_head.weight is shared,
    }


@pytest.mark.parametrize("tie", [False, True])
def test_seq2seq_shared_embedding_survives_reload(tmp_path, tie):
    torch.manual_seed(0)
    model = tz.ZooSeq2SeqForConditionalGeneration(tiny_config("zoo_seq2seq", tie_word_embeddings=tie)).eval()
    expected = {"encoder": True, "decoder": True, "lm_head": tie}
    assert _embedding_identity(model) == expected
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", framework="pt") as handle:
        keys = set(handle.keys())
    # One copy of the shared source/target table; the output layer only when it is untied.
    assert "model.shared.weight" in keys
    assert not {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"} & keys
    assert ("lm_head.weight" in keys) == (not tie)

    reloaded, info = tz.ZooSeq2SeqForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert _embedding_identity(reloaded) == expected
    if not tie:
        assert not torch.equal(reloaded.lm_head.weight, reloaded.model.shared.weight)
    for key, value in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key

    # Training the shared table moves encoder and decoder inputs together (one tensor, not equal copies).
    with torch.no_grad():
        reloaded.model.shared.weight[7].add_(1.0)
    assert torch.equal(reloaded.model.encoder.embed_tokens.weight[7], reloaded.model.shared.weight[7])
    assert torch.equal(reloaded.model.decoder.embed_tokens.weight[7], reloaded.model.shared.weight[7])
    assert torch.equal(reloaded.lm_head.weight[7], reloaded.model.shared.weight[7]) == tie

    # The bare encoder-decoder shares its table too.
    base = tz.ZooSeq2SeqModel(tiny_config("zoo_seq2seq", tie_word_embeddings=tie))
    base.save_pretrained(tmp_path / "base")
    base = tz.ZooSeq2SeqModel.from_pretrained(tmp_path / "base")
    assert base.encoder.embed_tokens.weight is base.shared.weight
    assert base.decoder.embed_tokens.weight is base.shared.weight


@pytest.mark.parametrize(
    "model_class,model_type",
    [(tz.ZooDecoderForCausalLM, "zoo_decoder"), (tz.ZooEncoderForMaskedLM, "zoo_encoder")],
)
def test_untied_output_layer_stays_separate(tmp_path, model_class, model_type):
    torch.manual_seed(0)
    model = model_class(tiny_config(model_type, tie_word_embeddings=False)).eval()
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    model.save_pretrained(tmp_path)
    reloaded, info = model_class.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert reloaded.get_output_embeddings().weight is not reloaded.get_input_embeddings().weight
    for key, value in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key
