"""Deprecated alias of `keras_transformer.pretrained.marian`, which reads a Marian checkpoint
directory (`read_checkpoint`, `Checkpoint`, `MarianError`, from `marian_checkpoint`) over the
BART family's shared reader, `keras_transformer.pretrained.bart_checkpoint`. Importing this
name warns; the alias goes in the next release."""

from keras_transformer._deprecation import alias_module

alias_module(__name__, "keras_transformer.pretrained.marian", internal=False)
