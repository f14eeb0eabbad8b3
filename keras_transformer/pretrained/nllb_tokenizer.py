"""Deprecated alias of `keras_transformer.tokenizers.nllb`, where the tokenizers of imported
models now live (the core vocabulary reads them without importing a converter). Importing
this name warns; the alias goes in the next release."""

from keras_transformer._deprecation import alias_module

alias_module(__name__, "keras_transformer.tokenizers.nllb", internal=False)
