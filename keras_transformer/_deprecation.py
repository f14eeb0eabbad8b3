"""Deprecated aliases of renamed modules: one call in the old module's file."""

import importlib
import sys
import warnings


def alias_module(old: str, new: str) -> None:
    """Makes module `old` (being imported) module `new`, with a DeprecationWarning: the alias
    goes in the next release."""
    warnings.warn(
        f"{old} is internal and was renamed {new}; the alias {old} will be removed in the "
        "next release",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
