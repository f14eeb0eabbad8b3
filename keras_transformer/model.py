"""The encoder-decoder Transformer as a functional-API `keras.Model` (paper section 3)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_transformer import _backends as backends
from keras_transformer import _workarounds as workarounds
from keras_transformer import losses
from keras_transformer import ops as kt_ops
from keras_transformer.config import PAD_ID, TransformerConfig
from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.embedding import TransformerEmbedding
from keras_transformer.layers.encoder import Encoder
from keras_transformer.layers.quantization import dtype_policy_with_sublayers


class TokenLossTraining:
    """What `Transformer` and `TransformerSeq2SeqLM` add to Keras's training: the encoder
    alone (`encode`, for the searches), the token-weighted loss that `fit` reports, the
    token counts of `kt.data.accumulation_groups`, and a training step traced once.

    Mixed into a `keras.Model` that has `source_embedding`, `encoder`, `token_loss` (a
    `keras.metrics.Mean` named "loss") and `_token_normalizer` (None).
    """

    def encode(self, source_ids, training=False):
        """Runs the encoder alone: `(memory [batch, src_len, d_model], source padding mask)`."""
        source_mask = kt_ops.padding_mask(source_ids)
        memory = self.encoder(
            self.source_embedding(source_ids, training=training),
            padding_mask=source_mask,
            training=training,
        )
        return memory, source_mask

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        if loss is not None and self._reports_token_loss():
            # This replica's `loss` is its tokens' summed loss over the global batch's token
            # count: the running mean gets that sum, over this replica's own tokens.
            tokens = ops.sum(ops.cast(ops.not_equal(y, PAD_ID), "float32"))
            global_tokens = ops.maximum(losses.global_sum(tokens), 1.0)
            token_sum = loss * global_tokens
            self.token_loss.update_state(ops.divide_no_nan(token_sum, tokens), tokens)
            if self._token_normalizer is not None:
                # The batch's token sum over its accumulation group's mean tokens a batch.
                normalizer = losses.global_sum(ops.sum(self._token_normalizer))
                loss = loss * global_tokens / ops.maximum(normalizer, 1.0)
        return loss

    def _reports_token_loss(self) -> bool:
        return isinstance(self.loss, losses.LabelSmoothedCrossEntropy)

    @property
    def metrics(self):
        """Keras's metrics, with the token-weighted loss in place of Keras's `loss`."""
        keras_metrics = super().metrics
        if not self.compiled or not self._reports_token_loss():
            return [m for m in keras_metrics if m is not self.token_loss]
        return [self.token_loss] + [m for m in keras_metrics if m.name != "loss"]

    def fit(self, x=None, *args, **kwargs):
        """`keras.Model.fit`, with two differences.

        A `tf.data.Dataset` shuffles itself (`kt.data.make_dataset`'s do), and Keras ignores
        `fit`'s `shuffle` for one, warning when it is True, its default: for a dataset, the
        default here is False, so nothing is ignored or warned about.

        On TensorFlow the optimizer's variables are created before the training step is
        traced, so that it is traced once, not twice (`backends.build_optimizer`): the first
        step comes sooner, the training is the same. Everything else is Keras's own."""
        shuffle_given = "shuffle" in kwargs or len(args) >= 8  # fit(x, y, ..., shuffle, ...)
        if not shuffle_given and _is_tf_dataset(x):
            kwargs["shuffle"] = False
        backends.build_optimizer(self)
        return super().fit(x, *args, **kwargs)

    def train_on_batch(self, *args, **kwargs):
        """`keras.Model.train_on_batch`, its step traced once as `fit`'s is."""
        backends.build_optimizer(self)
        return super().train_on_batch(*args, **kwargs)

    def train_step(self, *args):
        """Keras's training step (`(data)` on TensorFlow, `(state, data)` on JAX), with the
        token count of `kt.data.accumulation_groups` taken out of the inputs for
        `compute_loss`."""
        *state, data = args
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if isinstance(x, dict) and losses.TOKEN_NORMALIZER in x:
            x = dict(x)
            self._token_normalizer = x.pop(losses.TOKEN_NORMALIZER)  # read by compute_loss
            data = keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        try:
            result = super().train_step(*state, data)
        finally:
            self._token_normalizer = None
        return backends.step_result(self, result)

    def test_step(self, *args):
        return backends.step_result(self, super().test_step(*args))


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(TokenLossTraining, workarounds.MultiWorkerFit, keras.Model):
    """The Transformer of "Attention Is All You Need", built with the functional API.

    Inputs `{"source_ids": int32 [batch, src_len], "target_ids": int32 [batch, tgt_len]}`
    (the decoder input, shifted right); output float32 logits `[batch, tgt_len,
    target_vocab]`, also under mixed precision. Token id 0 is padding in both inputs: the
    padding masks are derived from the ids, so padded positions never influence real ones.

    It is a functional `keras.Model` (`model.layers`, `model.summary()`, `model.fit` and
    `.keras` files all work as usual) whose config is the `TransformerConfig`, so a saved
    model is rebuilt from its config and weights. Its layers are reachable by name:
    "embedding" (or "source_embedding" and "target_embedding" without shared embeddings),
    "encoder" and "decoder".

    Compiled with `kt.losses.LabelSmoothedCrossEntropy`, the `loss` (and `val_loss`) that
    `fit` and `evaluate` report (progress bar, History, TensorBoard) is the mean over every
    target token seen, not Keras's mean of batch means weighted by sentences per batch, which
    token-sized batches of short and long sentences would skew. Under gradient accumulation
    (the optimizer's `gradient_accumulation_steps`), batches from
    `kt.data.accumulation_groups` make each update the mean over all the tokens of its
    batches; others make it Keras's mean of the batches' token means.

    Args:
        config: `TransformerConfig` or its dict. The sizes and switches.
        dtype: a `keras.dtype_policies.DTypePolicyMap` (or its config) or None. The policies
            of quantized layers, which `get_config` records after `model.quantize`, over
            `config.dtype` for the rest. Defaults to None: `config.dtype` for every layer.
        **kwargs: other `keras.Model` arguments (`name`...).

    Examples:
        >>> import keras
        >>> import numpy as np
        >>> from keras_transformer import Transformer, TransformerConfig
        >>> model = Transformer(TransformerConfig.preset("tiny", vocab_size=100))
        >>> logits = model({"source_ids": np.array([[5, 6, 7, 0]]),
        ...                 "target_ids": np.array([[2, 9, 0]])})
        >>> tuple(logits.shape), keras.ops.dtype(logits)  # (batch, tgt_len, target_vocab)
        ((1, 3, 100), 'float32')
    """

    def __init__(self, config: TransformerConfig | dict, dtype=None, **kwargs):
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        kwargs.setdefault("name", "transformer")
        dtype = config.dtype if dtype is None else keras.dtype_policies.get(dtype)
        network = build_network(config, dtype)
        super().__init__(
            inputs=network.inputs,
            outputs=network.target_embedding(network.hidden, reverse=True),  # float32 logits
            **kwargs,
        )
        if dtype is not None:
            # The model's own policy (functional models ignore a dtype argument): under
            # "mixed_float16", compile() then wraps the optimizer in a LossScaleOptimizer, so
            # small float16 gradients do not underflow. (A quantized model's map: its default.)
            self.dtype_policy = getattr(dtype, "default_policy", dtype)
        self.config = config
        self.source_embedding = network.source_embedding
        self.target_embedding = network.target_embedding
        self.encoder = network.encoder
        self.decoder = network.decoder
        self.token_loss = keras.metrics.Mean(name="loss")
        self._token_normalizer = None  # the training step's, from kt.data.accumulation_groups

    def get_config(self):
        config = {"config": self.config.to_dict(), "name": self.name, "trainable": self.trainable}
        policy = dtype_policy_with_sublayers(self)
        if isinstance(policy, keras.dtype_policies.DTypePolicyMap):  # after model.quantize
            config["dtype"] = keras.dtype_policies.serialize(policy)
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return cls(**config)


class Network(NamedTuple):
    """The layers of the encoder-decoder and the symbolic tensors that join them."""

    inputs: dict  # {"source_ids", "target_ids"}: keras.Input int32 [batch, len]
    memory: Any  # the encoder's output [batch, src_len, d_model]
    hidden: Any  # the decoder's output [batch, tgt_len, d_model]
    source_embedding: TransformerEmbedding
    target_embedding: TransformerEmbedding  # called with reverse=True: the logits
    encoder: Encoder
    decoder: Decoder


def build_network(config: TransformerConfig, dtype=None, layers_of=None) -> Network:
    """The functional graph of the encoder-decoder (paper 3.1, Figure 1), up to the decoder's
    output: what `Transformer` and `TransformerBackbone` are built from. `dtype` is the
    layers' policy (None: `config.dtype`). `layers_of`: a model built from `config` (a
    `Transformer` or `TransformerBackbone`) whose embeddings, encoder and decoder the graph
    calls instead of new layers, so that both models hold the same variables."""
    dtype = config.dtype if dtype is None else dtype
    if layers_of is not None:
        return _wire(
            layers_of.source_embedding,
            layers_of.target_embedding,
            layers_of.encoder,
            layers_of.decoder,
        )

    def embedding(vocab_size, name, output_bias=False):
        return TransformerEmbedding(
            vocab_size,
            config.d_model,
            max_length=config.max_length,
            positional=config.positional,
            sinusoid_layout=config.sinusoid_layout,
            sinusoid_frequencies=config.sinusoid_frequencies,
            position_offset=config.position_offset,
            output_bias=output_bias,
            dropout=config.dropout,
            dtype=dtype,
            name=name,
        )

    bias = config.output_bias  # on the logits: the target side's
    if config.share_embeddings:
        source_embedding = target_embedding = embedding(config.target_vocab, "embedding", bias)
    else:
        source_embedding = embedding(config.source_vocab, "source_embedding")
        target_embedding = embedding(config.target_vocab, "target_embedding", bias)
    block = dict(
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        activation=config.activation,
        norm_first=config.norm_first,
        layer_norm_epsilon=config.layer_norm_epsilon,
        dtype=dtype,
    )
    encoder = Encoder(config.num_encoder_layers, name="encoder", **block)
    decoder = Decoder(config.num_decoder_layers, name="decoder", **block)
    return _wire(source_embedding, target_embedding, encoder, decoder)


def _wire(source_embedding, target_embedding, encoder, decoder) -> Network:
    """The graph from the ids to the decoder's output through these layers."""
    source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
    target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
    source_mask = kt_ops.padding_mask(source_ids)  # (batch, src_len)
    target_mask = kt_ops.padding_mask(target_ids)  # (batch, tgt_len)
    memory = encoder(source_embedding(source_ids), padding_mask=source_mask)
    hidden = decoder(
        target_embedding(target_ids),
        memory,
        padding_mask=target_mask,
        encoder_padding_mask=source_mask,
    )
    return Network(
        {"source_ids": source_ids, "target_ids": target_ids},
        memory,
        hidden,
        source_embedding,
        target_embedding,
        encoder,
        decoder,
    )


def _is_tf_dataset(value) -> bool:
    """Whether `value` is a `tf.data.Dataset`, without importing TensorFlow."""
    tensorflow = sys.modules.get("tensorflow")
    return tensorflow is not None and isinstance(value, tensorflow.data.Dataset)


def build_transformer(config: TransformerConfig) -> Transformer:
    """Builds the Transformer described by `config` (a functional-API `keras.Model`).

    Examples:
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> model = build_transformer(TransformerConfig.preset("base"))  # the paper's base model
        >>> round(model.count_params() / 1e6)  # millions, with 37,000 shared pieces
        63
    """
    if not isinstance(config, TransformerConfig):
        raise ValueError(f"config must be a TransformerConfig, got {type(config).__name__}")
    return Transformer(config)


@contextlib.contextmanager
def zeros_initialized():
    """Every weight that a Keras layer creates inside the block starts as zeros instead of
    its initializer's draws, for a model whose every weight a checkpoint then sets (as
    transformers' `no_init_weights` and accelerate's `init_empty_weights` do for PyTorch).

    A random initializer costs time and, on TensorFlow, memory that stays with the process:
    building NLLB-200-600M's 1 GB embedding table with its draws raised the resident memory
    by 3 GB, with zeros by the table's size (`benchmarks.import_memory`). Not thread-safe:
    it patches `keras.layers.Layer.add_weight` while the block runs.
    """
    original = keras.layers.Layer.add_weight

    def add_weight(self, shape=None, initializer=None, *args, **kwargs):
        return original(self, shape, "zeros", *args, **kwargs)

    keras.layers.Layer.add_weight = add_weight
    try:
        yield
    finally:
        keras.layers.Layer.add_weight = original


__all__ = ["Transformer", "build_transformer"]
