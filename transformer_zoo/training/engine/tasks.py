"""Pieces the pretraining and fine-tuning recipes share: collators that keep a resumed run bit-exact, prediction
steps and metric functions per task (through `transformer_zoo.metrics`), logging set-up, and writing a run's output
folder (model, tokenizer or image processor, model card, curves, results).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from ..data.objectives import IGNORE_INDEX, denoising_collator, sentinel_token_ids
from ..reports.records import (
    CURVES_FILE,
    METRICS_FILE,
    plot_training_curves,
    write_model_card,
)
from .loop import BEST_MODEL_DIR

logger = hf_logging.get_logger(__name__)


# ================================================================================================ logging
def setup_logging(is_main_process: bool) -> None:
    """INFO from transformer-zoo on the main process, warnings only elsewhere; transformers stays at WARNING."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr, level=logging.WARNING)
    logging.getLogger("transformer_zoo").setLevel(logging.INFO if is_main_process else logging.WARNING)
    hf_logging.set_verbosity_warning()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# ================================================================================================ collators
class ResumableDenoisingCollator:
    """Span-corruption batches whose randomness comes from the global torch RNG, one seed drawn per batch.

    `DenoisingCollator(seed=None)` seeds a private numpy generator once and keeps it; no checkpoint can capture
    that generator, so a resumed run would corrupt different spans. Drawing each batch's seed from torch's RNG
    (saved in every checkpoint) makes the batches after a resume identical to those of an uninterrupted run.
    """

    def __init__(self, tokenizer, *, noise_density: float = 0.15, mean_span_length: float = 3.0):
        self.tokenizer = tokenizer
        self.options = dict(noise_density=noise_density, mean_span_length=mean_span_length)
        self.sentinel_ids = sentinel_token_ids(tokenizer)

    def __call__(self, examples):
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
        collator = denoising_collator(self.tokenizer, seed=seed, sentinel_ids=self.sentinel_ids, **self.options)
        return collator(examples)


class PaddingCollator:
    """Pads tokenized examples (lists of ids) with the tokenizer; labels are per example (sequence
    classification) or per token, padded with -100 (token classification, seq2seq targets).
    """

    def __init__(self, tokenizer):
        if tokenizer.pad_token_id is None:
            raise ValueError("Batches need padding but the tokenizer has no pad token; set tokenizer.pad_token.")
        self.tokenizer = tokenizer

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        labels = [example["labels"] for example in examples] if "labels" in examples[0] else None
        features = [{key: value for key, value in example.items() if key != "labels"} for example in examples]
        batch = dict(self.tokenizer.pad(features, padding=True, return_tensors="pt"))
        if labels is not None:
            if isinstance(labels[0], (list, tuple)):
                # Token labels (aligned with input_ids) follow the padded inputs; seq2seq targets have their own.
                aligned = all(len(label) == len(f["input_ids"]) for label, f in zip(labels, features))
                length = batch["input_ids"].shape[1] if aligned else max(len(label) for label in labels)
                padded = torch.full((len(labels), length), IGNORE_INDEX, dtype=torch.long)
                for row, label in enumerate(labels):
                    padded[row, : len(label)] = torch.as_tensor(label, dtype=torch.long)
                batch["labels"] = padded
            else:
                batch["labels"] = torch.as_tensor(labels, dtype=torch.long)
        return batch


def image_collate(examples: list[dict]) -> dict[str, torch.Tensor]:
    """Stacks examples produced by `features.image_classification_transform` (via `with_transform`)."""
    return {
        "pixel_values": torch.stack([example["pixel_values"] for example in examples]),
        "labels": torch.stack([torch.as_tensor(example["labels"]) for example in examples]),
    }


# ================================================================================================ predictions
def _logits(model, batch: dict, outputs=None) -> torch.Tensor:
    """The logits of `batch`: from `outputs` of a forward with labels (a classifier's logits do not depend on them),
    else from a forward without labels."""
    if outputs is not None:
        return outputs.logits
    return model(**{k: v for k, v in batch.items() if k != "labels"}).logits


def classification_predict_step(model, batch: dict, outputs=None) -> dict[str, list]:
    logits = _logits(model, batch, outputs)
    return {"predictions": logits.argmax(-1).tolist(), "references": batch["labels"].tolist()}


classification_predict_step.reuses_outputs = True


def token_classification_predict_step(model, batch: dict, outputs=None) -> dict[str, list]:
    logits = _logits(model, batch, outputs)
    predictions, references = [], []
    for predicted, labels in zip(logits.argmax(-1).tolist(), batch["labels"].tolist()):
        keep = [i for i, label in enumerate(labels) if label != IGNORE_INDEX]
        predictions.append([predicted[i] for i in keep])
        references.append([labels[i] for i in keep])
    return {"predictions": predictions, "references": references}


token_classification_predict_step.reuses_outputs = True


def generation_predict_step(tokenizer, *, max_new_tokens: int = 64, num_beams: int = 1) -> Callable:
    """Greedy or beam generation from the source; predictions and references as detokenized strings."""

    def predict(model, batch: dict) -> dict[str, list]:
        generated = model.generate(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=max_new_tokens,
            num_beams=num_beams, do_sample=False,
        )
        labels = batch["labels"].masked_fill(batch["labels"] == IGNORE_INDEX, tokenizer.pad_token_id)
        return {
            "predictions": [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)],
            "references": [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)],
        }

    return predict


# ================================================================================================ metrics
def classification_metrics() -> Callable[[dict], dict]:
    """Accuracy and macro-F1 (local evaluate modules)."""
    from ...metrics import load_metric

    accuracy, f1 = load_metric("accuracy"), load_metric("f1")

    def compute(outputs: dict) -> dict:
        predictions, references = outputs["predictions"], outputs["references"]
        return {
            "accuracy": float(accuracy.compute(predictions=predictions, references=references)["accuracy"]),
            "macro_f1": float(f1.compute(predictions=predictions, references=references, average="macro")["f1"]),
        }

    compute.names = ("accuracy", "macro_f1")  # what it returns, so a chosen metric can be checked before training
    return compute


def seqeval_metrics(label_names: Sequence[str]) -> Callable[[dict], dict]:
    """Entity-level precision/recall/F1 (seqeval) on tag names."""
    from ...metrics import load_metric

    seqeval = load_metric("seqeval")

    def compute(outputs: dict) -> dict:
        predictions = [[label_names[i] for i in row] for row in outputs["predictions"]]
        references = [[label_names[i] for i in row] for row in outputs["references"]]
        scores = seqeval.compute(predictions=predictions, references=references)
        return {"seqeval_precision": scores["overall_precision"], "seqeval_recall": scores["overall_recall"],
                "seqeval_f1": scores["overall_f1"], "token_accuracy": scores["overall_accuracy"]}

    compute.names = ("seqeval_precision", "seqeval_recall", "seqeval_f1", "token_accuracy")
    return compute


def translation_metrics(references: list[str] | None = None) -> Callable[[dict], dict]:
    """sacreBLEU and chrF of the detokenized predictions against `references`, the raw target texts in dataset order
    (as sacreBLEU is meant to be used: scores against labels decoded back from token ids depend on the tokenizer's
    round trip, and on --max_length where it cut the targets); without them, against the decoded labels."""
    from ...metrics import load_metric

    bleu, chrf = load_metric("sacrebleu"), load_metric("chrf")

    def compute(outputs: dict) -> dict:
        predictions = outputs["predictions"]
        if references is not None and len(references) != len(predictions):
            raise ValueError(f"{len(references)} references for {len(predictions)} translations: pass the raw "
                             "targets of exactly the evaluated examples, in their order.")
        references_used = references if references is not None else outputs["references"]
        return {"bleu": float(bleu.compute(predictions=predictions, references=references_used)["score"]),
                "chrf": float(chrf.compute(predictions=predictions, references=references_used)["score"])}

    compute.names = ("bleu", "chrf")
    return compute


# ================================================================================================ outputs
def write_results(output_dir: str | os.PathLike, results: dict) -> Path:
    # Written aside and renamed: a run killed mid-write leaves no half file that a --resume would read as finished.
    path = Path(output_dir) / "results.json"
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path


def finish_output_folder(output_dir: str | os.PathLike, card: dict, *, title: str, best_model_saved: bool) -> None:
    """The README.md model card and the PNG of the curves (main process only).

    `best_model_saved`: the model saved at the top level is the best validation model, so the loop's best-model/
    copy is redundant and removed (checkpoints/ stays for --resume).
    """
    output_dir = Path(output_dir)
    if best_model_saved:
        shutil.rmtree(output_dir / BEST_MODEL_DIR, ignore_errors=True)
    if (output_dir / METRICS_FILE).exists():
        plot_training_curves(output_dir / METRICS_FILE, output_dir / CURVES_FILE, title=title)
    run_args = _read_json(output_dir / "run_args.json")
    results = _read_json(output_dir / "results.json")
    card = dict(card)
    # The count the run trained (printed at its start): after a LoRA merge every weight of the saved model is a
    # plain parameter again, so counting the saved model would report a different number.
    if results.get("trainable_parameters") is not None:
        card.setdefault("trainable_parameters", results["trainable_parameters"])
    if run_args.get("hub_license"):
        card.setdefault("license", run_args["hub_license"])
    if run_args.get("hub_language"):
        card.setdefault("language", run_args["hub_language"])
    write_model_card(output_dir, card)
    if (output_dir / "adapter" / "adapter_config.json").is_file():
        # PEFT leaves a README of "More Information Needed"; the adapters get this run's card instead. Their base
        # is the zoo-format model they were attached to, which has no Hub id yet: publish.py asks for --base_model.
        write_model_card(output_dir / "adapter", {**card, "adapter": True, "base_model": None})
    if run_args.get("push_to_hub"):
        push_output_folder(output_dir, run_args)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def push_output_folder(output_dir: Path, run_args: dict) -> str:
    """--push_to_hub: publish the finished folder with the checks of scripts/publish.py."""
    from ...publishing import PublishError, publish

    repo_id = run_args["push_to_hub"]
    if len(run_args.get("seeds") or []) > 1:
        repo_id = f"{repo_id}-seed-{run_args['seed']}"
    try:
        return publish(output_dir, repo_id, private=bool(run_args.get("hub_private")))
    except PublishError as error:
        raise ValueError(f"--push_to_hub {repo_id}: {error}\nThe trained model is saved in {output_dir}; publish "
                         "it later with scripts/publish.py.") from None
