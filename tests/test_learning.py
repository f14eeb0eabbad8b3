"""The tiny model learns a toy transduction: reversing random sequences.

Judged on held-out sequences by greedy decoding (each token predicted from the model's own
previous outputs), not by teacher-forced accuracy.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

BOS, EOS, FIRST_SYMBOL, SYMBOLS, MAX_LEN = 2, 3, 4, 16, 10


def reversal_task(n, seed):
    """Sources of 4..MAX_LEN random symbols; targets BOS + reversed source + EOS."""
    rng = np.random.default_rng(seed)
    source = np.zeros((n, MAX_LEN), "int32")
    target = np.zeros((n, MAX_LEN + 2), "int32")
    for i in range(n):
        length = rng.integers(4, MAX_LEN + 1)
        symbols = rng.integers(FIRST_SYMBOL, FIRST_SYMBOL + SYMBOLS, length)
        source[i, :length] = symbols
        target[i, 0], target[i, 1 : length + 1], target[i, length + 1] = BOS, symbols[::-1], EOS
    return source, target


def greedy_decode(model, source):
    """Predicts MAX_LEN + 1 tokens after BOS, one at a time, from the model's own outputs."""
    batch = tf.shape(source)[0]
    output = tf.concat([tf.fill([batch, 1], BOS), tf.zeros([batch, MAX_LEN + 1], tf.int32)], 1)
    for t in range(MAX_LEN + 1):
        logits = model({"source_ids": source, "target_ids": output[:, :-1]})
        next_token = tf.argmax(logits[:, t], -1, output_type=tf.int32)
        index = tf.stack([tf.range(batch), tf.fill([batch], t + 1)], axis=1)
        output = tf.tensor_scatter_nd_update(output, index, next_token)
    return output


@pytest.mark.slow
def test_tiny_model_learns_to_reverse_sequences():
    keras.utils.set_random_seed(0)
    source, target = reversal_task(6400, seed=0)
    held_out_source, held_out_target = reversal_task(500, seed=1)
    seen = {tuple(row) for row in source}
    unseen = np.array([tuple(row) not in seen for row in held_out_source])
    held_out_source, held_out_target = held_out_source[unseen], held_out_target[unseen]
    assert len(held_out_source) > 450

    config = kt.TransformerConfig.preset("tiny", vocab_size=FIRST_SYMBOL + SYMBOLS, dropout=0.0)
    model = kt.build_transformer(config)
    model.compile(
        optimizer=keras.optimizers.Adam(
            kt.WarmupSchedule(config.d_model, warmup_steps=300, scale=1.5),
            beta_1=0.9,
            beta_2=0.98,
            epsilon=1e-9,
        ),
        loss=kt.losses.LabelSmoothedCrossEntropy(),
        jit_compile=True,
    )
    model.fit(
        {"source_ids": source, "target_ids": target[:, :-1]},
        target[:, 1:],
        batch_size=64,
        epochs=12,
        verbose=0,
    )

    predicted = tf.function(greedy_decode, jit_compile=True)(model, tf.constant(held_out_source))
    real = held_out_target[:, 1:] != 0
    accuracy = (np.asarray(predicted)[:, 1:] == held_out_target[:, 1:])[real].mean()
    assert accuracy >= 0.95, f"held-out token accuracy {accuracy:.3f}"
