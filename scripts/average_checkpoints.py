#!/usr/bin/env python
"""Average the weights of several checkpoints of one model (Vaswani et al. 2017, 6.1: the last 5, or 20 for the big
models) and save the result as a loadable model folder.

    python scripts/average_checkpoints.py outputs/run/checkpoints/step-* --last 5 --output outputs/run-averaged
    python scripts/average_checkpoints.py a/model.safetensors b/model.safetensors --output averaged

Each checkpoint is a .safetensors file or a folder holding model.safetensors (pickled .bin/.pt files are refused:
unpickling can run code). Folders are ordered by the step number in their name (step-200 before step-1000), files as
given. The output folder gets model.safetensors and, from the newest checkpoint's folder, its config, tokenizer and
generation files, so it loads like any saved model. Exit status: 0, or 2 for a bad checkpoint (the message says
which).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

COPIED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json", "vocab.json", "merges.txt", "vocab.txt", "preprocessor_config.json")


def step_of(path: str) -> tuple[int, str]:
    numbers = re.findall(r"\d+", Path(path).name)
    return (int(numbers[-1]) if numbers else -1, path)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="average_checkpoints.py", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                        help="Checkpoint folders (holding model.safetensors) or .safetensors files.")
    parser.add_argument("--output", required=True, help="Folder for the averaged model (created if missing).")
    parser.add_argument("--last", type=int, default=None,
                        help="Average only the newest N checkpoints (by the step number in each name). Default: "
                        "all given.")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from safetensors.torch import save_file

    from transformer_zoo.translation import average_checkpoints

    paths = sorted(args.checkpoints, key=step_of) if all(Path(p).is_dir() for p in args.checkpoints) \
        else list(args.checkpoints)
    if args.last is not None:
        if args.last < 1:
            print("average_checkpoints.py: --last must be at least 1.", file=sys.stderr)
            return 2
        if args.last > len(paths):
            print(f"average_checkpoints.py: --last {args.last} but only {len(paths)} checkpoints were given.",
                  file=sys.stderr)
            return 2
        paths = paths[-args.last:]
    try:
        state, metadata = average_checkpoints(paths)
    except ValueError as error:
        print(f"average_checkpoints.py: {error}", file=sys.stderr)
        return 2
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    save_file(state, str(output / "model.safetensors"), metadata={**metadata, "format": "pt"})
    newest = Path(paths[-1]) if Path(paths[-1]).is_dir() else Path(paths[-1]).parent
    copied = [name for name in COPIED if (newest / name).is_file()]
    for name in copied:
        shutil.copy2(newest / name, output / name)
    (output / "averaged_from.json").write_text(json.dumps({"checkpoints": [str(p) for p in paths]}, indent=1) + "\n")
    print(f"Averaged {len(paths)} checkpoints ({', '.join(paths)}) into {output / 'model.safetensors'}"
          + (f"; copied {', '.join(copied)} from {newest}." if copied else "."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
