"""Shared helpers for the integration tests (tests/test_integration_*.py).

Kept out of conftest.py on purpose (another module owns it): import what you need with
`from integration_helpers import ...` (pytest puts tests/ on sys.path in its default rootdir-based import mode).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

import transformer_zoo as tz


PACKAGE_DIR = Path(tz.__file__).parent

# Every class of every family, keyed by a short name: (family model_type, auto class name, model class).
ALL_CLASSES = {
    model_class.__name__: (model_type, auto_class.__name__, model_class)
    for model_type, (_, models) in tz.FAMILIES.items()
    for auto_class, model_class in models
}
FAMILY_CONFIGS = {model_type: config_class for model_type, (config_class, _) in tz.FAMILIES.items()}

NO_DROPOUT = dict(embedding_dropout=0.0, attention_dropout=0.0, hidden_dropout=0.0)

# Vocabulary layout shared by every text family's tiny preset (vocab_size=1000) and by the test tokenizer:
# 0 pad, 1 bos/[CLS] (also the seq2seq decoder start), 2 eos/[SEP], 3 [UNK], 4 [MASK].
SPECIAL_TOKENS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", "park", "and", "bird", "sang"]


def tiny_config(model_type: str, **overrides):
    return FAMILY_CONFIGS[model_type].from_preset("tiny", **overrides)


def text_inputs(batch: int = 2, length: int = 7, seed: int = 0, right_pad: int = 2) -> dict[str, torch.Tensor]:
    """Random ids over the ordinary vocabulary, with the last row right-padded by `right_pad` tokens."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 1000, (batch, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if right_pad:
        input_ids[-1, -right_pad:] = 0
        attention_mask[-1, -right_pad:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def model_inputs(class_name: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """Forward-pass inputs for any zoo class (no labels)."""
    model_type = ALL_CLASSES[class_name][0]
    if model_type == "zoo_vit":
        generator = torch.Generator().manual_seed(seed)
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=generator)}
    inputs = text_inputs(seed=seed)
    if model_type == "zoo_encoder":
        inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        inputs["token_type_ids"][:, 4:] = 1
    if model_type == "zoo_seq2seq":
        generator = torch.Generator().manual_seed(seed + 1)
        inputs["decoder_input_ids"] = torch.randint(5, 1000, (2, 5), generator=generator)
        inputs["decoder_input_ids"][:, 0] = 1
    return inputs


def output_tensors(outputs) -> dict[str, torch.Tensor]:
    """The tensor fields of a ModelOutput (cache objects and None fields dropped), contiguous for safetensors."""
    return {key: value.detach().contiguous() for key, value in outputs.items() if isinstance(value, torch.Tensor)}


def assert_tensors_equal(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], what: str = ""):
    assert actual.keys() == expected.keys(), f"{what}: {sorted(actual)} != {sorted(expected)}"
    for key in expected:
        assert actual[key].shape == expected[key].shape, f"{what}/{key}: shape {actual[key].shape}"
        assert actual[key].dtype == expected[key].dtype, f"{what}/{key}: dtype {actual[key].dtype}"
        max_diff = (actual[key].double() - expected[key].double()).abs().max().item() if actual[key].numel() else 0
        assert torch.equal(actual[key], expected[key]), f"{what}/{key}: not bit-identical (max diff {max_diff})"


def build_tokenizer(with_template: bool = True):
    """A WordLevel tokenizer over the tiny presets' 1000-id vocabulary, built offline with `tokenizers`.

    `with_template` adds BERT's [CLS] ... [SEP] around each sequence (encoders); decoders want none.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = SPECIAL_TOKENS + WORDS
    vocab += [f"w{i}" for i in range(1000 - len(vocab))]
    backend = Tokenizer(models.WordLevel({token: i for i, token in enumerate(vocab)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
    if with_template:
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", 1), ("[SEP]", 2)],
        )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        bos_token="[CLS]",
        eos_token="[SEP]",
    )
    assert len(tokenizer) == 1000
    return tokenizer


RESULT_MARKER = "@@ZOO_RESULT@@"
FRESH_PROCESS_PRELUDE = r"""
import sys
sys.modules["transformer_zoo"] = None  # the plugin must not be importable here
try:
    import transformer_zoo
except ImportError:
    pass
else:
    raise SystemExit("transformer_zoo is importable in the fresh process")
import json
import torch


def emit(result):
    # A marker line: transformers' trust_remote_code prompt writes to stdout without a newline.
    print("\n" + RESULT_MARKER + json.dumps(result), flush=True)
"""


def run_fresh_python(script: str, cwd: Path, args: dict | None = None, timeout: int = 240) -> dict:
    """Run `script` in a new interpreter without transformer_zoo, in `cwd`; return the JSON it prints last.

    The script gets `ARGS` (the `args` dict) and must end with `emit(result)` (JSON). stdin is /dev/null so a
    missing trust_remote_code makes transformers raise at once instead of prompting for 15 s.
    """
    cwd = Path(cwd)
    (cwd / "args.json").write_text(json.dumps(args or {}))
    source = "\n".join(
        [f"RESULT_MARKER = {RESULT_MARKER!r}", FRESH_PROCESS_PRELUDE, "ARGS = json.load(open('args.json'))",
         textwrap.dedent(script)]
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "PYTHONSTARTUP") and not key.startswith("PYTEST")
    }
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_MODULES_CACHE=str(cwd / "hf_modules"),
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        # Same thread count as this process: CPU reductions are only bit-reproducible at equal parallelism.
        OMP_NUM_THREADS=str(torch.get_num_threads()),
    )
    result = subprocess.run(
        [sys.executable, "-c", source],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"fresh process failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    assert RESULT_MARKER in result.stdout, f"no result from the fresh process:\n{result.stdout[-3000:]}"
    return json.loads(result.stdout.rsplit(RESULT_MARKER, 1)[1].strip())
