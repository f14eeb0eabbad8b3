"""The toy transduction the learning and decoding tests share: reversing random sequences.

Ids follow the trainer's SentencePiece vocabularies: 0 pad, 1 unk, 2 BOS, 3 EOS; the symbols
are ids FIRST_SYMBOL.. FIRST_SYMBOL + SYMBOLS - 1.
"""

import keras
import numpy as np

import keras_transformer as kt

BOS, EOS, FIRST_SYMBOL, SYMBOLS, MAX_LEN = 2, 3, 4, 16, 10
VOCAB_SIZE = FIRST_SYMBOL + SYMBOLS


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


def training_data():
    """The 6400 training pairs (seed 0)."""
    return reversal_task(6400, seed=0)


def held_out_data(n=500):
    """Pairs drawn with seed 1 whose source is not among the training sources."""
    seen = {tuple(row) for row in training_data()[0]}
    source, target = reversal_task(n, seed=1)
    unseen = np.array([tuple(row) not in seen for row in source])
    return source[unseen], target[unseen]


def train_reversal_model(epochs: int = 6):
    """A small model (the tiny preset at half its width, d_model 64 and d_ff 256, with one
    encoder and one decoder layer) trained 6 epochs (600 updates) on the task.

    One layer each side learns the task about as well as two, and about halves what every
    eager decoding step of tests/test_decoding.py costs; the cache across several layers is
    checked there on the random two-layer model.

    The learning rate warms up over 100 updates to 5e-3, then decays to zero on a cosine, so
    the run ends settled. With the paper's schedule, which never decays to zero, how well one
    seed's run learned moved with the float rounding of the gradients: across epochs 10-22
    the held-out exact-reversal rate of greedy decoding swung between 0.85 and 0.98 (two
    layers each side). With this one (seed 0, one layer each side), the held-out token
    accuracy of greedy decoding is 0.999 after 6 epochs (0.996 of the sequences exact) and
    0.999 after 4 (0.992 exact; the JAX pass trains 4), clear of the tests' thresholds. Tests
    compare single sentences with the model's own decode.
    """
    keras.utils.set_random_seed(0)
    source, target = training_data()
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=VOCAB_SIZE,
        d_model=64,
        d_ff=256,
        dropout=0.0,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    model = kt.build_transformer(config)
    batch_size, warmup = 64, 100
    updates = epochs * len(source) // batch_size
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, updates - warmup, warmup_target=5e-3, warmup_steps=warmup
    )
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=kt.losses.LabelSmoothedCrossEntropy(),
        jit_compile=True,
    )
    model.fit(
        {"source_ids": source, "target_ids": target[:, :-1]},
        target[:, 1:],
        batch_size=batch_size,
        epochs=epochs,
        verbose=0,
    )
    return model
