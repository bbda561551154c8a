"""The package's shape: no import circles, and the training modules that moved into stage subpackages still import
from their old flat paths (the same module objects) with a warning naming the new path."""

import importlib
import sys
import warnings
from pathlib import Path

import grimp
import pytest

from transformer_zoo.training import MOVED_MODULES

ROOT = Path(__file__).resolve().parents[1]


def _strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of modules that import each other, directly or through others."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return groups


def _import_graph() -> dict[str, list[str]]:
    sys.path.insert(0, str(ROOT))  # grimp finds packages on sys.path; an editable install may use an import hook
    try:
        # Imports inside functions and under TYPE_CHECKING count: a circle there still ties the modules together.
        graph = grimp.build_graph("transformer_zoo", exclude_type_checking_imports=False, cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    return {module: sorted(graph.find_modules_directly_imported_by(module)) for module in graph.modules}


def test_the_package_has_no_import_circle():
    edges = _import_graph()
    assert len(edges) > 100  # the whole package was read
    assert _strongly_connected(edges) == []


def test_the_circle_finder_finds_a_circle():
    edges = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}
    assert _strongly_connected(edges) == [["a", "b", "c"]]


@pytest.mark.parametrize("old_name", sorted(MOVED_MODULES))
def test_an_old_training_path_imports_the_moved_module_with_a_warning(old_name):
    old_path = f"transformer_zoo.training.{old_name}"
    new_path = f"transformer_zoo.training.{MOVED_MODULES[old_name]}"
    sys.modules.pop(old_path, None)
    with pytest.warns(FutureWarning, match=f"{old_path} moved to {new_path}"):
        old = importlib.import_module(old_path)
    assert old is importlib.import_module(new_path)


def test_a_name_that_never_existed_in_training_is_still_an_import_error():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("transformer_zoo.training.no_such_module")


def test_training_files_stay_small():
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
             for path in (ROOT / "transformer_zoo" / "training").rglob("*.py")}
    assert [path for path, lines in sizes.items() if lines > 620] == []
    assert not list((ROOT / "transformer_zoo" / "training").glob("[!_]*.py"))  # every module sits in a stage
