"""Token embeddings, positional encodings and the tied pre-softmax projection (paper 3.4, 3.5)."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_transformer import _workarounds as workarounds
from keras_transformer import fast
from keras_transformer.config import (
    PAD_ID,
    POSITIONAL_KINDS,
    SINUSOID_FREQUENCIES,
    SINUSOID_LAYOUTS,
)
from keras_transformer.layers.dropout import PerReplicaDropout
from keras_transformer.layers.quantization import dtype_policy_with_sublayers, sublayer_policy


def position_ids(length, start_index=0, max_length=None):
    """The positions of `length` tokens whose first is at `start_index`: int `[len]` for a
    scalar start; `[batch, len]` for a start per row (`[batch]`), there clipped to 0 ..
    `max_length` - 1 (a left-padded row's padding, before its first token, takes position
    0; a finished row's steps past the table, its last position: both masked or discarded
    by their callers, `kt.decoding.generate`)."""
    if len(getattr(start_index, "shape", ())) == 1:
        positions = ops.maximum(ops.arange(length)[None, :] + start_index[:, None], 0)
        return positions if max_length is None else ops.minimum(positions, max_length - 1)
    return ops.arange(length) + start_index


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """The fixed sinusoidal position encodings of the paper (section 3.5).

    PE(pos, 2i) = sin(pos / max_wavelength^(2i / d_model)),
    PE(pos, 2i + 1) = cos(pos / max_wavelength^(2i / d_model)).

    With `layout="concatenated"` the same sines fill the first d_model / 2 columns and the
    cosines the rest (as Marian and tensor2tensor lay them out; a permutation of the columns).
    With `frequencies="fairseq"` the i-th of the d_model / 2 frequencies is
    1 / max_wavelength^(i / (d_model / 2 - 1)) instead of the paper's
    1 / max_wavelength^(2i / d_model) (tensor2tensor's, fairseq's and M2M100's sinusoid).

    The angles are computed in float32 whatever the dtype policy, then cast to the compute
    dtype, so half-precision models get the same encodings.

    Args:
        max_wavelength: float. The longest wavelength, 10000 in the paper. Defaults to 10000.
        layout: str. "interleaved" (the paper's) or "concatenated". Defaults to
            "interleaved".
        frequencies: str. "paper" or "fairseq" (above). Defaults to "paper".
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`...).

    Call arguments:
        inputs: tensor `[batch, len, d_model]`, the embeddings the encodings will be added to;
            only its shape is used. `d_model` must be known and even.
        start_index: int, scalar int tensor, or int tensor `[batch]`. Position of the first
            element (incremental decoding), or of each row's first element (prompts of
            different lengths: `kt.decoding.generate`). Defaults to 0.

    Returns:
        The encodings, `[batch, len, d_model]` in the compute dtype.

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import SinusoidalPositionEncoding
        >>> x = np.zeros((2, 5, 16), "float32")  # (batch, len, d_model)
        >>> tuple(SinusoidalPositionEncoding()(x).shape)
        (2, 5, 16)
    """

    def __init__(
        self,
        max_wavelength: float = 10000.0,
        layout: str = "interleaved",
        frequencies: str = "paper",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if layout not in SINUSOID_LAYOUTS:
            raise ValueError(f"layout={layout!r} must be one of {SINUSOID_LAYOUTS}")
        if frequencies not in SINUSOID_FREQUENCIES:
            raise ValueError(f"frequencies={frequencies!r} must be one of {SINUSOID_FREQUENCIES}")
        self.max_wavelength = max_wavelength
        self.layout = layout
        self.frequencies = frequencies
        self.supports_masking = True  # a Keras mask on the inputs passes to the encodings

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length, depth = shape[-2], inputs.shape[-1]
        if depth is None or depth % 2:
            raise ValueError(
                f"SinusoidalPositionEncoding needs an even, known d_model; got {depth}"
            )
        positions = ops.cast(position_ids(length, start_index), "float32")  # ([batch,] len)
        if self.layout == "interleaved":
            even_dims = ops.cast(ops.arange(depth) // 2 * 2, "float32")  # 0, 0, 2, 2, 4, 4...
        else:
            even_dims = ops.cast(ops.arange(depth) % (depth // 2) * 2, "float32")  # 0, 2, .. 0, 2
        if self.frequencies == "paper":
            exponents = even_dims / depth  # 2i / d_model
        else:  # i / (d_model / 2 - 1)
            exponents = even_dims / 2 / max(depth // 2 - 1, 1)
        inverse_wavelengths = ops.power(self.max_wavelength, -exponents)  # (d_model,)
        angles = positions[..., None] * inverse_wavelengths  # ([batch,] len, d_model)
        if self.layout == "interleaved":
            is_sine = ops.arange(depth) % 2 == 0
        else:
            is_sine = ops.arange(depth) < depth // 2
        encodings = ops.where(is_sine, ops.sin(angles), ops.cos(angles))
        return ops.broadcast_to(ops.cast(encodings, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "max_wavelength": self.max_wavelength,
            "layout": self.layout,
            "frequencies": self.frequencies,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEmbedding(keras.layers.Layer):
    """Token embedding times sqrt(d_model), plus positions, then dropout (paper 3.4, 3.5, 5.4).

    The same layer is the tied pre-softmax projection: called with `reverse=True` on decoder
    outputs, it returns logits `x E^T` with the embedding matrix `E` ("we share the same weight
    matrix between the two embedding layers and the pre-softmax linear transformation", 3.4),
    plus a bias `b` (`logits_bias`, `[vocab_size]`) with `output_bias=True`.
    Sharing one instance between source and target ties all three. The token table is a
    `keras.layers.ReversibleEmbedding` (so `quantize` and `enable_lora` reach it), learned
    positions a `keras.layers.Embedding`.

    Args:
        vocab_size: int. Rows of the embedding matrix; id 0 is padding.
        d_model: int. Embedding width.
        max_length: int. Longest sequence; the size of a learned position table. Defaults to 256.
        positional: str. "sinusoidal" (fixed, paper 3.5) or "learned" (a trained table).
            Defaults to "sinusoidal".
        sinusoid_layout: str. "interleaved" (the paper's) or "concatenated" sines and cosines
            (`SinusoidalPositionEncoding`). Defaults to "interleaved".
        sinusoid_frequencies: str. "paper" or "fairseq" (`SinusoidalPositionEncoding`).
            Defaults to "paper".
        position_offset: int. The position of the first token (fairseq's models: their
            padding id + 1); a learned table has `max_length + position_offset` rows.
            Defaults to 0.
        dropout: float. Dropout on the sum of embeddings and positions. Defaults to 0.0.
        tie_weights: bool. Use `E^T` as the output projection; False gives the projection its
            own matrix. Defaults to True.
        output_bias: bool. Add a learned bias (zeros at first) to the logits. Defaults to
            False.
        mask_zero: bool. Attach a Keras mask (True at ids other than 0, the padding) to the
            embeddings, as `keras.layers.Embedding(mask_zero=True)`: the layers of this
            library (and Keras's that support masking) downstream then take it for their
            padding mask. Defaults to False.
        embeddings_initializer: initializer for the token table. Defaults to
            `RandomNormal(stddev=d_model**-0.5)`, so that scaled embeddings have unit variance.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`...).

    Call arguments:
        inputs: int tensor `[batch, len]` of token ids or, with `reverse=True`, a float tensor
            `[batch, len, d_model]`.
        start_index: int or scalar int tensor: the position of the first token (incremental
            decoding); or int `[batch]`: each row's (left-padded prompts, whose positions
            start at their first real token: `kt.decoding.generate`; the padding before it,
            at negative positions, takes position 0's encoding, and a learned table's
            positions past its end its last). Defaults to 0.
        reverse: bool. Project `[batch, len, d_model]` to logits instead of embedding ids.
            Defaults to False.
        training: bool. Whether dropout is active.

    Returns:
        `[batch, len, d_model]` embeddings in the compute dtype, or with `reverse=True` logits
        `[batch, len, vocab_size]` in float32 (even under mixed precision).

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import TransformerEmbedding
        >>> embed = TransformerEmbedding(vocab_size=100, d_model=16)
        >>> x = embed(np.array([[5, 7, 0]]))  # token embeddings * sqrt(d_model) + positions
        >>> tuple(x.shape), tuple(embed(x, reverse=True).shape)  # and the tied projection
        ((1, 3, 16), (1, 3, 100))
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_length: int = 256,
        positional: str = "sinusoidal",
        dropout: float = 0.0,
        tie_weights: bool = True,
        embeddings_initializer=None,
        sinusoid_layout: str = "interleaved",
        output_bias: bool = False,
        mask_zero: bool = False,
        sinusoid_frequencies: str = "paper",
        position_offset: int = 0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional={positional!r} must be one of {POSITIONAL_KINDS}")
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.max_length = max_length
        self.positional = positional
        self.dropout = dropout
        self.tie_weights = tie_weights
        self.sinusoid_layout = sinusoid_layout
        self.sinusoid_frequencies = sinusoid_frequencies
        self.position_offset = position_offset
        self.output_bias = output_bias
        self.mask_zero = mask_zero
        self.logits_bias = None  # built with output_bias
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.RandomNormal(stddev=d_model**-0.5)
        )
        self.dropout_layer = PerReplicaDropout(dropout, dtype=self.dtype_policy, name="dropout")

    def build(self, inputs_shape=None):
        self.token_embedding = workarounds.ReversibleEmbedding(
            self.vocab_size,
            self.d_model,
            tie_weights=self.tie_weights,
            embeddings_initializer=self.embeddings_initializer,
            dtype=sublayer_policy(self, "token_embedding"),
            name="token_embedding",
        )
        self.token_embedding.build()
        # Its reverse projection takes decoder outputs, which may carry a Keras mask: the
        # logits get none (Embedding.compute_mask without mask_zero), and no warning.
        self.token_embedding.supports_masking = True
        if self.positional == "learned":
            self.position_embedding = keras.layers.Embedding(
                self.max_length + self.position_offset,
                self.d_model,
                embeddings_initializer="glorot_uniform",
                dtype=sublayer_policy(self, "position_embedding"),
                name="position_embedding",
            )
            self.position_embedding.build((self.max_length + self.position_offset,))
        else:
            self.position_embedding = SinusoidalPositionEncoding(
                layout=self.sinusoid_layout,
                frequencies=self.sinusoid_frequencies,
                dtype=self.dtype_policy,
                name="position_encoding",
            )
            self.position_embedding.build((None, self.max_length, self.d_model))
        if self.output_bias:
            self.logits_bias = self.add_weight(
                shape=(self.vocab_size,), initializer="zeros", name="logits_bias"
            )
        self.built = True

    def call(self, inputs, start_index=0, reverse=False, training=None):
        if reverse:
            return self.add_logits_bias(self.token_embedding(inputs, reverse=True))
        length = inputs.shape[-1]
        # Rows with starts of their own (a tensor: left-padded prompts, whose padding slots
        # come before position 0) may hold more slots than positions: not checked here.
        known = isinstance(length, int) and isinstance(start_index, int)  # not symbolic
        if self.positional == "learned" and known and length > self.max_length:
            raise ValueError(
                f"sequence length {length} exceeds max_length={self.max_length} of the "
                "learned position table; truncate the input or raise max_length"
            )
        # In the compute dtype: Keras 3.15's int8 `Embedding` can answer float32 under a mixed
        # policy (its float32 scale divides the half-precision rows).
        # The table's own lookup; a device file's export may trace another (`kt.fast`).
        x = ops.cast(fast.token_lookup(self.token_embedding, inputs), self.compute_dtype)
        x = x * ops.cast(math.sqrt(self.d_model), x.dtype)
        x = x + self.positions(x, start_index)
        return self.dropout_layer(x, training=training)

    def compute_mask(self, inputs, mask=None):
        """True at real tokens of ids `inputs` with `mask_zero` (integer ids, or float ones
        as `keras.Input`'s default dtype gives); None otherwise, and for the logits of
        `reverse=True`, whose inputs are vectors `[..., d_model]`."""
        if not self.mask_zero:
            return None
        is_float = "float" in str(inputs.dtype)
        if is_float and len(inputs.shape) >= 3 and inputs.shape[-1] == self.d_model:
            return None
        return ops.not_equal(inputs, PAD_ID)

    def add_logits_bias(self, logits):
        """`logits` (of `x E^T`, any float dtype) in float32, plus the output bias if any."""
        logits = ops.cast(logits, "float32")
        if self.logits_bias is None:
            return logits
        return logits + ops.cast(self.logits_bias, "float32")

    def positions(self, x, start_index=0):
        """The position encodings `[len, d_model]` or `[batch, len, d_model]` added to the
        embedded tokens `x [batch, len, d_model]` whose first token is at `start_index`
        (a scalar, or `[batch]`: each row's), `position_offset` added."""
        if self.position_offset:
            start_index = start_index + self.position_offset
        if self.positional == "learned":
            length = ops.shape(x)[-2]
            rows = self.max_length + self.position_offset
            # ([batch,] len, d_model)
            return self.position_embedding(position_ids(length, start_index, rows))
        return self.position_embedding(x, start_index=start_index)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "max_length": self.max_length,
            "positional": self.positional,
            "dropout": self.dropout,
            "tie_weights": self.tie_weights,
            "sinusoid_layout": self.sinusoid_layout,
            "sinusoid_frequencies": self.sinusoid_frequencies,
            "position_offset": self.position_offset,
            "output_bias": self.output_bias,
            "mask_zero": self.mask_zero,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "dtype": keras.dtype_policies.serialize(dtype_policy_with_sublayers(self)),
        }


__all__ = ["SinusoidalPositionEncoding", "TransformerEmbedding"]
