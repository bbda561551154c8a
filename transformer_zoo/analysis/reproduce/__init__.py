"""Reproduce classic transformer claims as small, seeded experiments that anyone can rerun on a laptop CPU.

One module per experiment, each defining `EXPERIMENT` (settings per preset, run, markdown, plot), behind one runner
(`runner.run_experiment`, `runner.write_report`); adding an experiment is a new module and a line in
`runner.EXPERIMENT_MODULES`. Every report has a markdown table, a PNG plot and a JSON of the raw numbers, and its
verdicts are computed from the numbers by a stated criterion.

* `copy_task`: an encoder-decoder learns to copy digit sequences; positions, heads and warmup.
* `extrapolation`: a character-level decoder trained on short windows, evaluated on longer ones, with sinusoidal,
  learned, RoPE and ALiBi positions.
* `norm`: pre-norm against post-norm blocks as depth grows.
* `translation`: the original Transformer on real parallel text (English-Spanish Bible, English-Urdu Quran), test
  BLEU and chrF against copy and retrieval baselines (`translation_setup` holds the settings and data), and the
  rows of Vaswani et al.'s table 3 (`translation_table3`: rows, criteria fixed before the runs, report), as a study
  that resumes where it was cut off.

Every run is deterministic for its seed on a given machine and thread count: the seed fixes the initial weights
(`torch.manual_seed` before the model is built), the training batches and the evaluation set.
"""

from .characters import (CharacterCorpus, character_model, encode_characters, evaluation_windows, per_position_loss,
                         random_windows, shakespeare_characters, unigram_loss)
from .common import (IGNORE_INDEX, Experiment, RunResult, clearly_better, data_rng, format_mean_std, mean_std,
                     train_steps, verdict)
from .copy_task import (COPY_ARMS, COPY_BOS, COPY_EOS, COPY_FIRST_DIGIT, COPY_PAD, COPY_VOCAB_SIZE, CopySettings,
                        copy_batch, copy_claims, copy_evaluate, copy_model, run_copy)
from .extrapolation import EXTRAPOLATION_TOLERANCE, ExtrapolationSettings, extrapolation_claims, run_extrapolation
from .norm import NormSettings, norm_claims, run_norm
from .runner import EXPERIMENTS, PRESETS, REGISTRY, TITLES, Preset, run_experiment, write_index, write_report
from .translation import default_model_claims, run_translation
from .translation_runs import finished_runs, settings_from_dict
from .translation_setup import ModelShape, TranslationSettings
from .translation_table3 import CLAIMS, TABLE3_ROWS, Claim, Criterion, decide, row_shape, table3_claims

__all__ = [
    "CLAIMS", "COPY_ARMS", "COPY_BOS", "COPY_EOS", "COPY_FIRST_DIGIT", "COPY_PAD", "COPY_VOCAB_SIZE",
    "CharacterCorpus", "Claim", "CopySettings", "Criterion", "EXPERIMENTS", "EXTRAPOLATION_TOLERANCE", "Experiment",
    "ExtrapolationSettings", "IGNORE_INDEX", "ModelShape", "NormSettings", "PRESETS", "Preset", "REGISTRY",
    "RunResult", "TABLE3_ROWS", "TITLES", "TranslationSettings", "character_model", "clearly_better", "copy_batch",
    "copy_claims", "copy_evaluate", "copy_model", "data_rng", "decide", "default_model_claims", "encode_characters",
    "evaluation_windows", "extrapolation_claims", "finished_runs", "format_mean_std", "mean_std", "norm_claims",
    "per_position_loss", "random_windows", "row_shape", "run_copy", "run_experiment", "run_extrapolation",
    "run_norm", "run_translation", "settings_from_dict", "shakespeare_characters", "table3_claims", "train_steps",
    "unigram_loss", "verdict", "write_index", "write_report",
]
