"""LoRA adapters trained on zoo models export as PEFT adapters for the exported native models
(transformer_zoo.export.adapters): after saving both and loading them back with PEFT on the native class, the outputs
equal the zoo PeftModel's (1e-5, float32, eval mode)."""

import json
import os
import subprocess
import sys

import pytest
import torch
import transformers
from peft import AutoPeftModelForCausalLM, IA3Config, LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer

from native_references import ATOL, BART_LIKE, MARIAN_LIKE, small
from transformer_zoo import (
    ZooDecoderForCausalLM,
    ZooDecoderForSequenceClassification,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTForImageClassification,
)
from transformer_zoo.convert import compare_outputs, random_inputs
from transformer_zoo.export import UnsupportedExportError
from transformer_zoo.export.adapters import export_lora_adapter, save_adapter_export


SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "export_checkpoint.py")


def adapted(zoo_class, config, **lora):
    """A zoo model with a LoRA adapter whose B matrices are not zero (init_lora_weights=False), as after training."""
    torch.manual_seed(0)
    model = zoo_class(config).eval()
    lora.setdefault("r", 4)
    lora.setdefault("lora_alpha", 8)
    return get_peft_model(model, LoraConfig(init_lora_weights=False, **lora)).eval()


CASES = {
    "GPT-2 q,v,o,mlp (fused c_attn)": (
        ZooDecoderForCausalLM, small("decoder", "tiny"),
        dict(target_modules=["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"], task_type="CAUSAL_LM"),
    ),
    "GPT-2 q,k,v of unequal ranks, rsLoRA": (
        ZooDecoderForCausalLM, small("decoder", "tiny"),
        dict(target_modules=["q_proj", "k_proj", "v_proj"], use_rslora=True, rank_pattern={"k_proj": 2},
             alpha_pattern={"v_proj": 3}, task_type="CAUSAL_LM"),
    ),
    "GPT-2 classifier, some layers": (
        ZooDecoderForSequenceClassification, small("decoder", "tiny", num_labels=3),
        dict(target_modules=["k_proj"], layers_to_transform=[1], task_type="SEQ_CLS"),
    ),
    "Llama all linears": (
        ZooDecoderForCausalLM, small("decoder", "tiny-llama"),
        dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
             task_type="CAUSAL_LM"),
    ),
    "Llama classifier": (
        ZooDecoderForSequenceClassification, small("decoder", "tiny-llama", num_labels=3),
        dict(target_modules=["q_proj", "v_proj"], task_type="SEQ_CLS"),
    ),
    "BERT classifier + embeddings": (
        ZooEncoderForSequenceClassification, small("encoder", "tiny", num_labels=3),
        dict(target_modules=["q_proj", "v_proj", "o_proj", "embed_tokens"], task_type="SEQ_CLS"),
    ),
    "BERT token classifier": (
        ZooEncoderForTokenClassification, small("encoder", "tiny", num_labels=3),
        dict(target_modules=["up_proj", "down_proj"], modules_to_save=["classifier"], task_type="TOKEN_CLS"),
    ),
    "ViT classifier": (
        ZooViTForImageClassification, small("vit", "tiny", num_labels=3),
        dict(target_modules=["q_proj", "v_proj"], modules_to_save=["classifier"]),
    ),
    "Marian": (
        ZooSeq2SeqForConditionalGeneration, small("seq2seq", "tiny", **MARIAN_LIKE),
        dict(target_modules=["q_proj", "v_proj", "o_proj", "up_proj"], task_type="SEQ_2_SEQ_LM"),
    ),
    "BART": (
        ZooSeq2SeqForConditionalGeneration, small("seq2seq", "tiny", **BART_LIKE),
        dict(target_modules=["q_proj", "k_proj", "v_proj"], task_type="SEQ_2_SEQ_LM"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lora_adapter_exports_with_equal_outputs(case, tmp_path):
    zoo_class, config, lora = CASES[case]
    zoo_peft = adapted(zoo_class, config, **lora)
    native_base, native_peft = export_lora_adapter(zoo_peft)
    base_dir, adapter_dir = save_adapter_export(native_base, native_peft, str(tmp_path))
    saved = json.loads(open(os.path.join(adapter_dir, "adapter_config.json")).read())
    assert saved["peft_type"] == "LORA" and saved["base_model_name_or_path"] == os.path.abspath(base_dir)
    adapted_modules = lambda model: sum(isinstance(m, LoraLayer) for m in model.modules())  # noqa: E731
    native_class = getattr(transformers, type(native_base).__name__)
    reloaded = PeftModel.from_pretrained(native_class.from_pretrained(base_dir), adapter_dir).eval()
    inputs = random_inputs(native_base)
    differences = compare_outputs(reloaded, zoo_peft, inputs)
    assert max(differences.values()) <= ATOL, differences
    if type(native_base).__name__.startswith("GPT2") and "q_proj" in str(lora):
        assert adapted_modules(reloaded) < adapted_modules(zoo_peft)  # q, k, v adapters fused into c_attn's
    else:
        assert adapted_modules(reloaded) == adapted_modules(zoo_peft)
    # The adapter really changes the outputs (a mapping that lost it would compare the bases only).
    with torch.no_grad(), zoo_peft.disable_adapter():
        base_out = zoo_peft(**inputs)
    field = "logits"
    assert (getattr(base_out, field) - getattr(reloaded(**inputs), field)).abs().max() > 1e-3


def test_gpt2_fused_adapter_has_the_block_structure():
    zoo_peft = adapted(ZooDecoderForCausalLM, small("decoder", "tiny"), target_modules=["q_proj", "v_proj"],
                       task_type="CAUSAL_LM")
    _, native_peft = export_lora_adapter(zoo_peft)
    layer = native_peft.base_model.model.transformer.h[0].attn.c_attn
    b = layer.lora_B["default"].weight
    hidden = b.shape[0] // 3
    assert layer.r["default"] == 8 and layer.scaling["default"] == 1.0
    assert not b[hidden : 2 * hidden].any()  # no adapter on k: its rows of B are zero
    assert not b[:hidden, 4:].any() and not b[2 * hidden :, :4].any()  # block-diagonal


def test_auto_peft_model_loads_the_exported_adapter(tmp_path):
    zoo_peft = adapted(ZooDecoderForCausalLM, small("decoder", "tiny-llama"), target_modules=["q_proj", "v_proj"],
                       task_type="CAUSAL_LM")
    _, adapter_dir = save_adapter_export(*export_lora_adapter(zoo_peft), str(tmp_path))
    model = AutoPeftModelForCausalLM.from_pretrained(adapter_dir).eval()
    assert type(model.get_base_model()).__name__ == "LlamaForCausalLM"
    differences = compare_outputs(model, zoo_peft, random_inputs(model.get_base_model()))
    assert max(differences.values()) <= ATOL


@pytest.mark.parametrize("settings, fragment", [
    (dict(use_dora=True), "use_dora"),
    (dict(bias="lora_only"), "bias='lora_only'"),
])
def test_lora_options_the_export_cannot_map_are_refused(settings, fragment):
    zoo_peft = adapted(ZooDecoderForCausalLM, small("decoder", "tiny-llama"), target_modules=["q_proj"],
                       task_type="CAUSAL_LM", **settings)
    with pytest.raises(UnsupportedExportError, match=fragment.replace("(", r"\(")):
        export_lora_adapter(zoo_peft)


def test_other_peft_methods_are_refused():
    model = ZooDecoderForCausalLM(small("decoder", "tiny-llama"))
    ia3 = get_peft_model(model, IA3Config(target_modules=["k_proj", "down_proj"], feedforward_modules=["down_proj"],
                                          task_type="CAUSAL_LM"))
    with pytest.raises(UnsupportedExportError, match="Only LoRA adapters export"):
        export_lora_adapter(ia3)


def test_cli_exports_an_adapter_folder(tmp_path):
    torch.manual_seed(0)
    base = ZooDecoderForCausalLM(small("decoder", "tiny"))
    base.save_pretrained(tmp_path / "zoo")
    zoo_peft = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                                               task_type="CAUSAL_LM"))
    zoo_peft.save_pretrained(tmp_path / "lora")
    done = subprocess.run([sys.executable, SCRIPT, tmp_path / "lora", tmp_path / "out", "--base", tmp_path / "zoo",
                           "--base-name", "me/gpt2-export"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PEFT adapter on GPT2LMHeadModel" in done.stdout
    saved = json.loads((tmp_path / "out" / "adapter" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == "me/gpt2-export"
    missing_base = subprocess.run([sys.executable, SCRIPT, tmp_path / "lora", tmp_path / "out2"],
                                  capture_output=True, text=True, timeout=300)
    assert missing_base.returncode == 2 and "--base" in missing_base.stderr
