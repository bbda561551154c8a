"""Model cards for transformer-zoo models: one Jinja2 template per family sharing a common base
(`templates/`), rendered through huggingface_hub's `ModelCard` / `ModelCardData` / `EvalResult`, plus the checks
a card must pass before it is published."""

from .citations import CITATIONS, citation_keys, citations_for
from .rendering import (
    DEFAULT_LICENSE,
    LOCATION_MARKER,
    build_model_card,
    finalize_for_repo,
    render_model_card,
    validate_model_card,
)
from .scrub import find_local_paths, find_tokens, mask_secrets, mask_token, scrub_local_paths


__all__ = [
    "CITATIONS", "DEFAULT_LICENSE", "LOCATION_MARKER", "build_model_card", "citation_keys", "citations_for",
    "finalize_for_repo", "find_local_paths", "find_tokens", "mask_secrets", "mask_token", "render_model_card", "scrub_local_paths",
    "validate_model_card",
]
