"""PositionwiseFeedForward: Keras's layer test and eq. 2 of the paper."""

import numpy as np
from keras.src.testing import TestCase

from keras_transformer import layers


class FeedForwardLayerTest(TestCase):
    def test_layer(self):
        self.run_layer_test(
            layers.PositionwiseFeedForward,
            init_kwargs={"d_ff": 32, "activation": "gelu", "dropout": 0.1},
            input_shape=(2, 5, 16),
            expected_output_shape=(2, 5, 16),
            expected_num_trainable_weights=4,
            expected_num_seed_generators=1,
        )


def test_equation_2():
    layer = layers.PositionwiseFeedForward(d_ff=12)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    out = layer(x)
    w1, b1 = layer.inner_dense.kernel.numpy(), layer.inner_dense.bias.numpy()
    w2, b2 = layer.output_dense.kernel.numpy(), layer.output_dense.bias.numpy()
    np.testing.assert_allclose(out, np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)


def test_each_position_alike():
    layer = layers.PositionwiseFeedForward(d_ff=12)
    x = np.random.default_rng(0).normal(size=(1, 4, 8)).astype("float32")
    np.testing.assert_allclose(layer(x)[:, 2:3], layer(x[:, 2:3]), atol=1e-6)
