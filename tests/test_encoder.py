"""EncoderLayer and Encoder: Keras's layer test, padding invariance, stacking."""

import numpy as np
import pytest
from keras.src.testing import TestCase

from keras_transformer import layers

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 6, 16)).astype("float32")


class EncoderLayerTest(TestCase):
    def test_encoder_layer(self):
        for norm_first in (False, True):
            self.run_layer_test(
                layers.EncoderLayer,
                init_kwargs={
                    "num_heads": 4,
                    "d_ff": 32,
                    "dropout": 0.1,
                    "norm_first": norm_first,
                    "attention_dropout": 0.1,
                    "activation_dropout": 0.1,
                },
                input_shape=(2, 6, 16),
                expected_output_shape=(2, 6, 16),
                # attention 8, feed-forward 4, two layer norms 2 each
                expected_num_trainable_weights=16,
                expected_num_seed_generators=4,  # attention, activation, two residual
            )

    def test_encoder(self):
        self.run_layer_test(
            layers.Encoder,
            init_kwargs={"num_layers": 3, "num_heads": 4, "d_ff": 32, "norm_first": True},
            input_shape=(2, 6, 16),
            expected_output_shape=(2, 6, 16),
            expected_num_trainable_weights=3 * 16 + 2,  # + the final layer norm
            expected_num_seed_generators=3 * 2,  # residual dropouts; rate-0 dropouts have none
        )


@pytest.mark.parametrize("cls", [layers.EncoderLayer, layers.Encoder])
@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_changes_nothing_at_real_positions(cls, norm_first):
    kwargs = {"num_layers": 2} if cls is layers.Encoder else {}
    layer = cls(num_heads=4, d_ff=32, norm_first=norm_first, **kwargs)
    short = layer(X[:, :4])
    padded = np.concatenate([X[:, :4], RNG.normal(size=(2, 3, 16)).astype("float32")], axis=1)
    mask = np.array([[True] * 4 + [False] * 3] * 2)
    np.testing.assert_allclose(layer(padded, padding_mask=mask)[:, :4], short, atol=1e-5)


def test_encoder_is_the_composition_of_its_layers():
    encoder = layers.Encoder(num_layers=2, num_heads=4, d_ff=32)
    out = encoder(X)
    first, second = encoder.encoder_layers
    np.testing.assert_allclose(out, second(first(X)), atol=1e-6)


def test_width_must_be_divisible_by_heads():
    with pytest.raises(ValueError, match="d_model=16 is not divisible by num_heads=3"):
        layers.EncoderLayer(num_heads=3, d_ff=8)(X)


def test_at_least_one_layer():
    with pytest.raises(ValueError, match="num_layers=0 must be >= 1"):
        layers.Encoder(num_layers=0, num_heads=2, d_ff=8)
