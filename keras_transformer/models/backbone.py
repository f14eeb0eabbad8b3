"""`TransformerBackbone`: the encoder-decoder of the paper as a keras-hub `Backbone`."""

from __future__ import annotations

import keras
import keras_hub

from keras_transformer.config import TransformerConfig
from keras_transformer.model import build_network
from keras_transformer.models.keywords import check_keywords

# The constructor's keywords, and `keras.Model`'s that it passes on (Keras's functional
# models drop any other without a word: the constructor refuses them by name).
ARGUMENTS = ("config", "dtype", "layers_of")
MODEL_ARGUMENTS = ("name", "trainable")
# What keras-hub's loader (`from_preset`) takes for a backbone: its own `load_weights`, and
# the keywords it passes on to the constructor.
LOADER_KEYWORDS = ("load_weights", "dtype", *MODEL_ARGUMENTS)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerBackbone(keras_hub.models.Backbone):
    """The Transformer's encoder and decoder (paper 3.1) as a keras-hub `Backbone`.

    A functional model from `{"source_ids": int32 [batch, src_len], "target_ids": int32
    [batch, tgt_len]}` (token id 0 is padding; the masks come from the ids) to
    `{"encoder_sequence_output": [batch, src_len, d_model], "decoder_sequence_output":
    [batch, tgt_len, d_model]}`, as keras-hub's encoder-decoder backbones output. The
    pre-softmax projection is the target embedding, reversed (paper 3.4):
    `backbone.target_embedding(hidden, reverse=True)` gives the logits, which is what
    `TransformerSeq2SeqLM` adds. Its layers are those of `kt.Transformer`, by the same
    names ("embedding" or "source_embedding" and "target_embedding", "encoder", "decoder"),
    so weights move between the two with `set_weights`.

    Args:
        config: `TransformerConfig` or its dict. The sizes and switches.
        dtype: a dtype policy, its name, or a `DTypePolicyMap` (after `quantize`) or None.
            Defaults to None: `config.dtype`.
        layers_of: None, or a `kt.Transformer` built from `config` whose layers (and so
            variables) the backbone uses instead of new ones: no copy of the weights, and
            training either model trains both. Not part of the config: a backbone saved
            and loaded again has its own layers.
        **kwargs: `name` and `trainable`, `keras.Model`'s. Any other keyword is refused by
            name (ValueError).

    Examples:
        >>> import numpy as np
        >>> from keras_transformer import TransformerConfig
        >>> from keras_transformer.models import TransformerBackbone
        >>> backbone = TransformerBackbone(TransformerConfig.preset("tiny", vocab_size=100))
        >>> outputs = backbone({"source_ids": np.array([[5, 6, 3]]),
        ...                     "target_ids": np.array([[2, 9]])})
        >>> tuple(outputs["decoder_sequence_output"].shape)
        (1, 2, 128)
    """

    def __init__(self, config: TransformerConfig | dict, dtype=None, *, layers_of=None, **kwargs):
        check_keywords(kwargs, MODEL_ARGUMENTS, type(self).__name__, ARGUMENTS)
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        kwargs.setdefault("name", "transformer_backbone")
        if dtype is None:
            dtype = config.dtype
        policy = None if dtype is None else keras.dtype_policies.get(dtype)
        if layers_of is not None and layers_of.config != config:
            raise ValueError(
                f"layers_of: the model {layers_of.name!r} was built from another config "
                "than the backbone's"
            )
        network = build_network(config, policy, layers_of=layers_of)
        super().__init__(
            inputs=network.inputs,
            outputs={
                "encoder_sequence_output": network.memory,
                "decoder_sequence_output": network.hidden,
            },
            dtype=getattr(policy, "default_policy", policy),
            **kwargs,
        )
        self.config = config
        self.source_embedding = network.source_embedding
        self.target_embedding = network.target_embedding
        self.token_embedding = network.target_embedding  # keras-hub's name for it
        self.encoder = network.encoder
        self.decoder = network.decoder

    @classmethod
    def from_preset(cls, preset, load_weights: bool = True, **kwargs):
        """keras-hub's `Backbone.from_preset`: the backbone of a preset directory (or
        keras-hub handle), with `dtype`, `name` or `trainable` over the preset's. Any other
        keyword is refused by name (ValueError), before anything is read or downloaded."""
        check_keywords(kwargs, LOADER_KEYWORDS, f"{cls.__name__}.from_preset")
        return super().from_preset(preset, load_weights, **kwargs)

    @classmethod
    def from_config(cls, config):
        """keras-hub's `Backbone.from_config`, with a keyword that no saved config holds
        refused by `from_preset`'s name: keras-hub's loader (`keras_hub.models.Backbone.
        from_preset(directory, **kwargs)`) merges its keywords into the backbone's config."""
        given = {name: value for name, value in config.items() if name != "config"}
        check_keywords(given, LOADER_KEYWORDS, "from_preset")
        return super().from_config(config)

    def get_config(self):
        # keras-hub's: name, trainable and the dtype policy (a map of the quantized layers'
        # policies after `quantize`), with the model's config.
        return {**super().get_config(), "config": self.config.to_dict()}

    def default_lora_layer_names(self):
        """The attention projections LoRA adapts (keras-hub's `enable_lora`)."""
        return ["query", "value"]


__all__ = ["TransformerBackbone"]
