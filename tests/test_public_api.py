"""The public API: every public module of `keras_transformer` lists its names in `__all__`,
and each of them exists; the package exposes the names its docstring documents, and no other
of its own."""

import importlib
import re
import types

import pytest

import keras_transformer as kt
from tests.doctests import module_names

# Modules the library uses but does not offer: `_`-named, no `__all__` for them. Their former
# names are deprecated aliases (test_the_internal_modules_former_names_warn).
INTERNAL = {
    "keras_transformer._backends",
    "keras_transformer._files",
    "keras_transformer._ragged",
    "keras_transformer._workarounds",
}
FORMER_NAMES = ("backends", "files", "ragged", "workarounds")
PUBLIC = [
    name
    for name in module_names()
    if name not in INTERNAL and not any(part.startswith("_") for part in name.split("."))
]


def documented() -> list[str]:
    """The names in the package docstring's "Public API" table: the first column of each row
    (`TransformerConfig, PAD_ID    from config: ...`), continuation lines left out."""
    lines = kt.__doc__.split("Public API", 1)[1].splitlines()[1:]
    names = []
    for line in lines:
        row = re.match(r"    (\w+(?:, \w+)*)  ", line)
        if row:
            names += row.group(1).split(", ")
        elif line.strip() and not line.startswith(" " * 8):
            break  # the table is over
    return names


def test_every_public_module_is_found():
    assert {"keras_transformer", "keras_transformer.layers.attention"} <= set(PUBLIC)
    assert "keras_transformer.layers._renamed" not in PUBLIC


@pytest.mark.parametrize("name", PUBLIC)
def test_a_public_module_lists_its_names_and_each_exists(name):
    module = importlib.import_module(name)
    listed = getattr(module, "__all__", None)
    assert isinstance(listed, list), f"{name} has no __all__ list"
    assert listed and all(isinstance(entry, str) for entry in listed)
    assert len(set(listed)) == len(listed), f"{name}.__all__ repeats a name"
    missing = [entry for entry in listed if not hasattr(module, entry)]
    assert not missing, f"{name}.__all__ lists names it lacks: {missing}"


def test_the_package_exports_what_its_docstring_documents():
    names = documented()
    assert len(set(names)) == len(names)
    assert sorted(names) == sorted(kt.__all__)


def test_the_package_lists_its_public_api_alone():
    assert [name for name in dir(kt) if not name.startswith("__")] == sorted(kt.__all__)


def test_the_package_exposes_none_of_its_own_names_undocumented():
    for name in kt.__all__:
        getattr(kt, name)  # the lazy modules too, and the modules that they import
    ours = []
    for name, value in vars(kt).items():
        if isinstance(value, types.ModuleType):
            if value.__name__.startswith("keras_transformer."):
                ours.append(name)
        elif getattr(value, "__module__", "").startswith("keras_transformer"):
            ours.append(name)
    internal = set(FORMER_NAMES)  # once imported, an alias is an attribute of the package
    undocumented = {name for name in ours if not name.startswith("_")} - set(kt.__all__)
    assert not undocumented - internal, f"undocumented: {sorted(undocumented - internal)}"


@pytest.mark.parametrize("name", FORMER_NAMES)
def test_the_internal_modules_former_names_warn_and_are_the_modules(name, monkeypatch):
    import sys

    internal = importlib.import_module(f"keras_transformer._{name}")
    monkeypatch.delitem(sys.modules, f"keras_transformer.{name}", raising=False)
    with pytest.warns(DeprecationWarning, match=f"keras_transformer._{name}; the alias"):
        alias = importlib.import_module(f"keras_transformer.{name}")
    assert alias is internal
    monkeypatch.delitem(sys.modules, f"keras_transformer.{name}")
    monkeypatch.delattr(kt, name, raising=False)
    with pytest.warns(DeprecationWarning):
        assert getattr(kt, name) is internal


@pytest.mark.parametrize(
    "old, new",
    [
        ("pretrained.tokenizer", "tokenizers.pieces"),
        ("pretrained.nllb_tokenizer", "tokenizers.nllb"),
        ("pretrained.checkpoint", "pretrained.marian"),
        ("decoding.cache", "layers.cache"),
    ],
)
def test_moved_modules_former_names_warn_and_are_the_modules(old, new, monkeypatch):
    import sys

    moved = importlib.import_module(f"keras_transformer.{new}")
    monkeypatch.delitem(sys.modules, f"keras_transformer.{old}", raising=False)
    with pytest.warns(DeprecationWarning, match=f"moved to keras_transformer.{new}"):
        alias = importlib.import_module(f"keras_transformer.{old}")
    assert alias is moved
