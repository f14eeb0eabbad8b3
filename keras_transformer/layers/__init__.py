"""Every sublayer of the Transformer as a reusable, serializable `keras.layers.Layer`."""

from keras_transformer.layers import _renamed
from keras_transformer.layers.attention import AttentionOutput, TransformerAttention
from keras_transformer.layers.block import LayerOutput, TransformerBlock
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.dropout import PerReplicaDropout
from keras_transformer.layers.embedding import SinusoidalPositionEncoding, TransformerEmbedding
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.residual import AddAndNorm


def __getattr__(name: str):
    # PEP 562: `MultiHeadAttention` and `Dropout`, the former names of TransformerAttention
    # and PerReplicaDropout, for one release (layers/_renamed.py).
    if name in _renamed.RENAMED:
        return _renamed.deprecated(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AddAndNorm",
    "AttentionOutput",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "LayerOutput",
    "PerReplicaDropout",
    "PositionwiseFeedForward",
    "SinusoidalPositionEncoding",
    "TransformerAttention",
    "TransformerBlock",
    "TransformerEmbedding",
]
