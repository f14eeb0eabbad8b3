"""`DecodingSettings` and the rules of its prefixes, as the library imports them: both are
written in `keras_transformer.core` (light: `core.settings`, `core.rules`), and re-exported
here; `prefix_ids` is the target prefix's ids as a tokenizer of ours gives them.
"""

from __future__ import annotations

from keras_transformer.core.rules import (
    BLANK,
    KEEPS_ITS_SOURCE,
    LANGUAGE_CODE,
    check_source_prefix,
    check_target_prefix,
    language_codes,
    target_prefix_ids,
    with_source_prefix,
)
from keras_transformer.core.settings import BATCH_SIZE as BATCH_SIZE
from keras_transformer.core.settings import DEFAULT as DEFAULT
from keras_transformer.core.settings import (
    FINISH_RULES,
    PRESETS,
    RANKINGS,
    STOPPING,
    DecodingSettings,
)


def prefix_ids(settings: DecodingSettings, tokenizer):
    """The target prefix's ids `[1, prefix_len]` (int32 numpy) through `tokenizer`, as the
    searches' `target_prefix` takes them, or None when the settings force none. ValueError
    when the text has no tokens (`target_prefix_ids`), or names a language the vocabulary
    lacks (`check_target_prefix`)."""
    import numpy as np
    from keras import ops

    if settings.target_prefix is None:
        return None
    check_target_prefix(settings.target_prefix, tokenizer)

    def tokenize(text):
        ids = tokenizer.tokenize([text])
        ids = ids.to_tensor() if hasattr(ids, "to_tensor") else ids
        return np.asarray(ops.convert_to_numpy(ids), "int32").reshape(-1)

    return np.asarray(target_prefix_ids(settings.target_prefix, tokenize), "int32")[None, :]


__all__ = [
    "DecodingSettings",
    "FINISH_RULES",
    "LANGUAGE_CODE",
    "PRESETS",
    "RANKINGS",
    "BLANK",
    "KEEPS_ITS_SOURCE",
    "STOPPING",
    "check_source_prefix",
    "check_target_prefix",
    "language_codes",
    "prefix_ids",
    "with_source_prefix",
]
