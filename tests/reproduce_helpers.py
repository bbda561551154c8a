"""Shared by the claim-reproduction tests: scripts/reproduce.py loaded as a module (scripts/ is not a package)."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("reproduce_script", REPO / "scripts" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
