"""Stand-in for transformers' tests/generation/test_utils.py, which transformers' source distribution does not
ship (it lives only in transformers' repository, and the project commits no third-party code).

transformers' ModelTesterMixin imports `GenerationTesterMixin` and checks that a tester of models that can
generate inherits it (`test_can_generate_consistency`-style checks). This stand-in is that marker and carries no
tests: the zoo's generation is tested by tests/test_generation.py (greedy, beam, sampling, cached against
uncached, static caches, against transformers' own models with the same weights). With
`python scripts/transformers_tests.py --repository <transformers checkout>` the repository's own mixin replaces it
and its generation tests run as well.
"""

STAND_IN = True


class GenerationTesterMixin:
    """The marker ModelTesterMixin looks for; no tests (see the module docstring)."""
