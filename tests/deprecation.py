"""`warns(replacement)`: the check of one call of a deprecated name (keras_transformer.
_deprecation): one DeprecationWarning of ours, naming the replacement, pointing at the line
that called it. The tests' filter (pyproject.toml) makes such a warning an error anywhere else,
so each deprecated name is called only inside this block."""

import contextlib
import re
import sys

import pytest

OURS = "is deprecated and will be removed in the next release; use "


@contextlib.contextmanager
def warns(replacement: str, old: str | None = None):
    """The block calls one deprecated name once: exactly one of our DeprecationWarnings, whose
    message names `replacement` (as written, not a pattern) and whose line is the caller's
    (the block's file: the warning's stacklevel points at the user's code). `old`, where
    given: the full name the message must start with, the name the block called."""
    caller = sys._getframe(2).f_code.co_filename  # the `with` line's file (contextmanager's)
    message = re.escape(OURS + replacement)
    if old is not None:
        message = "^" + re.escape(f"{old} ") + message
    with pytest.warns(DeprecationWarning, match=message) as caught:
        yield
    ours = [w for w in caught if OURS in str(w.message)]
    assert [w.filename for w in ours] == [caller], [(str(w.message), w.filename) for w in ours]
