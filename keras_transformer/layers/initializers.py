"""Initializers for sublayers."""

from __future__ import annotations


def fresh(initializer):
    """A copy of `initializer` for one sublayer.

    A Keras initializer made without a seed draws its seed when it is made, so one object
    shared by several sublayers would give them all the same initial weights; each sublayer
    gets its own copy, as in Keras's own `MultiHeadAttention`.
    """
    return initializer.__class__.from_config(initializer.get_config())


__all__ = ["fresh"]
