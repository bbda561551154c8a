"""Tiny data and fast flags for the recipe tests (tests/test_recipes.py,
tests/test_recipe_refusals.py)."""

import json
import random
from pathlib import Path

from transformer_zoo.training.finetune import recipe as finetuning
from transformer_zoo.training.pretrain import recipe as pretraining

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
WORDS = ("the king queen lord lady speak love night day sword crown heart death life sweet fair noble gentle "
         "madam sir good fortune honour").split()
FAST = ["--max_steps", "4", "--eval_steps", "2", "--save_steps", "2", "--per_device_batch_size", "4",
        "--progress_bar", "false", "--report_to", "none", "--vocab_size", "500", "--logging_steps", "1",
        # Keep this test process's thread setting (conftest pins one thread); the recipes default to all cores.
        "--cpu_threads", "none"]
# For runs that train no tokenizer (a ViT, a pretrained model, --tokenizer): the recipes refuse flags they ignore.
FAST_NO_TOKENIZER = [flag for pair in zip(FAST[::2], FAST[1::2]) if pair[0] != "--vocab_size" for flag in pair]


def write_recipe_data(folder: Path) -> Path:
    """Small local files of every shape the recipes read, written into `folder`."""
    rng = random.Random(0)
    with open(folder / "text.txt", "w") as handle:
        for _ in range(300):
            handle.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))) + "\n")
    with open(folder / "pairs.jsonl", "w") as handle:
        for _ in range(200):
            words = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
            handle.write(json.dumps({"source": " ".join(words), "target": " ".join(reversed(words))}) + "\n")
    cues = {"pos": ["love", "sweet", "fair"], "neg": ["death", "sword", "night"], "neu": ["the", "lord", "day"]}
    with open(folder / "classes.csv", "w") as handle:
        handle.write("sentence,sentiment\n")
        for index in range(240):
            label = ["pos", "neg", "neu"][index % 3]
            handle.write(" ".join(rng.choice(cues[label] * 3 + list(WORDS)) for _ in range(8)) + f",{label}\n")
    with open(folder / "tags.jsonl", "w") as handle:
        for _ in range(120):
            tokens = [rng.choice(WORDS) for _ in range(6)]
            tags = ["B-PER" if t in ("king", "queen") else "I-PER" if t == "lord" else "O" for t in tokens]
            handle.write(json.dumps({"tokens": tokens, "tags": tags}) + "\n")
    (folder / "empty.txt").write_text("")
    return folder


def run_pretrain(args):
    return pretraining.main([str(a) for a in args])


def run_finetune(args):
    return finetuning.main([str(a) for a in args])
