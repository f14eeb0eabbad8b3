"""Deprecated alias of `keras_transformer._workarounds`, which is internal: the library uses it and
does not offer it. Importing this name warns; the alias goes in the next release."""

from keras_transformer._deprecation import alias_module

alias_module(__name__, "keras_transformer._workarounds")
