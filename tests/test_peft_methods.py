"""Every PEFT method trains, saves and reloads through AutoPeftModelFor* on the decoder and the encoder-decoder, with
no `target_modules` given (issue 11, point 7): `import transformer_zoo` registers the zoo model types in PEFT's
default-target mappings (transformer_zoo/peft_defaults.py).

Prefix tuning hands its prefix over as `past_key_values`; before the zoo accepted that name it was swallowed by
**kwargs and the prefix silently ignored.
"""

import pytest
import torch
from peft import (
    AdaLoraConfig,
    AutoPeftModelForCausalLM,
    AutoPeftModelForSeq2SeqLM,
    IA3Config,
    LoHaConfig,
    LoKrConfig,
    LoraConfig,
    OFTConfig,
    PrefixTuningConfig,
    PromptEncoderConfig,
    PromptTuningConfig,
    TaskType,
    get_peft_model,
)

from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooEncoderForSequenceClassification,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTConfig,
    ZooViTForImageClassification,
)


FAMILIES = {
    "decoder": (ZooDecoderConfig, ZooDecoderForCausalLM, TaskType.CAUSAL_LM, AutoPeftModelForCausalLM),
    "seq2seq": (ZooSeq2SeqConfig, ZooSeq2SeqForConditionalGeneration, TaskType.SEQ_2_SEQ_LM, AutoPeftModelForSeq2SeqLM),
}
METHODS = {
    "lora": lambda task: LoraConfig(task_type=task),
    "ia3": lambda task: IA3Config(task_type=task),
    "loha": lambda task: LoHaConfig(task_type=task),
    "lokr": lambda task: LoKrConfig(task_type=task),
    "adalora": lambda task: AdaLoraConfig(task_type=task, total_step=4),
    "oft": lambda task: OFTConfig(task_type=task, r=0, oft_block_size=16),
    "prompt_tuning": lambda task: PromptTuningConfig(task_type=task, num_virtual_tokens=3),
    "p_tuning": lambda task: PromptEncoderConfig(task_type=task, num_virtual_tokens=3, encoder_hidden_size=16),
    "prefix_tuning": lambda task: PrefixTuningConfig(task_type=task, num_virtual_tokens=3),
}


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_peft_method_trains_saves_and_reloads(family, method, tmp_path):
    config_class, model_class, task, auto_class = FAMILIES[family]
    torch.manual_seed(0)
    # Dropout off so that outputs before and after reload are comparable exactly.
    config = config_class.from_preset("tiny", embedding_dropout=0.0, attention_dropout=0.0, hidden_dropout=0.0)
    model_class(config).save_pretrained(tmp_path / "base")
    base = model_class.from_pretrained(tmp_path / "base")
    model = get_peft_model(base, METHODS[method](task))
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and len(trainable) < len(list(model.parameters()))

    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 1000, (2, 8), generator=generator)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    inputs = {"input_ids": ids, "attention_mask": batch["attention_mask"]}
    if family == "seq2seq":
        inputs["decoder_input_ids"] = ids[:, :5]
    with torch.no_grad(), model.disable_adapter():
        base_logits = model(**inputs).logits
    optimizer = torch.optim.AdamW(trainable, lr=0.05)
    losses = []
    for step in range(2):
        loss = model(**batch).loss
        loss.backward()
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in trainable), "no gradient reached the adapter"
        optimizer.step()
        if method == "adalora":
            model.base_model.update_and_allocate(step)
        optimizer.zero_grad()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))

    model.eval()
    # Compared without labels: an AdaLoRA adapter loaded for inference fails in PEFT 0.21's own loss code when given
    # labels (AdaLoraModel.forward reads `trainable_adapter_name`, which inference mode never sets).
    with torch.no_grad():
        adapted = model(**inputs).logits
    # Prompt tuning and P-tuning put virtual tokens before a decoder's input: compare the real positions.
    real = adapted[:, -base_logits.shape[1]:]
    assert (real - base_logits).abs().max() > 1e-4, "the adapter does not change the output"
    model.save_pretrained(tmp_path / "adapter")
    reloaded = auto_class.from_pretrained(tmp_path / "adapter").eval()
    with torch.no_grad():
        # Bit-exact, except AdaLoRA: its saved rank_pattern slices the ranks it masked away, so the reloaded
        # adapter sums fewer terms in another order. That is float32 rounding: logits here are below 5 in size, and
        # 1e-6 is a few ulps (1 ulp at 4 is 4.8e-7), while a wrong rank or mapping moves logits by > 1e-3.
        tolerance = 1e-6 if method == "adalora" else 0.0
        torch.testing.assert_close(reloaded(**inputs).logits, adapted, atol=tolerance, rtol=0)
        generated = reloaded.generate(
            input_ids=ids, attention_mask=batch["attention_mask"], max_new_tokens=3, do_sample=False
        )
    assert generated.shape[0] == 2


@pytest.mark.parametrize("preset", ["tiny", "tiny-llama"])
def test_prefix_tuning_generation_uses_the_prefix(preset):
    """Greedy generate with a prefix equals greedy decoding by repeated full forwards (which pass the prefix as
    `past_key_values` every time), and differs from the model without the prefix."""
    torch.manual_seed(0)
    config = ZooDecoderConfig.from_preset(preset, embedding_dropout=0.0, attention_dropout=0.0, hidden_dropout=0.0)
    model = get_peft_model(ZooDecoderForCausalLM(config), PrefixTuningConfig(task_type="CAUSAL_LM",
                                                                             num_virtual_tokens=4)).eval()
    with torch.no_grad():
        for parameter in model.prompt_encoder.parameters():
            parameter.normal_(0, 3)  # a prefix strong enough to change the continuation
        ids = torch.randint(3, 1000, (1, 6), generator=torch.Generator().manual_seed(2))
        generated = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=5,
                                   do_sample=False)
        with model.disable_adapter():
            plain = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=5,
                                   do_sample=False)
        current = ids
        for _ in range(5):
            logits = model(input_ids=current, attention_mask=torch.ones_like(current)).logits[:, -1]
            current = torch.cat([current, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated, current)
    assert not torch.equal(generated, plain)


@pytest.mark.parametrize("family", ["encoder", "vit"])
def test_lora_without_targets_works_on_the_other_families(family):
    if family == "encoder":
        config = ZooEncoderConfig.from_preset("tiny", num_labels=3)
        model, inputs = ZooEncoderForSequenceClassification(config), {"input_ids": torch.randint(3, 1000, (2, 6))}
    else:
        config = ZooViTConfig.from_preset("tiny", num_labels=3)
        model = ZooViTForImageClassification(config)
        inputs = {"pixel_values": torch.randn(2, config.num_channels, config.image_size, config.image_size)}
    peft_model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS" if family == "encoder" else None))
    targeted = sorted({name.rsplit(".", 1)[-1] for name in peft_model.base_model.targeted_module_names})
    assert targeted == ["q_proj", "v_proj"]
    loss = peft_model(**inputs, labels=torch.tensor([0, 2])).loss
    loss.backward()
