"""Deprecated aliases of renamed modules: one call in the old module's file."""

import importlib
import sys
import warnings


def alias_module(old: str, new: str, internal: bool = True) -> None:
    """Makes module `old` (being imported) module `new`, with a DeprecationWarning: the alias
    goes in the next release. `internal`: whether the module is not offered (the warning
    says so)."""
    moved = "is internal and was renamed" if internal else "moved to"
    warnings.warn(
        f"{old} {moved} {new}; the alias {old} will be removed in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
