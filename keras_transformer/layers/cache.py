"""The key/value cache of incremental decoding: what each attention layer keeps between steps.

A decoder that generates one token at a time would recompute the keys and values of the whole
prefix at every step; the cache keeps them instead (self-attention: the keys and values of
the tokens generated so far; encoder-decoder attention: the projected encoder output,
computed once). The cache objects own the three things done to that state:

- **writing** the new positions' keys and values (`AttentionCache.write`),
- **growing** the buffers when a longer output needs room (`grow`),
- **reordering** hypotheses after a beam-search step (`reorder`).

They are `NamedTuple`s of tensors, so `tf.while_loop`, `tf.nest` and XLA take them as they
are; every method returns a new cache and leaves its input unchanged. Buffers have a fixed
size: writing at a position is a slice update, so shapes stay static inside a loop.
"""

from __future__ import annotations

from typing import NamedTuple

from keras import ops


class AttentionCache(NamedTuple):
    """Keys and values of one attention layer, `[batch, heads, length, depth]` each.

    For self-attention the buffers hold `length` positions, of which those written so far
    are real; for encoder-decoder attention they hold the projected encoder output.
    """

    key: object  # (batch, heads, length, d_k)
    value: object  # (batch, heads, length, d_v)

    @classmethod
    def empty(cls, batch_size, length, num_heads: int, key_dim: int, value_dim: int, dtype):
        """Zero buffers with room for `length` positions."""
        return cls(
            ops.zeros((batch_size, num_heads, length, key_dim), dtype),
            ops.zeros((batch_size, num_heads, length, value_dim), dtype),
        )

    @property
    def length(self):
        """The number of positions the buffers hold (a scalar tensor when not static)."""
        return ops.shape(self.key)[2]

    def write(self, index, key, value) -> AttentionCache:
        """The cache with `key`/`value` `[batch, heads, new_len, depth]` written at positions
        `index .. index + new_len - 1`."""
        start = [0, 0, index, 0]
        return AttentionCache(
            ops.slice_update(self.key, start, ops.cast(key, self.key.dtype)),
            ops.slice_update(self.value, start, ops.cast(value, self.value.dtype)),
        )

    def grow(self, length) -> AttentionCache:
        """The cache with room for `length` positions: the buffers 0-padded at the end, the
        written positions unchanged."""
        padding = [[0, 0], [0, 0], [0, length - self.length], [0, 0]]
        return AttentionCache(ops.pad(self.key, padding), ops.pad(self.value, padding))

    def reorder(self, indices) -> AttentionCache:
        """Row `i` of the result is row `indices[i]` of this cache (`indices` int `[batch]`)."""
        return AttentionCache(
            ops.take(self.key, indices, axis=0), ops.take(self.value, indices, axis=0)
        )


class DecoderLayerCache(NamedTuple):
    """The state of one decoder layer: its self-attention buffers, which grow with the output,
    and its encoder-decoder attention's projected encoder output, which stays fixed (an empty
    tuple for a layer without encoder-decoder attention: `tf.while_loop` takes no None)."""

    self_attention: AttentionCache
    cross_attention: AttentionCache | tuple

    def grow(self, length) -> DecoderLayerCache:
        """Room for `length` positions in the self-attention buffers."""
        return self._replace(self_attention=self.self_attention.grow(length))

    def reorder(self, indices) -> DecoderLayerCache:
        """Row `i` continues the hypothesis of row `indices[i]` (see `DecoderCache.reorder`)."""
        return self._replace(self_attention=self.self_attention.reorder(indices))


class DecoderCache(NamedTuple):
    """The state of a decoder stack: one `DecoderLayerCache` a layer, bottom first.

    Made by `Decoder.init_cache`, filled by `Decoder.forward(..., cache=..., cache_index=t)`.
    """

    layers: tuple

    @property
    def length(self):
        """Positions the self-attention buffers hold."""
        return self.layers[0].self_attention.length

    def grow(self, length) -> DecoderCache:
        """Room for `length` positions in every self-attention buffer."""
        return DecoderCache(
            tuple(
                layer._replace(self_attention=layer.self_attention.grow(length))
                for layer in self.layers
            )
        )

    def reorder(self, indices) -> DecoderCache:
        """Beam search's reordering: row `i` continues the hypothesis of row `indices[i]`.

        Only the self-attention buffers move. The encoder-decoder caches are equal for all
        hypotheses of one source sentence, so they stay as they are: `indices` must map
        each row to a row of the same sentence, as beam search does.
        """
        return DecoderCache(tuple(layer.reorder(indices) for layer in self.layers))


__all__ = ["AttentionCache", "DecoderCache", "DecoderLayerCache"]
