#!/usr/bin/env bash
# Install transformer-zoo with its test extras and run the whole test suite (what CI runs).
# torch is pinned first: 2.13.0 is the CPU wheel; an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet -e ".[test,checkpoints]"
python -m pytest "$@"
