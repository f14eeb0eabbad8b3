"""Deprecated alias of `keras_transformer._files`, which is internal: the library uses it and
does not offer it. Importing this name warns; the alias goes in the next release."""

import sys
import warnings

from keras_transformer import _files

warnings.warn(
    "keras_transformer.files is internal and was renamed keras_transformer._files; the alias "
    "keras_transformer.files will be removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _files
