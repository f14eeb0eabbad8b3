"""The layers' former names: deprecated aliases for one release, and the loaders of files
saved under them.

Two layers were named as Keras's own although they are not Keras's layers:
`MultiHeadAttention` (now `TransformerAttention`: its own bias layout, call arguments and
cache) and `Dropout` (now `PerReplicaDropout`: a mask per replica, the speed path). Reading
an old name from `kt.layers` or from the layer's module warns with a `DeprecationWarning`
and returns the renamed layer itself (`deprecated`), so code that builds, subclasses or
checks `isinstance` against it keeps working for one release.

A `.keras` file saved before the renames names each layer by its registered name
(`keras_transformer>MultiHeadAttention`), and stores the weights of a layer held in a list (a
functional model's layers) under its class name in snake_case (`layers/multi_head_attention`,
keras.saving's layout). The classes below keep both, so such a file loads with its weights,
without a warning (loading is not a use of the old name): each is the renamed layer in every
other way, and a model re-saved from it keeps the old names, which its weights are filed
under. They stay after the aliases go, for as long as those files are read.
"""

from __future__ import annotations

import warnings

import keras

from keras_transformer.layers.attention import TransformerAttention
from keras_transformer.layers.dropout import PerReplicaDropout

# former name -> the layer it names now
RENAMED = {"MultiHeadAttention": TransformerAttention, "Dropout": PerReplicaDropout}


def deprecated(module: str, name: str) -> type:
    """The layer that `module`'s former `name` stands for, with a `DeprecationWarning` that
    names the new name; for a module's `__getattr__`."""
    layer = RENAMED[name]
    warnings.warn(
        f"{module}.{name} is deprecated: the layer is {layer.__name__} now (the same "
        f"layer, named apart from keras.layers.{name}); the old name goes in the next release",
        DeprecationWarning,
        stacklevel=3,  # the code that reads the name, past the module's __getattr__
    )
    return layer


@keras.saving.register_keras_serializable(package="keras_transformer", name="MultiHeadAttention")
class MultiHeadAttention(TransformerAttention):
    """`TransformerAttention` as a file saved before its rename names it (see the module's
    docstring)."""


@keras.saving.register_keras_serializable(package="keras_transformer", name="Dropout")
class Dropout(PerReplicaDropout):
    """`PerReplicaDropout` as a file saved before its rename names it (see the module's
    docstring)."""
