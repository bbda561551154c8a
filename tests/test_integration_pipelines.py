"""Integration: transformers pipelines on zoo models, and the ViT image processor.

Pipelines of transformers 5.x that fit the zoo (fill-mask, text-generation, text-classification,
token-classification, feature-extraction, image-classification) load saved folders (model + a tokenizer built
offline with `tokenizers`, or the image processor) through the Auto classes the plugin registers; their outputs are
checked against the model's own forward. A fresh interpreter without the plugin runs text-generation and
image-classification from the same folders with trust_remote_code=True.
"""

import json

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoImageProcessor, pipeline

import transformer_zoo as tz
from integration_helpers import build_tokenizer, run_fresh_python, tiny_config


SENTENCE_LABELS = {0: "negative", 1: "positive", 2: "neutral"}
TOKEN_LABELS = {0: "O", 1: "B-ANIMAL", 2: "I-ANIMAL"}
IMAGE_LABELS = {0: "cat", 1: "dog", 2: "bird"}
VIT_SIZE = 32  # the tiny ViT preset's image_size
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]  # not the defaults, so the configured ones must be used


def _image_processor():
    return tz.ZooViTImageProcessor(size={"height": VIT_SIZE, "width": VIT_SIZE}, image_mean=MEAN, image_std=STD)


def _random_uint8_image(height: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Saved folders: model + tokenizer (or image processor) for each pipeline."""
    root = tmp_path_factory.mktemp("zoo_pipelines")
    encoder_tokenizer, decoder_tokenizer = build_tokenizer(with_template=True), build_tokenizer(with_template=False)
    specs = {
        "fill-mask": (tz.ZooEncoderForMaskedLM, tiny_config("zoo_encoder"), encoder_tokenizer),
        "text-classification": (
            tz.ZooEncoderForSequenceClassification,
            tiny_config("zoo_encoder", id2label=SENTENCE_LABELS),
            encoder_tokenizer,
        ),
        "text-classification-decoder": (
            tz.ZooDecoderForSequenceClassification,
            tiny_config("zoo_decoder", id2label=SENTENCE_LABELS),
            decoder_tokenizer,
        ),
        "token-classification": (
            tz.ZooEncoderForTokenClassification,
            tiny_config("zoo_encoder", id2label=TOKEN_LABELS),
            encoder_tokenizer,
        ),
        "feature-extraction": (tz.ZooEncoderModel, tiny_config("zoo_encoder"), encoder_tokenizer),
        "feature-extraction-decoder": (tz.ZooDecoderModel, tiny_config("zoo_decoder"), decoder_tokenizer),
        "text-generation": (tz.ZooDecoderForCausalLM, tiny_config("zoo_decoder"), decoder_tokenizer),
        "image-classification": (
            tz.ZooViTForImageClassification,
            tiny_config("zoo_vit", id2label=IMAGE_LABELS),
            _image_processor(),
        ),
    }
    paths = {}
    for index, (name, (model_class, config, preprocessor)) in enumerate(specs.items()):
        torch.manual_seed(100 + index)
        model = model_class(config).eval()
        paths[name] = root / name
        model.save_pretrained(paths[name])
        preprocessor.save_pretrained(paths[name])
    return paths


def _load(folder, model_class):
    return model_class.from_pretrained(folder).eval()


# ================================================================================================ text pipelines
def test_fill_mask_pipeline(folders):
    fill = pipeline("fill-mask", model=str(folders["fill-mask"]), top_k=4)
    assert type(fill.model) is tz.ZooEncoderForMaskedLM
    text = "the cat [MASK] on the mat"
    candidates = fill(text)
    assert len(candidates) == 4
    assert {"score", "token", "token_str", "sequence"} <= set(candidates[0])
    scores = [c["score"] for c in candidates]
    assert scores == sorted(scores, reverse=True)
    for candidate in candidates:
        assert candidate["token_str"] == fill.tokenizer.convert_ids_to_tokens(candidate["token"])
        assert candidate["sequence"] == text.replace("[MASK]", candidate["token_str"])

    # The same candidates and probabilities as the model's own softmax at the masked position.
    encoded = fill.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = fill.model(**encoded).logits
    position = (encoded["input_ids"][0] == fill.tokenizer.mask_token_id).nonzero().item()
    probabilities = logits[0, position].softmax(-1)
    top = probabilities.topk(4)
    assert [c["token"] for c in candidates] == top.indices.tolist()
    np.testing.assert_allclose(scores, top.values.numpy(), atol=1e-6, rtol=0)

    batch = fill([text, "a [MASK] ran to the park"], top_k=2)
    assert [len(result) for result in batch] == [2, 2]


@pytest.mark.parametrize("name", ["text-classification", "text-classification-decoder"])
def test_text_classification_pipeline(folders, name):
    classify = pipeline("text-classification", model=str(folders[name]))
    model_class = tz.ZooEncoderForSequenceClassification if "decoder" not in name else (
        tz.ZooDecoderForSequenceClassification
    )
    assert type(classify.model) is model_class
    texts = ["the cat sat on the mat", "a dog ran"]
    all_scores = classify(texts, top_k=None)
    for text, scores in zip(texts, all_scores):
        assert {s["label"] for s in scores} == set(SENTENCE_LABELS.values())
        assert sum(s["score"] for s in scores) == pytest.approx(1.0, abs=1e-6)
        encoded = classify.tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            probabilities = classify.model(**encoded).logits[0].softmax(-1)
        for s in scores:
            label_id = {v: k for k, v in SENTENCE_LABELS.items()}[s["label"]]
            assert s["score"] == pytest.approx(probabilities[label_id].item(), abs=1e-6)
    best = classify(texts[0])
    assert len(best) == 1 and best[0]["label"] == max(all_scores[0], key=lambda s: s["score"])["label"]


def test_token_classification_pipeline(folders):
    tag = pipeline("token-classification", model=str(folders["token-classification"]), ignore_labels=[])
    assert type(tag.model) is tz.ZooEncoderForTokenClassification
    text = "the cat sat on the mat"
    entities = tag(text)
    words = text.split()
    assert [e["word"] for e in entities] == words
    assert [e["index"] for e in entities] == list(range(1, len(words) + 1))  # index 0 is [CLS]
    encoded = tag.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        probabilities = tag.model(**encoded).logits[0].softmax(-1)
    for entity in entities:
        assert entity["entity"] in TOKEN_LABELS.values()
        assert text[entity["start"] : entity["end"]] == entity["word"]
        token_probabilities = probabilities[entity["index"]]
        assert entity["entity"] == TOKEN_LABELS[int(token_probabilities.argmax())]
        assert float(entity["score"]) == pytest.approx(token_probabilities.max().item(), abs=1e-6)

    grouped = tag(text, aggregation_strategy="simple")
    assert grouped and all(group["entity_group"] in {"O", "ANIMAL"} for group in grouped)
    assert " ".join(group["word"] for group in grouped) == text


@pytest.mark.parametrize("name", ["feature-extraction", "feature-extraction-decoder"])
def test_feature_extraction_pipeline(folders, name):
    extract = pipeline("feature-extraction", model=str(folders[name]))
    assert type(extract.model) is (tz.ZooDecoderModel if "decoder" in name else tz.ZooEncoderModel)
    text = "the cat sat on the mat"
    features = np.asarray(extract(text))
    encoded = extract.tokenizer(text, return_tensors="pt")
    assert features.shape == (1, encoded["input_ids"].shape[1], 64)
    with torch.no_grad():
        expected = extract.model(**encoded).last_hidden_state
    np.testing.assert_allclose(features, expected.numpy(), atol=1e-6, rtol=0)
    as_tensor = extract(text, return_tensors=True)
    assert isinstance(as_tensor, torch.Tensor) and torch.equal(as_tensor, expected)


GENERATION_KWARGS = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)


def _reference_generation(folder, prompt):
    model = _load(folder, tz.ZooDecoderForCausalLM)
    tokenizer = build_tokenizer(with_template=False)
    input_ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    return model.generate(input_ids, **GENERATION_KWARGS)[0]


def test_text_generation_pipeline(folders):
    generate = pipeline("text-generation", model=str(folders["text-generation"]))
    assert type(generate.model) is tz.ZooDecoderForCausalLM
    prompt = "the cat sat"
    expected = _reference_generation(folders["text-generation"], prompt)
    [ids_result] = generate(prompt, return_tensors=True, **GENERATION_KWARGS)
    assert ids_result["generated_token_ids"] == expected.tolist()
    assert len(expected) == 3 + 6
    # The prompt followed by the decoded new tokens (a word-level vocabulary has no leading-space marker, so the
    # pipeline joins them without a space).
    [text_result] = generate(prompt, **GENERATION_KWARGS)
    assert text_result["generated_text"] == prompt + generate.tokenizer.decode(expected[3:])
    batch = generate([prompt, "a dog"], **GENERATION_KWARGS)
    assert [len(result) for result in batch] == [1, 1]


# ================================================================================================ images
def test_image_classification_pipeline(folders):
    classify = pipeline("image-classification", model=str(folders["image-classification"]))
    assert type(classify.model) is tz.ZooViTForImageClassification
    assert type(classify.image_processor) is tz.ZooViTImageProcessor
    image = Image.fromarray(_random_uint8_image(48, 40, seed=5))
    results = classify(image)
    assert len(results) == len(IMAGE_LABELS)  # top_k=5 capped at the number of labels
    assert {r["label"] for r in results} == set(IMAGE_LABELS.values())
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert sum(scores) == pytest.approx(1.0, abs=1e-6)
    with torch.no_grad():
        probabilities = classify.model(**_image_processor()(image, return_tensors="pt")).logits[0].softmax(-1)
    label_ids = {v: k for k, v in IMAGE_LABELS.items()}
    for r in results:
        assert r["score"] == pytest.approx(probabilities[label_ids[r["label"]]].item(), abs=1e-6)
    assert len(classify(image, top_k=1)) == 1


def _hand_processed(image_uint8: np.ndarray) -> np.ndarray:
    """(x / 255 - mean) / std after PIL's bilinear resize to the configured size, as [3, H, W]."""
    resized = np.asarray(Image.fromarray(image_uint8).resize((VIT_SIZE, VIT_SIZE), Image.BILINEAR), dtype=np.float64)
    normalised = (resized / 255.0 - np.array(MEAN)) / np.array(STD)
    return normalised.transpose(2, 0, 1)


def test_image_processor_matches_hand_computation():
    processor = _image_processor()
    first, second = _random_uint8_image(40, 50, seed=0), _random_uint8_image(37, 29, seed=1)
    cases = {
        "pil": (Image.fromarray(first), {}),
        "uint8 HWC": (first, {}),
        "float HWC 0..255": (first.astype(np.float32), {}),
        # Already in [0, 1]: the caller turns rescaling off, as with any transformers image processor.
        "float HWC 0..1": (first.astype(np.float32) / 255.0, {"do_rescale": False}),
    }
    expected = _hand_processed(first)
    for what, (image, kwargs) in cases.items():
        pixel_values = processor(image, return_tensors="pt", **kwargs)["pixel_values"]
        assert pixel_values.shape == (1, 3, VIT_SIZE, VIT_SIZE), what
        assert pixel_values.dtype == torch.float32, what
        np.testing.assert_allclose(pixel_values[0].numpy(), expected, atol=1e-6, rtol=0, err_msg=what)

    batch = processor([Image.fromarray(first), second], return_tensors="pt")["pixel_values"]
    assert batch.shape == (2, 3, VIT_SIZE, VIT_SIZE)
    np.testing.assert_allclose(batch[1].numpy(), _hand_processed(second), atol=1e-6, rtol=0)

    # The processor's output feeds the tiny ViT directly.
    model = tz.ZooViTForImageClassification(tiny_config("zoo_vit")).eval()
    with torch.no_grad():
        assert model(pixel_values=batch).logits.shape == (2, 2)


def test_image_processor_save_load_round_trip(tmp_path):
    processor = _image_processor()
    processor.save_pretrained(tmp_path)
    files = {path.name for path in tmp_path.iterdir()}
    assert {"preprocessor_config.json", "image_processing_zoo_vit.py"} <= files
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert saved["auto_map"] == {"AutoImageProcessor": "image_processing_zoo_vit.ZooViTImageProcessor"}
    assert saved["size"] == {"height": VIT_SIZE, "width": VIT_SIZE}
    assert saved["image_mean"] == MEAN and saved["image_std"] == STD

    image = Image.fromarray(_random_uint8_image(45, 61, seed=2))
    expected = processor(image, return_tensors="pt")["pixel_values"]
    for loaded in (tz.ZooViTImageProcessor.from_pretrained(tmp_path), AutoImageProcessor.from_pretrained(tmp_path)):
        assert type(loaded) is tz.ZooViTImageProcessor
        assert loaded.to_dict() == processor.to_dict()
        assert torch.equal(loaded(image, return_tensors="pt")["pixel_values"], expected)


# ================================================================================================ fresh process
FRESH_SCRIPT = r"""
import numpy as np
import transformers
from PIL import Image
from safetensors.torch import save_file

torch.set_num_threads(ARGS["threads"])
results = {}
generate = transformers.pipeline("text-generation", model=ARGS["generation_folder"], trust_remote_code=True)
results["generation_model_module"] = type(generate.model).__module__
[ids] = generate(ARGS["prompt"], return_tensors=True, **ARGS["generation_kwargs"])
results["generated_token_ids"] = ids["generated_token_ids"]
[text] = generate(ARGS["prompt"], **ARGS["generation_kwargs"])
results["generated_text"] = text["generated_text"]

image = Image.open(ARGS["image"])
processor = transformers.AutoImageProcessor.from_pretrained(ARGS["vit_folder"], trust_remote_code=True)
results["processor_module"] = type(processor).__module__
save_file({"pixel_values": processor(image, return_tensors="pt")["pixel_values"]}, "pixel_values.safetensors")
classify = transformers.pipeline("image-classification", model=ARGS["vit_folder"], trust_remote_code=True)
results["image_classification"] = classify(image)

try:
    transformers.AutoImageProcessor.from_pretrained(ARGS["vit_folder"])
    results["processor_refused"] = False
except ValueError as error:
    results["processor_refused"] = "trust_remote_code" in str(error)
try:
    transformers.pipeline("text-generation", model=ARGS["generation_folder"])
    results["pipeline_refused"] = False
except ValueError as error:
    results["pipeline_refused"] = "trust_remote_code" in str(error)
emit(results)
"""


def test_fresh_process_pipelines_and_processor_with_remote_code(folders, tmp_path):
    from safetensors.torch import load_file

    prompt = "the cat sat"
    image = Image.fromarray(_random_uint8_image(52, 44, seed=9))
    image.save(tmp_path / "image.png")
    results = run_fresh_python(
        FRESH_SCRIPT,
        cwd=tmp_path,
        args={
            "generation_folder": str(folders["text-generation"]),
            "vit_folder": str(folders["image-classification"]),
            "image": str(tmp_path / "image.png"),
            "prompt": prompt,
            "generation_kwargs": GENERATION_KWARGS,
            "threads": torch.get_num_threads(),
        },
    )
    assert results["generation_model_module"].startswith("transformers_modules.")
    assert results["processor_module"].startswith("transformers_modules.")
    assert results["processor_refused"] is True and results["pipeline_refused"] is True

    assert results["generated_token_ids"] == _reference_generation(folders["text-generation"], prompt).tolist()
    in_process = pipeline("text-generation", model=str(folders["text-generation"]))
    assert results["generated_text"] == in_process(prompt, **GENERATION_KWARGS)[0]["generated_text"]

    reloaded_image = Image.open(tmp_path / "image.png")
    expected_pixels = _image_processor()(reloaded_image, return_tensors="pt")["pixel_values"]
    assert torch.equal(load_file(tmp_path / "pixel_values.safetensors")["pixel_values"], expected_pixels)
    classify = pipeline("image-classification", model=str(folders["image-classification"]))
    assert results["image_classification"] == classify(reloaded_image)
