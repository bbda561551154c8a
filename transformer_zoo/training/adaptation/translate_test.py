"""Translate-test, the baseline the book asks for: translate the Urdu task's test paragraphs to English with our own
Urdu-to-English model, and classify them with an English model fine-tuned on the English version of the task. If it
beats the adapted models on native Urdu, the adaptation adds nothing a translator does not.

The translator must never have trained on those paragraphs: `urdu-translation-ur-en`
(transformer_zoo/training/data/urdu_translation.py) leaves out every paragraph the Urdu and English tasks hold out,
and the translation experiment (`scripts/reproduce.py --experiment translation --save-models DIR`) saves its model
as DIR/urdu-translation-ur-en. The test set here is the same label-stratified subset of the Urdu test split that the
native check tests on (`--downstream_test_examples`, `--data_seed`); training and validation are the English task's.
Translations are cached in the output folder, with the quality they reached against the English translations of
the same hadith (chrF and BLEU, sacreBLEU), which the report gives beside the accuracy. The model folder's
translation_decoding.json (written by --save-models) says how to decode it: a paragraph longer than the length the
model trained on is translated in pieces of whole sentences, as in the translation study's own test decode.
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets

from ..data.builtin_corpora import _hadith_records
from .data import stratified_subset


def translated_test_corpus(args, urdu: datasets.DatasetDict, english: datasets.DatasetDict, model_dir: str,
                           cache: Path) -> tuple[datasets.DatasetDict, dict]:
    """The English task's train and validation splits, and as test the Urdu task's test paragraphs in English; the
    translations' quality against the paragraphs' own English translations. `cache` (JSON lines) holds the
    translations: read when it was written by the same translator for the same paragraphs, else written."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from ... import translation

    test = stratified_subset(urdu["test"], args.downstream_test_examples, args.data_seed)
    sources = test.select_columns(["text"])[:]["text"]
    if not Path(model_dir, "config.json").is_file():
        raise ValueError(f"--downstream_translate_test {model_dir!r} is not a saved model folder: train one with "
                         "`python scripts/reproduce.py --experiment translation --save-models DIR` and pass "
                         "DIR/urdu-translation-ur-en.")
    # The folder's own decoding (the study's test decode): paragraphs longer than the model's training length go in
    # pieces of whole sentences. A cache made another way is not reused.
    decoding = translation.load_decoding_defaults(model_dir)
    made_as = {"model": str(model_dir), "decoding": decoding.get("names")}
    cache = Path(cache)
    cached = [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()] if cache.exists() else []
    long_sources = {}
    if [row["source"] for row in cached] == sources and \
            all({key: row.get(key) for key in made_as} == made_as for row in cached):
        hypotheses = [row["translation"] for row in cached]
        long_sources = cached[0].get("long_sources", {}) if cached else {}
    else:
        model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        hypotheses = translation.translate(
            model, tokenizer, sources, num_beams=4, length_penalty=0.6, batch_size=16, progress=args.progress_bar,
            max_source_tokens=decoding.get("max_source_tokens"), split_sentences=decoding.get("split_sentences"),
            counts=long_sources)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text("".join(json.dumps({**made_as, "source": s, "translation": h, "long_sources": long_sources},
                                            ensure_ascii=False) + "\n" for s, h in zip(sources, hypotheses)),
                         encoding="utf-8")
    english_of = {record["ur"]: record["en"] for record in _hadith_records() if record["ur"] and record["en"]}
    scored = [(h, english_of[s]) for s, h in zip(sources, hypotheses) if s in english_of]
    quality = translation.corpus_scores([h for h, _ in scored], [r for _, r in scored]) if scored else {}
    quality = {key: quality[key] for key in ("bleu", "chrf", "bleu_signature", "chrf_signature") if key in quality}
    quality.update(model=str(model_dir), paragraphs=len(sources), with_reference=len(scored),
                   decoding=decoding.get("names"), long_sources=long_sources)
    translated = datasets.Dataset.from_dict({"text": hypotheses, "label": test.select_columns(["label"])[:]["label"]},
                                            features=english["test"].features)
    corpus = datasets.DatasetDict(train=english["train"], validation=english["validation"], test=translated)
    return corpus, quality
