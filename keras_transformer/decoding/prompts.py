"""Prompts for a decoder-only language model: lists of ids, a `tf.RaggedTensor` or a tensor
made one checked `[batch, width]` tensor, 0-padded at the end (`prompt_tensor`); and the same
prompts left-padded for generation (`language_model.py` says why).
"""

from __future__ import annotations

import numpy as np
from keras import ops

from keras_transformer.config import PAD_ID


def prompt_tensor(prompts):
    """`prompts` as int32 `[batch, width]`, 0-padded at the end: lists of ids are padded, a
    `tf.RaggedTensor` is made dense. Prompts whose values are known (lists, numpy, an eager
    tensor) are checked (2 axes, a token in every row, no token after padding: in a ragged
    row, no padding id at all) and returned as numpy, their width kept (on JAX, one
    program serves every batch of that width). Inside a trace (`tf.function`, `jax.jit`) a
    tensor passes as it is."""
    if hasattr(prompts, "to_tensor"):  # tf.RaggedTensor
        rows = _known(prompts.to_list)
        if rows is None:
            return prompts.to_tensor()
        for i, row in enumerate(rows):
            if PAD_ID in row:
                raise ValueError(
                    f"prompt {i} holds the padding id {PAD_ID}: a ragged prompt holds tokens only"
                )
        prompts = rows
    if isinstance(prompts, (list, tuple)):
        rows = [list(row) for row in prompts]
        width = max((len(row) for row in rows), default=1)
        prompts = np.zeros((len(rows), width), "int32")
        for i, row in enumerate(rows):
            prompts[i, : len(row)] = row
    values = prompts if isinstance(prompts, np.ndarray) else _known(lambda: np.asarray(prompts))
    if values is None:
        return prompts
    if values.ndim != 2:
        raise ValueError(f"prompts must be [batch, width], got shape {values.shape}")
    real = values != PAD_ID
    empty = np.flatnonzero(~real.any(axis=1))
    if empty.size:
        raise ValueError(
            f"prompt {int(empty[0])} has no token: every prompt needs at least one (the "
            "model's start token, say)"
        )
    gaps = np.flatnonzero((real[:, 1:] & ~real[:, :-1]).any(axis=1))
    if gaps.size:
        raise ValueError(
            f"prompt {int(gaps[0])} has a token after padding: prompts are 0-padded at the end"
        )
    return values.astype("int32")


def _known(value):
    """`value()`, or None where it needs a traced tensor's values (inside `tf.function` or
    `jax.jit`, where prompts are checked by shape alone)."""
    try:
        return value()
    except (AttributeError, NotImplementedError, TypeError, ValueError):
        return None


def _check_room(prompts, max_length: int) -> None:
    """Raises when a prompt whose values are known leaves no position under `max_length` (the
    embedding's) for a continuation."""
    lengths = (prompts != PAD_ID).sum(axis=1) if isinstance(prompts, np.ndarray) else []
    if len(lengths) and lengths.max() >= max_length:
        longest = int(np.argmax(lengths))
        raise ValueError(
            f"prompt {longest} has {lengths[longest]} tokens, which leave no room under the "
            f"embedding's max_length={max_length}"
        )


def _left_padded(prompt_ids):
    """`(left, lengths)`: the 0-padded-at-the-end prompts `[batch, width]` moved to the right of
    the buffer, padding first (slot i of a row with `pad` padding slots holds its token
    i - pad), and each row's token count `[batch]`."""
    width = ops.shape(prompt_ids)[1]
    lengths = ops.sum(ops.cast(ops.not_equal(prompt_ids, PAD_ID), "int32"), axis=1)  # (batch,)
    pads = width - lengths  # (batch,)
    source = ops.arange(width, dtype="int32")[None, :] - pads[:, None]  # (batch, width)
    taken = ops.take_along_axis(prompt_ids, ops.maximum(source, 0), axis=1)
    return ops.where(source >= 0, taken, PAD_ID), lengths


__all__ = ["prompt_tensor"]
