"""Command-line plumbing shared by the recipes: argparse with a help text for every flag, a YAML/JSON `--config`
file whose values become defaults (so flags on the command line override it), and the shared training flags.

    accelerate launch recipes/pretrain.py --config recipes/configs/pretrain-decoder-shakespeare.yaml --max_steps 50

A config file is a mapping from flag names (without the dashes; `-` and `_` are interchangeable) to values.
Unknown keys are refused with the closest flag name, and values are checked like command-line values (types,
choices), so a typo in a file fails as early as one on the command line.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import sys
from pathlib import Path

from transformers.utils import logging

from .config import TrainingConfig
from .optim import SCHEDULES

logger = logging.get_logger(__name__)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each flag's default, and keeps the description's line breaks (for examples)."""

    def _get_help_string(self, action):
        # A help that already says what the default is (e.g. "default: the preset's", where the stored default is
        # None) would otherwise end with a second, misleading "(default: None)".
        if "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def str2bool(value) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {value!r}")


def auto_or_bool(value) -> bool | str:
    if str(value).strip().lower() == "auto":
        return "auto"
    return str2bool(value)


def comma_list(value) -> list[str] | None:
    """'a,b , c' -> ['a', 'b', 'c']; a YAML list passes through; '' -> None."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [str(item).strip() for item in value if str(item).strip()]
    items = [item.strip() for item in str(value).split(",") if item.strip()]
    return items or None


def int_list(value) -> list[int]:
    """'1,2,3' -> [1, 2, 3] (e.g. --seeds)."""
    try:
        return [int(item) for item in comma_list(value) or []]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from error


def seed_list(value) -> list[int]:
    """'1,2,3' -> [1, 2, 3] for --seeds: distinct, non-negative (numpy's seeding refuses negatives). A repeated seed
    would repeat a run exactly and shrink the reported spread, so it is refused rather than run twice."""
    seeds = int_list(value)
    repeated = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"seed {', '.join(map(str, repeated))} is listed more than once in {value!r}; "
                                         "a repeated seed repeats the same run (the spread over seeds would shrink)")
    if any(seed < 0 or seed >= SEED_LIMIT for seed in seeds):
        raise argparse.ArgumentTypeError(f"seeds must be integers in 0..2**32 - 1, got {value!r}")
    return seeds


def optional_int(value):
    if value is None or str(value).strip().lower() in ("", "none", "null"):
        return None
    return int(value)


def optional_float(value):
    if value is None or str(value).strip().lower() in ("", "none", "null"):
        return None
    return float(value)


def load_config_file(path: str | os.PathLike) -> dict:
    """A YAML (.yaml/.yml) or JSON (.json) mapping of flag names to values."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file.")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError as error:
            where = getattr(error, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ValueError(f"--config {path} is not valid YAML{at}: {problem}.") from None
    elif path.suffix.lower() == ".json":
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"--config {path} is not valid JSON at line {error.lineno}, column {error.colno}: "
                             f"{error.msg}.") from None
    else:
        raise ValueError(f"--config {path}: use a .yaml, .yml or .json file.")
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values, got {type(values).__name__}.")
    return {str(key).replace("-", "_"): value for key, value in values.items()}


# flag -> (lower bound, whether the bound itself is allowed, what the flag counts); None values mean "off".
FLAG_RANGES = {
    "logging_steps": (1, True, "optimiser steps between log lines"),
    "eval_steps": (1, True, "optimiser steps between evaluations; 'none' = at the end only"),
    "save_steps": (1, True, "optimiser steps between checkpoints; 'none' = never"),
    "max_steps": (1, True, "optimiser steps; 'none' = --num_epochs passes"),
    "num_epochs": (0, False, "passes over the training split"),
    "per_device_batch_size": (1, True, "examples per process per forward pass"),
    "eval_batch_size": (1, True, "examples per evaluation batch"),
    "max_tokens_per_batch": (1, True, "padded tokens per process per forward pass; 'none' = batch by examples"),
    "gradient_accumulation_steps": (1, True, "forward/backward passes per optimiser step"),
    "save_total_limit": (0, True, "checkpoints kept; 0 keeps all"),
    "learning_rate": (0, False, "the peak learning rate"),
    "warmup_steps": (0, True, "linear warmup steps"),
    "weight_decay": (0, True, "AdamW weight decay"),
    "early_stopping_patience": (1, True, "evaluations without improvement; 'none' = never stop early"),
    "seed": (0, True, "random seed"),
    "adam_epsilon": (0, False, "AdamW epsilon; at 0 a weight whose gradient is 0 divides zero by zero"),
    # clip_grad_norm_ with a negative norm multiplies every gradient by a negative factor: training would ascend.
    "max_grad_norm": (0, True, "gradient-norm clipping; 'none' or 0 = no clipping"),
    # Recipe-specific flags (checked where a recipe has them).
    "context_length": (1, True, "tokens per packed training sequence"),
    "max_length": (1, True, "tokens per input after truncation"),
    "vocab_size": (1, True, "tokens in the trained tokenizer"),
    "num_labels": (1, True, "classes (1 = regression)"),
    "max_examples": (1, True, "examples kept; 'none' = all"),
    "eval_max_examples": (1, True, "evaluation examples; 'none' = all"),
    "generation_examples": (0, True, "examples evaluated by generation"),
    "num_beams": (1, True, "beam size"),
    "image_size": (1, True, "image side in pixels"),
    "num_channels": (1, True, "image channels"),
    "mean_span_length": (0, False, "mean corrupted span length"),
    "lora_rank": (1, True, "LoRA rank r"),
    "lora_alpha": (0, False, "LoRA scaling alpha"),
    "max_train_paragraphs": (1, True, "training paragraphs; 'none' = all"),
    "downstream_batch_size": (1, True, "downstream fine-tuning batch size"),
    "downstream_max_length": (1, True, "downstream tokens per input"),
    "downstream_epochs": (0, False, "downstream fine-tuning epochs"),
    "downstream_learning_rate": (0, False, "downstream learning rate"),
    "downstream_eval_steps": (1, True, "downstream steps between evaluations"),
    "downstream_patience": (1, True, "downstream evaluations without improvement"),
    "downstream_train_examples": (1, True, "downstream training examples; 'none' = all"),
    "downstream_validation_examples": (1, True, "downstream validation examples; 'none' = all"),
    "downstream_test_examples": (1, True, "downstream test examples; 'none' = all"),
    "sample_tokens": (1, True, "tokens in the sample generated after pretraining"),
    "data_seed": (0, True, "seed of the corpus split"),
    "eval_paragraphs": (1, True, "held-out paragraphs"),
    "fertility_threshold": (0, False, "pieces per word"),
    "urdu_vocab_size": (1, True, "pieces in the Urdu tokenizer"),
    "max_new_tokens": (1, True, "new vocabulary pieces; 'none' = every missing piece"),
    "min_frequency": (1, True, "minimum count of a piece"),
    "head_warmup_steps": (0, True, "steps fitting only the new head"),
    "bpb_sentences": (1, True, "held-out sentences scored per language"),
    "curve_sentences": (1, True, "validation sentences scored at each evaluation"),
    "bpb_max_tokens": (1, True, "tokens of the longest scored sentence"),
}
# numpy's generator (seeded with the rest by accelerate's set_seed) takes seeds below 2**32.
SEED_LIMIT = 2**32
# Probabilities and fractions: flag -> whether 0 itself is allowed (1 never is).
FRACTION_FLAGS = {"warmup_ratio": True, "label_smoothing": True, "validation_fraction": True, "test_fraction": True,
                  "lora_dropout": True, "mlm_probability": False, "noise_density": False, "dropout": True,
                  "attention_dropout": True, "downstream_attention_dropout": True, "adam_beta1": True,
                  "adam_beta2": True}


class RecipeArgumentParser(argparse.ArgumentParser):
    """argparse with `--config FILE` and checks that every flag documents itself."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.add_argument(
            "--config", default=None, metavar="FILE",
            help="YAML or JSON file of flag values (keys are flag names without dashes); flags given on the command "
            "line override it. Presets live in recipes/configs/.",
        )

    def undocumented_flags(self) -> list[str]:
        """Flags without a help text (a test keeps this empty: every recipe flag explains itself in --help)."""
        return [action.option_strings[0] for action in self._actions
                if action.option_strings and not (action.help or "").strip()]

    def _actions_by_dest(self) -> dict[str, argparse.Action]:
        return {action.dest: action for action in self._actions if action.dest not in ("help", "config")}

    def parse_args(self, args=None, namespace=None):  # noqa: D102 - argparse's signature
        argv = list(sys.argv[1:] if args is None else args)
        # Before --config turns its values into defaults (set_defaults: they would stay for a later parse too):
        # check_flags_apply compares with these.
        if not hasattr(self, "builtin_defaults"):
            self.builtin_defaults = {action.dest: action.default for action in self._actions}
        self.config_values = (None, {})
        pre = argparse.ArgumentParser(add_help=False)
        pre.add_argument("--config", default=None)
        known, _ = pre.parse_known_args(argv)
        if known.config:
            try:
                values = load_config_file(known.config)
            except (OSError, ValueError) as error:
                self.error(str(error))
            actions = self._actions_by_dest()
            unknown = [key for key in values if key not in actions]
            if unknown:
                hints = []
                for key in unknown:
                    close = difflib.get_close_matches(key, list(actions), n=1)
                    hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
                self.error(f"--config {known.config}: unknown keys {', '.join(hints)}.")
            converted = {}
            for key, value in values.items():
                converted[key] = self._convert_file_value(actions[key], value, known.config)
            self.set_defaults(**converted)
            self.config_values = (known.config, converted)
        namespace = super().parse_args(argv, namespace)
        self._check_choices(namespace)
        self._check_ranges(namespace)
        self._check_push_to_hub(namespace)
        if hasattr(namespace, "output_dir") and hasattr(namespace, "overwrite_output_dir"):
            from .output_dir import check_output_dir

            try:
                check_output_dir(namespace.output_dir, resume=namespace.resume,
                                 overwrite=namespace.overwrite_output_dir)
            except ValueError as error:
                self.error(str(error))
        return namespace

    def _check_ranges(self, namespace) -> None:
        # Values argparse's types accept but that make no run (e.g. --logging_steps 0 divided by zero, and a
        # negative --max_steps used to mean "every step"): refused before any work, naming the flag.
        for action in self._actions:
            value = getattr(namespace, action.dest, None)
            if isinstance(value, float) and math.isnan(value):  # NaN passes every comparison below
                self.error(f"{action.option_strings[0]} is nan: give a number.")
        for name, (low, inclusive, meaning) in FLAG_RANGES.items():
            value = getattr(namespace, name, None)
            if value is None or isinstance(value, bool):
                continue
            if value < low or (not inclusive and value == low):
                bound = f">= {low}" if inclusive else f"> {low}"
                self.error(f"--{name} {value}: must be {bound} ({meaning}).")
        for name in ("seed", "data_seed"):
            if (getattr(namespace, name, None) or 0) >= SEED_LIMIT:
                self.error(f"--{name} {getattr(namespace, name)}: must be below 2**32 ({SEED_LIMIT}).")
        for name, zero_allowed in FRACTION_FLAGS.items():
            value = getattr(namespace, name, None)
            if value is not None and not (0 <= value < 1 if zero_allowed else 0 < value < 1):
                self.error(f"--{name} {value}: must be in {'[0' if zero_allowed else '(0'}, 1).")

    def _check_push_to_hub(self, namespace) -> None:
        # Fail before training, not after it: the repo id's form and a token must be there (no network here).
        repo_id = getattr(namespace, "push_to_hub", None)
        if not repo_id:
            return
        from huggingface_hub import get_token
        from huggingface_hub.errors import HFValidationError
        from huggingface_hub.utils import validate_repo_id

        try:
            validate_repo_id(repo_id)
        except HFValidationError as error:
            self.error(f"--push_to_hub {repo_id!r}: {error}")
        if repo_id.count("/") != 1:
            self.error(f"--push_to_hub {repo_id!r}: give the repo as namespace/name, e.g. alice/tiny-gpt.")
        if not get_token():
            self.error("--push_to_hub needs a Hugging Face token with write access: log in with `hf auth login` or "
                       "set HF_TOKEN, then run again.")

    def _convert_file_value(self, action: argparse.Action, value, source: str):
        # Values from the file go through the flag's own type so that "1e-4" (a string in YAML) becomes a float,
        # and a bad value fails here, naming the file.
        if value is None or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            return value
        if isinstance(action, argparse.BooleanOptionalAction):
            try:
                return str2bool(value)
            except argparse.ArgumentTypeError as error:
                self.error(f"--config {source}: {action.dest}: {error}")
        if action.type is None or isinstance(value, list) and action.type not in (comma_list, int_list, seed_list):
            return value
        try:
            return action.type(value)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
            self.error(f"--config {source}: {action.dest}={value!r}: {error}")

    def _check_choices(self, namespace) -> None:
        # argparse checks choices for command-line values only, not for defaults (which is where file values go).
        for action in self._actions:
            value = getattr(namespace, action.dest, None)
            if action.choices is not None and value is not None and value not in action.choices:
                self.error(f"argument {action.option_strings[0]}: invalid choice: {value!r} "
                           f"(choose from {', '.join(map(str, action.choices))})")


# ================================================================================================ shared flags
def add_training_arguments(parser: argparse.ArgumentParser, **defaults) -> None:
    """The loop's flags (TrainingConfig), with recipe-specific defaults given as keyword arguments."""
    d = {field: getattr(TrainingConfig, field) for field in TrainingConfig.__dataclass_fields__
         if hasattr(TrainingConfig, field)}
    d.update(defaults)

    run = parser.add_argument_group("run and output")
    run.add_argument("--output_dir", default=d["output_dir"],
                     help="Folder for the trained model, tokenizer, model card, metrics.jsonl, curves and checkpoints.")
    run.add_argument("--seed", type=int, default=d["seed"],
                     help="Random seed for initialisation, data order, masking and dropout.")
    run.add_argument("--resume", nargs="?", const=True, default=False,
                     help="Continue from the newest checkpoint in --output_dir/checkpoints (or from the checkpoint "
                     "folder given). Use the same flags as the interrupted run.")
    run.add_argument("--overwrite_output_dir", action="store_true",
                     help="Start afresh in an --output_dir that already holds files, removing them first. Without "
                     "it (and without --resume) such a folder is refused, so no earlier run is lost by accident.")
    run.add_argument("--report_to", default=d["report_to"],
                     help="Accelerate trackers: 'auto' (TensorBoard when installed), 'none', or a comma list "
                     "(tensorboard, wandb, ...). metrics.jsonl is always written.")
    run.add_argument("--logging_steps", type=int, default=d["logging_steps"],
                     help="Write the mean training loss, learning rate and throughput every N optimiser steps.")
    run.add_argument("--eval_steps", type=optional_int, default=d["eval_steps"],
                     help="Evaluate on the validation split every N steps (always at the end; 'none' = end only).")
    run.add_argument("--save_steps", type=optional_int, default=d["save_steps"],
                     help="Write a resumable checkpoint every N steps ('none' = never).")
    run.add_argument("--save_total_limit", type=int, default=d["save_total_limit"],
                     help="Keep only the newest K checkpoints (0 keeps all).")
    run.add_argument("--progress_bar", type=str2bool, default=d["progress_bar"],
                     help="Show tqdm progress bars (live loss, learning rate, throughput).")
    run.add_argument("--cpu", action="store_true", default=d["cpu"],
                     help="Train on the CPU even where a GPU is available.")
    run.add_argument("--compile", type=auto_or_bool, default=d["compile"],
                     help="torch.compile the training loss, model included (identical mathematics; graphs that fail "
                     "to compile run eagerly after a warning). 'auto' (default): on GPUs only. On this project's CPU "
                     "the compiled step was no faster than the zoo's eager one (docs/speed.md); true turns it "
                     "on anyway.")
    run.add_argument("--cpu_threads", default="auto",
                     help="CPU threads per process: 'auto' = the available cores divided by the processes on this "
                     "machine (`accelerate launch` alone would leave 1 thread on a machine without GPU), a number, "
                     "or 'none' to keep OMP_NUM_THREADS.")
    hub = parser.add_argument_group("publishing (see scripts/publish.py)")
    hub.add_argument("--push_to_hub", default=None, metavar="USER/NAME",
                     help="At the end of the run, check and publish the output folder to this Hub repo "
                     "(transformer_zoo.publishing, as scripts/publish.py does; the token comes from HF_TOKEN or "
                     "`hf auth login`). With several --seeds, seed N publishes to USER/NAME-seed-N.")
    hub.add_argument("--hub_private", type=str2bool, default=False,
                     help="With --push_to_hub: create the repo private.")
    hub.add_argument("--hub_license", default=None,
                     help="Hub licence id for the model card (e.g. apache-2.0, mit); default apache-2.0, the "
                     "licence of transformer-zoo. Check that the starting weights' and the data's licences allow "
                     "it (the card states both).")
    hub.add_argument("--hub_language", type=comma_list, default=None,
                     help="Language codes of the training text for the card's metadata (e.g. en or en,ur). Built-in "
                     "corpora know theirs; a run on your own text data needs this to publish.")

    length = parser.add_argument_group("length and batches")
    length.add_argument("--max_steps", type=optional_int, default=d["max_steps"],
                        help="Optimiser steps to train ('none' = --num_epochs passes over the training split).")
    length.add_argument("--num_epochs", type=float, default=d["num_epochs"],
                        help="Passes over the training split when --max_steps is none (fractions allowed).")
    length.add_argument("--per_device_batch_size", type=int, default=d["per_device_batch_size"],
                        help="Examples (sequences or images) per process per forward pass.")
    length.add_argument("--max_tokens_per_batch", type=optional_int, default=d.get("max_tokens_per_batch"),
                        help="Token-count batches instead (Vaswani et al. 5.1): as many examples per process per "
                        "forward pass as fit this many padded tokens (longer of input and labels x examples), "
                        "grouped by length. Text data only; 'none' (default) = --per_device_batch_size examples.")
    length.add_argument("--gradient_accumulation_steps", type=int, default=d["gradient_accumulation_steps"],
                        help="Forward/backward passes per optimiser step. Global batch = per-device batch x "
                        "processes x this.")
    length.add_argument("--eval_batch_size", type=optional_int, default=d["eval_batch_size"],
                        help="Examples per evaluation batch ('none' = --per_device_batch_size).")

    optim = parser.add_argument_group("optimiser and schedule")
    optim.add_argument("--learning_rate", type=float, default=d["learning_rate"],
                       help="Peak learning rate (reached at the end of warmup).")
    optim.add_argument("--weight_decay", type=float, default=d["weight_decay"],
                       help="AdamW decoupled weight decay; never applied to biases and normalisation weights.")
    optim.add_argument("--adam_beta1", type=float, default=d["adam_beta1"], help="AdamW beta1.")
    optim.add_argument("--adam_beta2", type=float, default=d["adam_beta2"],
                       help="AdamW beta2 (Vaswani et al. used 0.98).")
    optim.add_argument("--adam_epsilon", type=float, default=d["adam_epsilon"],
                       help="AdamW epsilon (Vaswani et al. used 1e-9).")
    optim.add_argument("--lr_scheduler", choices=list(SCHEDULES), default=d["lr_scheduler"],
                       help="Decay after warmup: linear to 0, cosine to 0, inverse_sqrt (Vaswani et al.), constant.")
    optim.add_argument("--warmup_steps", type=optional_int, default=d["warmup_steps"],
                       help="Linear warmup steps ('none' = --warmup_ratio of the run).")
    optim.add_argument("--warmup_ratio", type=float, default=d["warmup_ratio"],
                       help="Warmup as a fraction of the run, used when --warmup_steps is none.")
    optim.add_argument("--max_grad_norm", type=optional_float, default=d["max_grad_norm"],
                       help="Clip the global gradient norm to this ('none' or 0 = no clipping).")
    optim.add_argument("--label_smoothing", type=float, default=d["label_smoothing"],
                       help="Label smoothing of the cross-entropy (Vaswani et al. used 0.1).")
    optim.add_argument("--mixed_precision", choices=["no", "bf16", "fp16"], default=d["mixed_precision"],
                       help="Autocast precision via Accelerate (fp16 adds a gradient scaler; bf16 works on CPUs).")


def check_early_stopping_metric(metric: str, reported, evaluation: str) -> None:
    """Refuse an --early_stopping_metric the validation evaluation never reports, before any training step (the loop
    would only find out at its first evaluation), with the closest name it does report."""
    reported = sorted(reported)
    if metric not in reported:
        close = difflib.get_close_matches(metric, reported, n=1)
        raise ValueError(f"--early_stopping_metric {metric!r} is not reported by the {evaluation} evaluation"
                         + (f"; did you mean {close[0]!r}?" if close else ".")
                         + f" It reports: {', '.join(reported)}.")


def add_early_stopping_arguments(parser: argparse.ArgumentParser, *, metric: str = "eval_loss") -> None:
    group = parser.add_argument_group("early stopping and best model")
    group.add_argument("--early_stopping_metric", default=metric,
                       help="Validation metric that picks the best checkpoint (eval_loss, perplexity, accuracy, "
                       "macro_f1, seqeval_f1, ...); a metric the evaluation does not report is refused before "
                       "training.")
    group.add_argument("--greater_is_better", type=str2bool, default=None,
                       help="Whether a larger metric is better (default: false for losses and perplexity, else "
                       "true).")
    group.add_argument("--early_stopping_patience", type=optional_int, default=None,
                       help="Stop after this many evaluations without improvement ('none' = train to the end).")
    group.add_argument("--load_best_at_end", type=str2bool, default=True,
                       help="Reload the best validation model before the final test evaluation and save.")


def training_config_from_args(args: argparse.Namespace, **overrides) -> TrainingConfig:
    values = {**vars(args), **overrides}
    return TrainingConfig.from_dict(values)


def save_arguments(args: argparse.Namespace, path: str | os.PathLike) -> None:
    """The resolved flags as JSON, loadable again with --config (to repeat or inspect a run)."""
    values = {key: value for key, value in vars(args).items()
              if key not in ("config", "resume", "overwrite_output_dir")}
    Path(path).write_text(json.dumps(values, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")


def check_flags_apply(parser: argparse.ArgumentParser, args: argparse.Namespace, scopes, defaults=None) -> None:
    """Refuse a flag the run would ignore: set (on the command line or in --config) to other than its built-in default
    while the setting it belongs to is off, e.g. --lora_rank with --mode full. A value that comes from --config is
    logged instead: a config file may hold the settings of several modes, one of which the command line picks.
    `scopes`: (flags, applies(args), where they apply); flags may be a function of the parser. `defaults`: the
    values that count as not set (the parser's built-in defaults unless given)."""
    defaults = defaults or getattr(parser, "builtin_defaults", None) or \
        {action.dest: action.default for action in parser._actions}
    config_file, config_values = getattr(parser, "config_values", (None, {}))
    for flags, applies, where in scopes:
        if applies(args):
            continue
        for flag in flags(parser) if callable(flags) else flags:
            value = getattr(args, flag, None)
            if flag not in defaults or value == defaults[flag]:
                continue
            if flag in config_values and value == config_values[flag]:
                logger.warning(f"--config {config_file} sets {flag}={value!r}, which this run ignores: it applies "
                               f"only {where}.")
                continue
            raise ValueError(f"--{flag} {value!r} would be ignored: it applies only {where}. Leave it out, or "
                             "change that setting.")


def run_recipe(parser: argparse.ArgumentParser, args: argparse.Namespace, run, *checks):
    """A recipe's entry point: the `checks` (callables on args, before any work), then `run(args)` holding the output
    folder (see output_dir.claim_output_dir). Anticipated failures end in one line and exit 2; Ctrl-C/SIGTERM after
    a checkpoint exits 130/143 with the resume hint; anything else is a bug and keeps its traceback."""
    from .output_dir import RunStopped, claim_output_dir

    try:
        for check in checks:
            check(args)
        with claim_output_dir(args.output_dir, overwrite=args.overwrite_output_dir):
            return run(args)
    except RunStopped as stopped:
        parser.exit(130 if getattr(stopped, "signal_name", None) == "SIGINT" else 143, f"{parser.prog}: {stopped}\n")
    except (ValueError, OSError) as error:  # bad input, unreadable or damaged files
        parser.exit(2, f"{parser.prog}: error: {error}\n")
