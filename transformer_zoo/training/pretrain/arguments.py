"""The pretraining recipe's command line: the families it trains and their default objectives and corpora,
every flag (`build_parser`), and the checks that run on the flags before any work (`check_overrides`,
`FLAG_SCOPES`). Split from recipe.py, which runs what these describe."""

from __future__ import annotations

from dataclasses import dataclass

from ... import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTConfig,
    ZooViTForImageClassification,
)
from ..data.corpora import BUILTIN_CORPORA
from ..data.tokenization import (
    check_tokenizer_source,
)
from ..engine.cli import (
    RecipeArgumentParser,
    add_early_stopping_arguments,
    add_training_arguments,
    comma_list,
    optional_int,
    str2bool,
)


# The first line of --help (the recipe module's docstring starts with the same sentence).
RECIPE_SUMMARY = "Pretraining recipe: a zoo model from scratch on a corpus, with the classic objective of its family."


@dataclass(frozen=True)
class Family:
    config_class: type
    model_class: type
    auto_class: str
    objective: str  # the default objective
    tokenizer_kind: str | None
    dataset: str  # the default corpus
    pipeline_tag: str


FAMILIES = {
    "decoder": Family(ZooDecoderConfig, ZooDecoderForCausalLM, "AutoModelForCausalLM", "clm", "bpe", "shakespeare",
                      "text-generation"),
    "encoder": Family(ZooEncoderConfig, ZooEncoderForMaskedLM, "AutoModelForMaskedLM", "mlm", "wordpiece",
                      "shakespeare", "fill-mask"),
    "seq2seq": Family(ZooSeq2SeqConfig, ZooSeq2SeqForConditionalGeneration, "AutoModelForSeq2SeqLM", "translation",
                      "bpe", "hadith-en-ur", "translation"),
    "vit": Family(ZooViTConfig, ZooViTForImageClassification, "AutoModelForImageClassification", "image", None,
                  "digits", "image-classification"),
}
OBJECTIVES = {
    "clm": "causal language modelling (next token)",
    "mlm": "masked language modelling (BERT: 15 %, 80/10/10)",
    "translation": "sequence-to-sequence translation of source into target",
    "denoising": "sequence-to-sequence span-corruption denoising (T5)",
    "image": "image classification",
}
FAMILY_OBJECTIVES = {"decoder": {"clm"}, "encoder": {"mlm"}, "seq2seq": {"translation", "denoising"},
                     "vit": {"image"}}
# The model of a run that leaves --model_overrides out: 4 layers of width 256 (~5 M parameters with a vocabulary of
# 8,000), except where FAMILY_DEFAULTS says otherwise.
DEFAULT_MODEL_OVERRIDES = "hidden_size=256,num_hidden_layers=4,num_attention_heads=4,intermediate_size=1024"
# What a flag left unset means, per family. The decoder's values (the no-argument run) were chosen by measurement:
# benchmarks/time_to_quality.py on Shakespeare against nanoGPT, a sweep of width, vocabulary and learning rate
# (benchmarks/results/time_to_quality_sweep_cpu.json, docs/time-to-quality.md): in a few-minute CPU budget a narrow
# model (width 128) with the 8,000-piece vocabulary at a high learning rate beat widths 192 and 256 and vocabularies
# of 2,000 and 4,000 (more text per token and per step). The other families keep the values their configs in
# recipes/configs/ use, which no benchmark has yet compared against these. None of this changes a model class's own
# defaults.
FAMILY_DEFAULTS = {
    "decoder": {"model_overrides": "hidden_size=128,num_hidden_layers=4,num_attention_heads=4,intermediate_size=512",
                "learning_rate": 3e-3},
}
COMMON_DEFAULTS = {"model_overrides": DEFAULT_MODEL_OVERRIDES, "learning_rate": 1e-3}


def family_default(family: str, flag: str):
    """The value flag `flag` takes when it is left unset for --family `family`."""
    return FAMILY_DEFAULTS.get(family, {}).get(flag, COMMON_DEFAULTS[flag])


def apply_family_defaults(args) -> None:
    """Fill the flags left unset (None) with their family's defaults (FAMILY_DEFAULTS, else COMMON_DEFAULTS); a value
    from the command line or --config is kept as given."""
    for flag in COMMON_DEFAULTS:
        if getattr(args, flag) is None:
            setattr(args, flag, family_default(args.family, flag))


def _defaults_help(flag: str, describe=str) -> str:
    # The help names each family's default, generated from the tables above so that it cannot drift.
    special = ", ".join(f"{family} {describe(values[flag])}" for family, values in FAMILY_DEFAULTS.items()
                        if flag in values)
    return f"default: {special}; other families {describe(COMMON_DEFAULTS[flag])}"


def parse_overrides(value) -> dict:
    """'hidden_size=256,position_embedding_type=rope' (or a YAML mapping) -> typed dict of config fields."""
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return dict(value)
    import yaml

    overrides = {}
    for item in comma_list(value) or []:
        if "=" not in item:
            raise ValueError(f"--model_overrides item {item!r} is not key=value (e.g. hidden_size=256,"
                             "position_embedding_type=rope).")
        key, raw = item.split("=", 1)
        try:
            overrides[key.strip()] = yaml.safe_load(raw.strip())  # 256 -> int, 0.1 -> float, true -> bool, rope -> str
        except yaml.YAMLError as error:
            raise ValueError(f"--model_overrides item {item!r}: the value does not parse ({error}).") from None
    return overrides


def build_parser() -> RecipeArgumentParser:
    parser = RecipeArgumentParser(
        prog="pretrain.py",
        description=RECIPE_SUMMARY + "\n\nExamples:\n"
        "  accelerate launch recipes/pretrain.py                      # small decoder on Shakespeare\n"
        "  accelerate launch recipes/pretrain.py --family encoder      # masked LM\n"
        "  accelerate launch recipes/pretrain.py --config recipes/configs/pretrain-seq2seq-denoising.yaml\n"
        "  accelerate launch --multi_gpu --num_processes 2 recipes/pretrain.py --max_steps 100\n\n"
        "Built-in corpora: " + ", ".join(BUILTIN_CORPORA) + ".",
    )
    model = parser.add_argument_group("model")
    model.add_argument("--family", choices=list(FAMILIES), default="decoder",
                       help="Model family: decoder (GPT-style causal LM), encoder (BERT-style masked LM), seq2seq "
                       "(Vaswani et al. encoder-decoder), vit (Vision Transformer).")
    model.add_argument("--preset", default="tiny",
                       help="Named config preset of the family (e.g. tiny, gpt2, bert-base, transformer-base, "
                       "vit-small); docs/reference/configuration.md lists every preset.")
    model.add_argument("--model_overrides", default=None,
                       help="Config fields over the preset, as key=value,key=value (YAML: a mapping), e.g. "
                       "'position_embedding_type=rope,norm_position=pre'. '' keeps the preset as it is ("
                       + _defaults_help("model_overrides", lambda value: f"'{value}'") + ").")
    model.add_argument("--dropout", type=float, default=None,
                       help="Set embedding, attention and hidden dropout to this value (default: the preset's).")
    model.add_argument("--attention_dropout", type=float, default=None,
                       help="Set only the attention-probability dropout (after --dropout; default: the preset's). "
                       "Its cost on CPUs: with dropout > 0 PyTorch's SDPA leaves its fused kernel for the math path "
                       "(docs/speed.md has the measured step times); 0 makes training faster and changes the "
                       "regularisation.")
    model.add_argument("--dropout_sampler", choices=["pcg64", "torch"], default=None,
                       help="Where dropout masks are drawn on CPU: pcg64 (numpy's PCG64 seeded from torch's generator, several times faster) or torch (PyTorch's own masks, e.g. to replay a run made before pcg64). The same Bernoulli dropout either way; only the random stream differs (default: the model's config, pcg64 for new and converted models).")
    model.add_argument("--attn_implementation", default=None,
                       choices=["eager", "sdpa", "flex_attention", "flash_attention_2"],
                       help="Attention kernel (default: sdpa where supported).")

    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default=None,
                      help="Built-in corpus name, local file/folder (txt, json, jsonl, csv, parquet, image folder) "
                      "or Hub id. Default per family: shakespeare (decoder, encoder), hadith-en-ur (seq2seq), "
                      "digits (vit).")
    data.add_argument("--text_column", default=None, help="Column holding the text (default: detected).")
    data.add_argument("--encoding", default="utf-8",
                      help="Text encoding of local .txt/.csv/.tsv/.json/.jsonl files (e.g. latin-1, cp1252).")
    data.add_argument("--source_column", default=None, help="Source-side column of parallel text.")
    data.add_argument("--target_column", default=None, help="Target-side column of parallel text.")
    data.add_argument("--label_column", default=None, help="Class column of image data (default: label).")
    data.add_argument("--max_examples", type=optional_int, default=None,
                      help="Use a deterministic subset of this many examples (before splitting).")
    data.add_argument("--validation_fraction", type=float, default=0.05,
                      help="Share of the examples held out for validation (when the data has no such split).")
    data.add_argument("--test_fraction", type=float, default=0.05,
                      help="Share of the examples held out for the final test (when the data has no such split).")

    objective = parser.add_argument_group("objective")
    objective.add_argument("--objective", default="auto", choices=["auto", *OBJECTIVES],
                           help="Training objective; auto = clm (decoder), mlm (encoder), translation for parallel "
                           "data else denoising (seq2seq), image (vit).")
    objective.add_argument("--context_length", type=int, default=128,
                           help="Tokens per packed training sequence (clm, mlm, denoising), or the maximum source/"
                           "target length (translation).")
    objective.add_argument("--mlm_probability", type=float, default=0.15,
                           help="Share of tokens selected for masked-LM prediction.")
    objective.add_argument("--noise_density", type=float, default=0.15,
                           help="Share of tokens removed by span corruption (denoising).")
    objective.add_argument("--mean_span_length", type=float, default=3.0,
                           help="Mean length of corrupted spans (denoising).")
    objective.add_argument("--image_size", type=optional_int, default=None,
                           help="ViT input size in pixels (default: the preset's); images are resized to it.")
    objective.add_argument("--num_channels", type=optional_int, default=None,
                           help="ViT input channels: 1 (grayscale) or 3 (RGB; default: the preset's).")

    tokenizer = parser.add_argument_group("tokenizer (text families)")
    tokenizer.add_argument("--tokenizer", default=None,
                           help="Tokenizer folder or Hub id to use. Default: train one on the training split and "
                           "save it beside the model.")
    tokenizer.add_argument("--tokenizer_kind", default="auto", choices=["auto", "bpe", "wordpiece", "char"],
                           help="Kind of tokenizer to train: auto = wordpiece for the encoder, byte-level bpe "
                           "otherwise; char = one token per character (nanoGPT's choice for a small corpus: almost "
                           "no parameters in the embeddings; --vocab_size then caps the characters kept).")
    tokenizer.add_argument("--vocab_size", type=int, default=8000, help="Vocabulary size of a trained tokenizer.")
    tokenizer.add_argument("--lowercase", type=str2bool, default=False, help="Lowercase text in a trained tokenizer.")

    evaluation = parser.add_argument_group("evaluation")
    evaluation.add_argument("--eval_max_examples", type=optional_int, default=None,
                            help="Evaluate on at most this many validation/test examples (default: all).")
    evaluation.add_argument("--bits_per_byte_texts", type=optional_int, default=None,
                            help="Texts of each evaluation split scored in bits per UTF-8 byte at the end (the unit "
                                 "that compares across tokenizers; default: every text for a causal LM, the first 64 "
                                 "that fit for a masked LM, whose pseudo-likelihood costs a pass per token).")
    evaluation.add_argument("--generation_examples", type=int, default=64,
                            help="Test examples translated with generate() for BLEU/chrF (translation).")
    evaluation.add_argument("--num_beams", type=int, default=1, help="Beam size for translation evaluation.")
    evaluation.add_argument("--length_penalty", type=float, default=1.0,
                            help="Beam-search length penalty for translation evaluation (transformers' exponent: sum "
                            "log p / length ** penalty; Vaswani et al. use 0.6).")
    evaluation.add_argument("--average_last", type=int, default=1,
                            help="Translation/denoising: evaluate and save the average of the last N checkpoints "
                            "(Vaswani et al. 6.1: 5): the final weights and the N - 1 checkpoints before them, "
                            "taken every --save_steps; needs --save_total_limit >= N - 1 and --load_best_at_end "
                            "false. 1 = the final weights.")
    evaluation.add_argument("--sample_prompt", default="ROMEO:",
                            help="Prompt of the text sample generated after decoder pretraining ('' = none).")
    evaluation.add_argument("--sample_tokens", type=int, default=60, help="Length of that sample in tokens.")

    add_training_arguments(
        parser, output_dir="outputs/pretrain", max_steps=450, per_device_batch_size=16, learning_rate=None,
        warmup_steps=None, warmup_ratio=0.05, lr_scheduler="cosine", weight_decay=0.1, adam_beta2=0.95,
        logging_steps=10, eval_steps=150, save_steps=150, eval_batch_size=32,
    )
    for action in parser._actions:  # the loop's shared flag, with this recipe's per-family default
        if action.dest == "learning_rate":
            action.help = f"Peak learning rate, reached at the end of warmup ({_defaults_help('learning_rate')})."
    add_early_stopping_arguments(parser, metric="eval_loss")
    return parser


# ================================================================================================ building blocks
def check_preset(args) -> None:
    config_class = FAMILIES[args.family].config_class
    if args.preset not in config_class.PRESETS:
        raise ValueError(f"Unknown --preset {args.preset!r} for --family {args.family}; choose one of "
                         f"{', '.join(config_class.preset_names())}.")


def check_overrides(args) -> None:
    """--preset must name one of the family's presets, --model_overrides be key=value pairs naming fields of its
    config (with the config's own message for an unknown field), and --tokenizer exist: checked before any work
    (tokenizer training, data loading)."""
    config_class = FAMILIES[args.family].config_class
    check_preset(args)
    if args.tokenizer:
        check_tokenizer_source(args.tokenizer)
    overrides = parse_overrides(args.model_overrides)
    fields = set(config_class.__dataclass_fields__) | set(config_class.attribute_map)
    unknown = [key for key in overrides if key not in fields]
    if unknown:
        raise ValueError(f"--model_overrides: {config_class._unknown_fields_message(unknown, fields)}")


# Flags read only by one family's objective (check_flags_apply refuses them elsewhere).
FLAG_SCOPES = (
    (("mlm_probability",), lambda args: args.family == "encoder", "to --family encoder (masked LM)"),
    (("bits_per_byte_texts",), lambda args: args.family in ("decoder", "encoder"),
     "to the language models, --family decoder or encoder (their bits per byte)"),
    (("noise_density", "mean_span_length", "num_beams", "length_penalty", "generation_examples"),
     lambda args: args.family == "seq2seq", "to --family seq2seq (denoising; translation's test generations)"),
    (("image_size", "num_channels"), lambda args: args.family == "vit", "to --family vit"),
    (("sample_prompt", "sample_tokens"), lambda args: args.family == "decoder", "to --family decoder (its sample)"),
    (("tokenizer_kind", "vocab_size", "lowercase"), lambda args: args.family != "vit" and not args.tokenizer,
     "when the recipe trains the tokenizer (a text family, no --tokenizer)"),
)


