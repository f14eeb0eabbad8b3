"""Every sublayer of the Transformer as a reusable, serializable `keras.layers.Layer`."""

from keras_transformer.layers.attention import AttentionOutput, MultiHeadAttention
from keras_transformer.layers.block import LayerOutput, TransformerBlock
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import SinusoidalPositionEncoding, TransformerEmbedding
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.residual import AddAndNorm

__all__ = [
    "AddAndNorm",
    "AttentionOutput",
    "Decoder",
    "DecoderLayer",
    "Dropout",
    "Encoder",
    "EncoderLayer",
    "LayerOutput",
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "SinusoidalPositionEncoding",
    "TransformerBlock",
    "TransformerEmbedding",
]
