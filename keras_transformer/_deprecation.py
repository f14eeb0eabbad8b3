"""The one way this library warns of a deprecated name: a `DeprecationWarning` that names the
name and its replacement, for one release.

`deprecated(old, replacement)` wraps a function (each call warns, then runs it unchanged),
`aliased` offers such a function under a second name that its warning names, `warn` is the
warning itself (for a context manager, which warns as its block starts), and
`alias_module` makes a renamed module's former name import it. The warnings of `warn` start
with the full name ("keras_transformer.export.export_saved_model is deprecated"), which the
tests' filter (pyproject.toml) turns into errors wherever the call is: nothing of ours may
call a deprecated name but the test of its wrapper.
"""

import functools
import importlib
import sys
import warnings

REMOVAL = "will be removed in the next release"


def warn(old: str, replacement: str, stacklevel: int = 2) -> None:
    """Warns that `old` (its full name) is deprecated, naming `replacement`: "OLD is
    deprecated and will be removed in the next release; use REPLACEMENT". `stacklevel`: as
    `warnings.warn`'s, counted from the caller of `warn` (2: that caller's caller, the line
    that called the deprecated name)."""
    warnings.warn(
        f"{old} is deprecated and {REMOVAL}; use {replacement}",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def deprecated(old: str, replacement: str):
    """Decorator: the function, unchanged, but each call first warns (`warn`) that `old` is
    deprecated, naming `replacement`; the warning points at the line that called it.

    Examples:
        >>> import warnings
        >>> from keras_transformer._deprecation import deprecated
        >>> @deprecated("keras_transformer.example.old", "keras_transformer.example.new(x)")
        ... def old(x):
        ...     return x + 1
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     old(1)
        2
        >>> print(caught[0].message)  # doctest: +NORMALIZE_WHITESPACE
        keras_transformer.example.old is deprecated and will be removed in the next release;
        use keras_transformer.example.new(x)
    """

    def wrap(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            warn(old, replacement, stacklevel=2)
            return function(*args, **kwargs)

        wrapper.replacement = replacement  # for `aliased`
        return wrapper

    return wrap


def aliased(function, old: str):
    """A deprecated `function` (`deprecated`'s wrapper) under a second name, `old` (its full
    name): the same function, whose warning names `old` and the same replacement. For a
    deprecated function that a package offers as well as the module that defines it: the
    warning names the one its caller used."""
    return deprecated(old, function.replacement)(function.__wrapped__)


def alias_module(old: str, new: str, internal: bool = True) -> None:
    """Makes module `old` (being imported) module `new`, with a DeprecationWarning: the alias
    goes in the next release. `internal`: whether the module is not offered (the warning
    says so)."""
    moved = "is internal and was renamed" if internal else "moved to"
    warnings.warn(
        f"{old} {moved} {new}; the alias {old} {REMOVAL}",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
