"""Deprecated alias of `keras_transformer.layers.cache`: the key/value cache lives beside the
attention and decoder layers that write it (the searches reach it through the layers, and
`kt.decoding` still exports its classes). Importing this name warns; the alias goes in the
next release."""

from keras_transformer._deprecation import alias_module

alias_module(__name__, "keras_transformer.layers.cache", internal=False)
