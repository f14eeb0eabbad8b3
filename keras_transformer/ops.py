"""Attention math and mask builders, as plain functions of tensors.

Queries, keys and values are `[batch, heads, len, depth]` (the layout of the paper's code,
tensor2tensor's `split_heads`: both products of eq. 1 are then batched over the leading
`[batch, heads]` without a transpose), attention weights `[batch, heads, q_len, k_len]`.
Masks are booleans, True = attend, broadcastable to `[batch, heads, q_len, k_len]`.
"""

from __future__ import annotations

from keras import ops

from keras_transformer.config import PAD_ID

# Added to the logits of masked positions. Large enough that exp() underflows to exactly 0
# in float32 (where softmax is computed), finite so that a fully masked row gives uniform
# weights instead of NaN.
MASK_LOGIT = -1e9


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V  (paper 3.2.1, eq. 1).

    The softmax is computed in float32 whatever the inputs' dtype, so half-precision models
    get the same weights; the output is in the dtype of `value`.

    Args:
        query: tensor `[batch, heads, q_len, d_k]`.
        key: tensor `[batch, heads, k_len, d_k]`.
        value: tensor `[batch, heads, k_len, d_v]`.
        mask: optional boolean tensor broadcastable to `[batch, heads, q_len, k_len]`,
            True = attend. Defaults to None.
        dropout: optional callable applied to the attention weights before they weigh the
            values (for example a bound `keras.layers.Dropout`; paper 5.4 applies dropout to
            sublayer outputs, many implementations also here). Defaults to None.

    Returns:
        `(output, weights)`: output `[batch, heads, q_len, d_v]` in the dtype of `value`, and
        the float32 attention weights `[batch, heads, q_len, k_len]` (before dropout); each
        row sums to 1.

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.ops import scaled_dot_product_attention
        >>> q = k = v = np.ones((1, 1, 2, 4), "float32")  # (batch, heads, len, depth)
        >>> out, w = scaled_dot_product_attention(q, k, v, mask=np.array([True, False]))
        >>> np.asarray(w)[0, 0].tolist()  # the masked second key gets no weight
        [[1.0, 0.0], [1.0, 0.0]]
    """
    depth = query.shape[-1]
    # Scaling the query before the product keeps half-precision logits in range.
    query = ops.multiply(query, ops.cast(1.0 / depth**0.5, query.dtype))
    logits = ops.einsum("bhqd,bhkd->bhqk", query, key)  # (batch, heads, q_len, k_len)
    logits = ops.cast(logits, "float32")
    if mask is not None:
        logits = ops.where(mask, logits, MASK_LOGIT)
    weights = ops.softmax(logits, axis=-1)
    dropped = ops.cast(weights, value.dtype)
    if dropout is not None:
        dropped = dropout(dropped)
    output = ops.einsum("bhqk,bhkd->bhqd", dropped, value)  # (batch, heads, q_len, d_v)
    return output, weights


def padding_mask(token_ids, pad_id: int = PAD_ID):
    """Boolean `[batch, len]`, True at real tokens and False at padding."""
    return ops.not_equal(token_ids, pad_id)


def causal_mask(q_len, k_len=None, offset=0):
    """Boolean `[q_len, k_len]`: query i (at position offset + i) sees keys 0..offset + i.

    `offset` is the position of the first query; incremental decoding passes the number of
    tokens already in the key/value cache.
    """
    k_len = q_len if k_len is None else k_len
    q_positions = ops.arange(q_len) + offset
    return ops.expand_dims(ops.arange(k_len), 0) <= ops.expand_dims(q_positions, 1)


def first_mask(*masks):
    """The first of `masks` that is not None, or None: an explicit `padding_mask` before the
    mask Keras attaches to an input (`keras.layers.Embedding(mask_zero=True)` and any layer
    that propagates it), which a layer's `call` receives as `mask` or `<input>_mask`."""
    return next((mask for mask in masks if mask is not None), None)


def combine_masks(padding=None, attention=None, causal=None):
    """Merges the masks an attention layer may get into one, broadcastable to
    `[batch, heads, q_len, k_len]`, or None when there is none.

    Args:
        padding: boolean `[batch, k_len]`, True at real key tokens.
        attention: boolean `[batch, q_len, k_len]` or `[q_len, k_len]`, any user mask.
        causal: boolean `[q_len, k_len]` from `causal_mask`.
    """
    mask = None
    if padding is not None:
        # expand_dims, not padding[:, None, None, :]: LiteRT's converter has no builtin
        # for a slice that inserts inner axes (kt.export.litert).
        mask = ops.expand_dims(padding, (1, 2))  # (batch, 1, 1, k_len)
    if attention is not None:
        if len(attention.shape) == 2:  # the same for every sentence
            attention = attention[None, :, :]
        attention = attention[:, None, :, :]  # (batch or 1, 1, q_len, k_len)
        mask = attention if mask is None else ops.logical_and(mask, attention)
    if causal is not None:
        causal = causal[None, None, :, :]  # (1, 1, q_len, k_len)
        mask = causal if mask is None else ops.logical_and(mask, causal)
    return mask


__all__ = [
    "MASK_LOGIT",
    "causal_mask",
    "combine_masks",
    "first_mask",
    "padding_mask",
    "scaled_dot_product_attention",
]
