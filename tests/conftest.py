"""Shared fixtures for the numerical behaviour tests.

Every helper is exposed as a fixture (pytest discourages importing conftest), so a test asks for `make_config`,
`make_model`, `make_pair`, `pad_batch` or `random_ids` and calls it. The tiny presets are used throughout so that the
four test files together run in seconds.

Two conventions matter for correctness of the tests themselves:

* Models are built from a *deep copy* of the config. `PreTrainedModel._from_config(config, attn_implementation=...)`
  stores the implementation on the config object it was given, so two models built from one config object would
  silently share the last implementation and an eager-vs-sdpa comparison would compare sdpa with itself.
* The tiny configs use `initializer_range=0.1` instead of the default 0.02. With 0.02 the attention scores of a
  64-wide model are ~1e-3, attention is almost uniform and position schemes barely move the outputs, so masking,
  causality and permutation tests would have little power. 0.1 gives clearly non-uniform attention while keeping
  fp32 round-off well below the 1e-5 tolerances (the largest observed eager/sdpa gap is about a quarter of it).
"""

import copy
import os
from pathlib import Path

import pytest
import torch

from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooEncoderModel,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTConfig,
    ZooViTModel,
)


# Stand-ins for modules transformers' common tests import (tests/transformers_common/README.md), not tests.
collect_ignore_glob = ["transformers_common/*"]

TEST_INITIALIZER_RANGE = 0.1
SEED = 0

# Intra-op threads. The tiny models here gain nothing from parallel kernels. On the 2-core dev machine, idle, one
# thread was slightly faster (tiny seq2seq forward 3.6 ms vs 4.8 ms); with the cores shared by other jobs, two threads
# were ~45x slower (0.27 s vs 0.006 s) because of thread hand-off. Override with ZOO_TEST_NUM_THREADS=<n> (0 keeps
# torch's default).
_NUM_THREADS = int(os.environ.get("ZOO_TEST_NUM_THREADS", "1"))
if _NUM_THREADS > 0:
    torch.set_num_threads(_NUM_THREADS)

CONFIG_CLASSES = {
    "encoder": ZooEncoderConfig,
    "decoder": ZooDecoderConfig,
    "seq2seq": ZooSeq2SeqConfig,
    "vit": ZooViTConfig,
}
# The model class each family is tested through (the one whose output the tests compare).
MODEL_CLASSES = {
    "encoder": ZooEncoderModel,
    "decoder": ZooDecoderForCausalLM,
    "seq2seq": ZooSeq2SeqForConditionalGeneration,
    "vit": ZooViTModel,
}


def _make_config(family: str, preset: str = "tiny", **overrides):
    """A tiny config of `family` ("encoder", "decoder", "seq2seq", "vit") from `preset`, with overrides.

    Dropouts are left as configured: every model is put in eval mode, which disables them.
    """
    overrides.setdefault("initializer_range", TEST_INITIALIZER_RANGE)
    return CONFIG_CLASSES[family].from_preset(preset, **overrides)


def _make_model(family_or_class, config, attn_implementation: str = "eager", seed: int = SEED):
    """Build a model in eval mode with deterministic weights (torch seeded with `seed` just before init)."""
    model_class = MODEL_CLASSES[family_or_class] if isinstance(family_or_class, str) else family_or_class
    torch.manual_seed(seed)
    model = model_class._from_config(copy.deepcopy(config), attn_implementation=attn_implementation)
    assert model.config._attn_implementation == attn_implementation
    return model.eval()


def _make_pair(family_or_class, config, implementations=("eager", "sdpa")):
    """Models with identical weights but different attention implementations (the first one's state dict)."""
    models = [_make_model(family_or_class, config, implementation) for implementation in implementations]
    for model in models[1:]:
        model.load_state_dict(models[0].state_dict())
    return models


def _random_ids(batch: int, length: int, vocab_size: int = 1000, low: int = 3, seed: int = 1) -> torch.Tensor:
    """Token ids in [low, vocab_size): above the tiny presets' pad (0), bos (1) and eos (2) ids."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab_size, (batch, length), generator=generator)


def _pad_batch(sequences, side: str, pad_token_id: int = 0):
    """Pad a list of 1-D id tensors on `side` ("left" or "right"); returns (input_ids, attention_mask)."""
    length = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        span = slice(length - len(sequence), length) if side == "left" else slice(0, len(sequence))
        input_ids[row, span] = torch.as_tensor(sequence)
        attention_mask[row, span] = 1
    return input_ids, attention_mask


@pytest.fixture
def make_config():
    return _make_config


@pytest.fixture
def make_model():
    return _make_model


@pytest.fixture
def make_pair():
    return _make_pair


@pytest.fixture
def random_ids():
    return _random_ids


@pytest.fixture
def pad_batch():
    return _pad_batch


# The recipe and domain-adaptation tests' tiny data (tests/recipe_helpers.py, tests/adaptation_helpers.py); each
# fixture is built once per module that asks for it.
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Small local files of every shape the recipes read."""
    from recipe_helpers import write_recipe_data

    return write_recipe_data(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def english_wordpiece():
    """A WordPiece tokenizer trained on English only: every Urdu letter is unknown to it."""
    from adaptation_helpers import english_wordpiece_tokenizer

    return english_wordpiece_tokenizer()


@pytest.fixture
def fresh_accelerate_state():
    """Each recipe run is a program of its own (one Accelerator per process); reset the process-wide state so a
    run with another --mixed_precision can follow in this test process (the recipe test modules use it for every
    test: `pytestmark`)."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def pytest_terminal_summary(terminalreporter):
    """transformers' common tests (test_transformers_common.py): every skip counted by its reason, zoo families and
    the transformers control apart, so a reader sees what did not run and why."""
    import collections
    import json
    import re

    counts = {"zoo": collections.Counter(), "control": collections.Counter()}
    for report in terminalreporter.stats.get("skipped", []):
        if "test_transformers_common.py" not in report.nodeid:
            continue
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = re.sub(r"^Skipped: ", "", reason)
        # One line per reason, not per class: class names in a reason are folded to <class>.
        reason = re.sub(r"<class '[\w.]+'>|\b(Zoo|Bert|GPT2|Llama|Marian|ViT)\w*(Model|LM|Generation|\w*ification|"
                        r"Answering|Head)\w*", "<class>", reason)
        counts["control" if "::TestControl" in report.nodeid else "zoo"][reason] += 1
    if not any(counts.values()):
        return
    terminalreporter.section("transformers' common tests: skips by reason")
    harness = Path(__file__).resolve().parent.parent / ".transformers-tests"
    for marker in sorted(harness.glob("*/upstream_tests/MATERIALISED.json")):
        modules = json.loads(marker.read_text())["repository_modules"]
        for module, source in modules.items():
            terminalreporter.write_line(f"tests/{module}: {source}")
    for side, title in (("zoo", "zoo families"), ("control", "transformers' own models (control)")):
        terminalreporter.write_line(f"{title}: {sum(counts[side].values())} skipped")
        for reason, count in counts[side].most_common():
            terminalreporter.write_line(f"  {count:4d}  {reason}")
