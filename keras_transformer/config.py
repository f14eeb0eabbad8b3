"""`TransformerConfig`: every size and switch of the model in one dataclass, with presets.

The defaults are the paper's base model (Vaswani et al., 2017, Table 3). YAML files and the
command line only override fields of this object; nothing else configures the model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras

from keras_transformer.special_ids import PAD_ID  # re-exported: kt.config.PAD_ID, kt.PAD_ID

POSITIONAL_KINDS = ("sinusoidal", "learned")
SINUSOID_LAYOUTS = ("interleaved", "concatenated")
SINUSOID_FREQUENCIES = ("paper", "fairseq")

# Overrides of the defaults (the paper's base model) for each preset.
PRESETS: dict[str, dict[str, Any]] = {
    # Sized for a 2-core CPU: trains in minutes on a small corpus.
    "tiny": dict(
        vocab_size=8000,
        d_model=128,
        num_heads=4,
        d_ff=512,
        num_encoder_layers=2,
        num_decoder_layers=2,
    ),
    "small": dict(
        vocab_size=16000,
        d_model=256,
        num_heads=4,
        d_ff=1024,
        num_encoder_layers=3,
        num_decoder_layers=3,
    ),
    # Table 3 of the paper: base (65M parameters) and big (213M), shared 37,000-token vocabulary.
    "base": dict(),
    "big": dict(d_model=1024, num_heads=16, d_ff=4096, dropout=0.3),
}


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Sizes and switches of an encoder-decoder Transformer.

    Defaults reproduce the paper's base model (section 3 and Table 3).

    Args:
        vocab_size: int. Size of the vocabulary shared by source and target. Defaults to 37000.
        source_vocab_size: int or None. Source vocabulary size when it differs from the target's
            (needs `share_embeddings=False`). Defaults to None (= `vocab_size`).
        target_vocab_size: int or None. Target vocabulary size, likewise. Defaults to None.
        share_embeddings: bool. One weight matrix for the source embedding, the target embedding
            and the pre-softmax projection (paper 3.4). When False, the source embedding is its
            own matrix and the target embedding stays tied to the output projection. Defaults to
            True.
        d_model: int. Width of every sublayer output. Defaults to 512.
        num_heads: int. Attention heads; must divide `d_model`. Defaults to 8.
        d_ff: int. Inner width of the position-wise feed-forward network. Defaults to 2048.
        num_encoder_layers: int. Encoder layers (N). Defaults to 6.
        num_decoder_layers: int. Decoder layers (N). Defaults to 6.
        dropout: float. Residual dropout on each sublayer output and on the embedding sums
            (paper 5.4). Defaults to 0.1.
        attention_dropout: float. Dropout on the attention probabilities. Defaults to 0.0.
        activation_dropout: float. Dropout after the feed-forward activation. Defaults to 0.0.
        max_length: int. Longest sequence, in tokens (EOS or BOS included), that the model
            accepts; learned position tables have this many rows. Training skips pairs longer
            than it (`kt.data.make_dataset`: truncating would teach the model to drop words)
            and decoding truncates sources to it. Defaults to 256.
        norm_first: bool. False is the paper's post-norm `LayerNorm(x + Sublayer(x))`; True is
            pre-norm `x + Sublayer(LayerNorm(x))` with a final LayerNorm on each stack.
            Defaults to False.
        activation: str. Feed-forward activation, any Keras activation name ("relu" as the
            paper, "gelu" as BERT). Defaults to "relu".
        positional: str. "sinusoidal" (paper 3.5) or "learned" (as BERT). Defaults to
            "sinusoidal".
        sinusoid_layout: str. Where the sinusoid's sines and cosines go: "interleaved" (the
            paper's, PE(pos, 2i) = sin and PE(pos, 2i + 1) = cos) or "concatenated" (all sines
            then all cosines, same frequencies, as Marian and tensor2tensor lay them out).
            Defaults to "interleaved".
        sinusoid_frequencies: str. The sinusoid's d_model / 2 frequencies: "paper" (section
            3.5, 1 / 10000^(2i / d_model)) or "fairseq" (1 / 10000^(i / (d_model / 2 - 1)),
            so that the last is exactly 1 / 10000: tensor2tensor's `get_timing_signal_1d`,
            fairseq's and M2M100's, NLLB-200's). Defaults to "paper".
        position_offset: int >= 0. The position of a sequence's first token, in the sinusoid
            or the learned table (which then has `max_length + position_offset` rows): 0 in
            the paper; fairseq's models (M2M100, NLLB-200) count from their padding id + 1, 2.
            Defaults to 0.
        output_bias: bool. A bias added to the output logits (Marian's `final_logits_bias`);
            the paper's projection has none. Defaults to False.
        layer_norm_epsilon: float. Epsilon of every LayerNorm. Defaults to 1e-6.
        dtype: str or None. Keras dtype policy of every layer, e.g. "mixed_float16" or
            "mixed_bfloat16"; None uses Keras's global policy. Defaults to None.

    Examples:
        >>> from keras_transformer import TransformerConfig
        >>> config = TransformerConfig.preset("tiny", vocab_size=1000)
        >>> config.d_model, config.num_heads
        (128, 4)
    """

    vocab_size: int = 37000
    source_vocab_size: int | None = None
    target_vocab_size: int | None = None
    share_embeddings: bool = True
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    max_length: int = 256
    norm_first: bool = False
    activation: str = "relu"
    positional: str = "sinusoidal"
    sinusoid_layout: str = "interleaved"
    sinusoid_frequencies: str = "paper"
    position_offset: int = 0
    output_bias: bool = False
    layer_norm_epsilon: float = 1e-6
    dtype: str | None = None

    def __post_init__(self) -> None:
        self._check_numbers()
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}"
            )
        self._check_positions()
        self._check_keras_settings()
        if self.share_embeddings and self.source_vocab != self.target_vocab:
            raise ValueError(
                f"share_embeddings=True needs one vocabulary, but source_vocab_size="
                f"{self.source_vocab} != target_vocab_size={self.target_vocab}"
            )

    def _check_numbers(self) -> None:
        """Sizes are ints >= 1 (vocabularies >= 2), dropouts in [0, 1), flags booleans."""
        for name in (
            "vocab_size",
            "d_model",
            "num_heads",
            "d_ff",
            "num_encoder_layers",
            "num_decoder_layers",
            "max_length",
        ):
            _check_int(name, getattr(self, name), minimum=1)
        for name in ("source_vocab_size", "target_vocab_size"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), minimum=2)
        _check_int("vocab_size", self.vocab_size, minimum=2)
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"{name}={value!r} must be a number in [0, 1)")
        for name in ("share_embeddings", "norm_first", "output_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be true or false")

    def _check_positions(self) -> None:
        """The position encoding's settings (paper 3.5)."""
        if self.positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional={self.positional!r} must be one of {POSITIONAL_KINDS}")
        if self.sinusoid_layout not in SINUSOID_LAYOUTS:
            raise ValueError(
                f"sinusoid_layout={self.sinusoid_layout!r} must be one of {SINUSOID_LAYOUTS}"
            )
        if self.sinusoid_frequencies not in SINUSOID_FREQUENCIES:
            raise ValueError(
                f"sinusoid_frequencies={self.sinusoid_frequencies!r} must be one of "
                f"{SINUSOID_FREQUENCIES}"
            )
        _check_int("position_offset", self.position_offset, minimum=0)
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"d_model={self.d_model} must be even for sinusoidal positions")

    def _check_keras_settings(self) -> None:
        """What Keras reads: the activation's name, the layer norm's epsilon, the dtype policy."""
        if not isinstance(self.activation, str):
            raise ValueError(f"activation={self.activation!r} must be a Keras activation name")
        try:
            keras.activations.get(self.activation)
        except ValueError:
            raise ValueError(
                f"activation={self.activation!r} is not a Keras activation (try 'relu' or 'gelu')"
            ) from None
        if isinstance(self.layer_norm_epsilon, bool) or not (
            isinstance(self.layer_norm_epsilon, (int, float)) and self.layer_norm_epsilon > 0
        ):
            raise ValueError(f"layer_norm_epsilon={self.layer_norm_epsilon!r} must be > 0")
        if self.dtype is not None:
            try:
                keras.dtype_policies.get(self.dtype)
            except ValueError:
                raise ValueError(
                    f"dtype={self.dtype!r} is not a Keras dtype policy "
                    "(try 'float32', 'mixed_float16' or 'mixed_bfloat16')"
                ) from None

    @property
    def source_vocab(self) -> int:
        """The source vocabulary size actually used."""
        return self.source_vocab_size or self.vocab_size

    @property
    def target_vocab(self) -> int:
        """The target vocabulary size actually used."""
        return self.target_vocab_size or self.vocab_size

    @property
    def head_dim(self) -> int:
        """d_k = d_v = d_model / h (paper 3.2.2)."""
        return self.d_model // self.num_heads

    def parameter_count(self) -> int:
        """The model's number of parameters, without building it (for planning memory and
        disk). Equals `build_transformer(self).count_params()`."""
        d, ff = self.d_model, self.d_ff
        attention = 4 * d * d + 4 * d  # query, key, value and output projections, biases
        feed_forward = 2 * d * ff + ff + d
        norm = 2 * d
        encoder_layer = attention + feed_forward + 2 * norm
        decoder_layer = 2 * attention + feed_forward + 3 * norm
        stacks = (
            self.num_encoder_layers * encoder_layer
            + self.num_decoder_layers * decoder_layer
            + (2 * norm if self.norm_first else 0)  # the final norms of pre-norm stacks
        )
        embeddings = 1 if self.share_embeddings else 2
        tables = self.target_vocab * d + (0 if self.share_embeddings else self.source_vocab * d)
        rows = self.max_length + self.position_offset
        positions = embeddings * rows * d if self.positional == "learned" else 0
        bias = self.target_vocab if self.output_bias else 0
        return stacks + tables + positions + bias

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """A named preset ("tiny", "small", "base", "big"), with fields overridden by keyword."""
        if name not in PRESETS:
            raise ValueError(f"preset={name!r} is unknown; choose one of {sorted(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Builds a config from a mapping, refusing keys that are not fields."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown TransformerConfig field(s) {unknown}; known fields: {sorted(known)}"
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """All fields as plain Python values (JSON/YAML serializable)."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> TransformerConfig:
        """A copy with some fields changed (validated like a new config)."""
        return self.from_dict({**self.to_dict(), **changes})


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} must be an integer")
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}")


__all__ = ["PAD_ID", "PRESETS", "TransformerConfig"]
