#!/usr/bin/env bash
# Install transformer-zoo with its test extras (scripts/install.sh), materialise transformers' own common model tests
# (scripts/transformers_tests.py: from the PyPI sdist of the installed transformers, hash-checked), and run the whole
# test suite on every core (pytest-xdist; ZOO_TEST_WORKERS=1 runs it in one process): what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh "recipes,test"
python scripts/transformers_tests.py
python -m pytest -n "${ZOO_TEST_WORKERS:-auto}" "$@"
