"""The keyword rule of the models' constructors and loaders (the task's, the backbone's,
keras-hub's loader): a keyword none of them takes is refused by name, with the one a
misspelling may mean. Below `presets` and `backbone`, which both use it."""

from __future__ import annotations

import difflib


def check_keywords(given, known, where: str, others=()) -> None:
    """ValueError naming each keyword of `given` that is none of `known` (nor of `others`,
    which are taken elsewhere), with the one a misspelling may mean, and those taken.

    Keras's functional models drop a keyword they do not know without a word, so a
    mistyped one (`model_fil=`) would load something other than what was asked for.

    Examples:
        >>> from keras_transformer.models.keywords import check_keywords
        >>> check_keywords({"model_fil": "x"}, ["dtype"], "from_preset", ["model_file"])
        Traceback (most recent call last):
        ValueError: from_preset takes no keyword argument 'model_fil' (did you mean ...
    """
    names = [*others, *known]
    unknown = [name for name in given if name not in names]
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    plural = "s" if len(unknown) > 1 else ""
    raise ValueError(
        f"{where} takes no keyword argument{plural} {', '.join(hints)}; it takes {', '.join(names)}"
    )


__all__ = ["check_keywords"]
