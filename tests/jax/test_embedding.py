"""The tied output projection on JAX: the table of `kt.layers.TransformerEmbedding` takes the
logits of `[batch, len, d_model]` as one 2-D product (keras_transformer/_workarounds.py,
`ReversibleEmbedding`), and gives Keras's own layer's logits, loss and gradients under
`jax.jit`."""

import jax
import keras
import numpy as np

import keras_transformer as kt

VOCAB, D_MODEL = 50, 8


def _loss_and_grads(table_layer):
    """`jax.jit` of the label-smoothed loss of `table_layer`'s logits, with its gradients
    for the table and the hidden states (as in a training step)."""

    def loss(table, hidden, labels):
        logits, _ = table_layer.stateless_call([table], [], hidden, reverse=True)
        return kt.losses.smoothed_cross_entropy(labels, logits, 0.1).sum(), logits

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))


def test_the_2d_logits_product_gives_keras_logits_and_gradients():
    layer = kt.layers.TransformerEmbedding(vocab_size=VOCAB, d_model=D_MODEL)
    layer(np.array([[5, 7, 9, 0]], "int32"))
    keras_table = keras.layers.ReversibleEmbedding(VOCAB, D_MODEL)
    keras_table.build((None, None))
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 4, D_MODEL)).astype("float32")  # (batch, len, d_model)
    labels = rng.integers(1, VOCAB, (3, 4)).astype("int32")
    table = layer.token_embedding.embeddings.value

    (loss, logits), grads = _loss_and_grads(layer.token_embedding)(table, hidden, labels)
    (keras_loss, keras_logits), keras_grads = _loss_and_grads(keras_table)(table, hidden, labels)

    assert logits.shape == (3, 4, VOCAB)
    np.testing.assert_allclose(logits, keras_logits, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(loss, keras_loss, rtol=1e-6)
    for grad, keras_grad in zip(grads, keras_grads, strict=True):
        np.testing.assert_allclose(grad, keras_grad, rtol=1e-5, atol=1e-6)
