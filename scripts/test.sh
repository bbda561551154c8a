#!/usr/bin/env bash
# Install transformer-zoo with its test extras (scripts/install.sh) and run the whole test suite: what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh "recipes,test"
python -m pytest "$@"
