"""Deprecated alias of `keras_transformer._backends`, which is internal: the library uses it and
does not offer it. Importing this name warns; the alias goes in the next release."""

import sys
import warnings

from keras_transformer import _backends

warnings.warn(
    "keras_transformer.backends is internal and was renamed keras_transformer._backends; the alias "
    "keras_transformer.backends will be removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _backends
