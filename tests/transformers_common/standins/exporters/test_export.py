"""Stand-in for transformers' tests/exporters/test_export.py, which transformers' source distribution does not
ship (it lives only in transformers' repository, and the project commits no third-party code).

transformers' ModelTesterMixin subclasses `ExportTesterMixin` (torch.export tests). This stand-in is an empty base
class: the zoo's torch.export path is tested by tests/test_export.py. With
`python scripts/transformers_tests.py --repository <transformers checkout>` the repository's own mixin replaces it.
"""

STAND_IN = True


class ExportTesterMixin:
    """An empty base class for ModelTesterMixin (see the module docstring)."""
