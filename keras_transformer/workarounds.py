"""Deprecated alias of `keras_transformer._workarounds`, which is internal: the library uses it and
does not offer it. Importing this name warns; the alias goes in the next release."""

import sys
import warnings

from keras_transformer import _workarounds

warnings.warn(
    "keras_transformer.workarounds is internal and was renamed "
    "keras_transformer._workarounds; the alias keras_transformer.workarounds will be removed "
    "in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _workarounds
