"""The functional Transformer: shapes, masks, parameter counts, saving, precision, XLA."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt

VOCAB = 60
RNG = np.random.default_rng(0)


def tiny(**overrides):
    return kt.TransformerConfig.preset("tiny", **{"vocab_size": VOCAB, **overrides})


def shallow(**overrides):
    """The tiny preset with one encoder and one decoder layer, for the training tests: what
    they check (the loss, its scaling, accumulation, XLA) does not depend on depth, and each
    fit traces its model (and its gradient) anew: half the layers, about half the time."""
    return tiny(num_encoder_layers=1, num_decoder_layers=1, **overrides)


def ids(batch, length, seed):
    return np.random.default_rng(seed).integers(1, VOCAB, (batch, length)).astype("int32")


SOURCE = ids(3, 7, seed=1)
TARGET = ids(3, 6, seed=2)


def logits(model, source, target):
    return np.asarray(model({"source_ids": source, "target_ids": target}, training=False))


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    return kt.build_transformer(tiny())


def test_is_a_functional_model_with_named_inputs(model):
    assert isinstance(model, keras.Model)
    assert "Functional" in [cls.__name__ for cls in type(model).__mro__]
    assert [t.name for t in model.inputs] == ["source_ids", "target_ids"]
    assert model.inputs[0].dtype == "int32"
    assert {layer.name for layer in model.layers} >= {"embedding", "encoder", "decoder"}


def test_output_is_float32_logits_over_the_target_vocabulary(model):
    out = logits(model, SOURCE, TARGET)
    assert out.shape == (3, 6, VOCAB) and out.dtype == np.float32


def test_changing_later_target_tokens_leaves_earlier_logits_unchanged(model):
    base = logits(model, SOURCE, TARGET)
    for t in range(TARGET.shape[1] - 1):
        changed = TARGET.copy()
        changed[:, t + 1 :] = ids(3, TARGET.shape[1] - t - 1, seed=10 + t)
        out = logits(model, SOURCE, changed)
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5)
        assert not np.allclose(out[:, t + 1 :], base[:, t + 1 :])


def test_padding_source_and_target_changes_nothing_at_real_positions(model):
    base = logits(model, SOURCE, TARGET)
    source = np.pad(SOURCE, ((0, 0), (0, 5)))
    target = np.pad(TARGET, ((0, 0), (0, 4)))
    np.testing.assert_allclose(logits(model, source, target)[:, :6], base, atol=1e-5)


def test_a_sentence_does_not_depend_on_its_batch_neighbours(model):
    # Sentence 0 alone, then batched with longer and shorter neighbours (padded with 0).
    source = np.array([[5, 9, 12, 4]], "int32")
    target = np.array([[2, 7, 8]], "int32")
    alone = logits(model, source, target)
    batch_source = np.zeros((3, 9), "int32")
    batch_target = np.zeros((3, 5), "int32")
    batch_source[0, :4], batch_target[0, :3] = source[0], target[0]
    batch_source[1], batch_target[1] = ids(1, 9, 3)[0], ids(1, 5, 4)[0]
    batch_source[2, :2], batch_target[2, :1] = [3, 3], [2]
    np.testing.assert_allclose(logits(model, batch_source, batch_target)[:1, :3], alone, atol=1e-5)


@pytest.mark.parametrize("preset, paper_params", [("base", 65e6), ("big", 213e6)])
def test_parameter_counts_match_table_3(preset, paper_params):
    config = kt.TransformerConfig.preset(preset, vocab_size=37000)
    count = kt.build_transformer(config).count_params()
    assert abs(count - paper_params) / paper_params < 0.04, count


def test_separate_vocabularies():
    config = tiny(share_embeddings=False, source_vocab_size=40, target_vocab_size=70)
    model = kt.build_transformer(config)
    assert {"source_embedding", "target_embedding"} <= {layer.name for layer in model.layers}
    assert logits(model, ids(2, 5, 1) % 40, ids(2, 4, 2)).shape == (2, 4, 70)
    shared = kt.build_transformer(tiny(vocab_size=70))
    assert model.count_params() - shared.count_params() == 40 * 128


@pytest.mark.parametrize(
    "overrides",
    [
        dict(norm_first=True),
        dict(positional="learned"),
        dict(activation="gelu"),
        dict(attention_dropout=0.1, activation_dropout=0.1),
    ],
)
def test_variants_save_and_reload_identically(overrides, tmp_path):
    model = kt.build_transformer(tiny(**overrides))
    expected = logits(model, SOURCE, TARGET)
    model.save(tmp_path / "model.keras")
    restored = keras.saving.load_model(tmp_path / "model.keras")
    assert isinstance(restored, kt.Transformer) and restored.config == model.config
    np.testing.assert_array_equal(logits(restored, SOURCE, TARGET), expected)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.exact
def test_mixed_precision_keeps_float32_weights_and_logits(policy, model):
    mixed = kt.build_transformer(tiny(dtype=policy))
    mixed.set_weights(model.get_weights())
    out = logits(mixed, SOURCE, TARGET)
    assert out.dtype == np.float32 and np.isfinite(out).all()
    assert all(w.dtype == "float32" for w in mixed.weights)
    hidden = mixed.get_layer("decoder")
    assert hidden.compute_dtype == keras.DTypePolicy(policy).compute_dtype
    # Same predictions as float32 on almost every token.
    agreement = np.mean(out.argmax(-1) == logits(model, SOURCE, TARGET).argmax(-1))
    assert agreement > 0.9


def test_the_global_policy_applies_when_the_config_names_none():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = kt.build_transformer(tiny())
    assert model.get_layer("encoder").compute_dtype == "bfloat16"
    assert logits(model, SOURCE, TARGET).dtype == np.float32


def test_encode_equals_the_encoder_inside_the_model(model):
    memory, mask = model.encode(SOURCE)
    encoder_output = keras.Model(model.inputs, model.get_layer("encoder").output)
    expected = encoder_output({"source_ids": SOURCE, "target_ids": TARGET})
    np.testing.assert_allclose(memory, expected, atol=1e-6)
    np.testing.assert_array_equal(mask, SOURCE != 0)


@pytest.mark.exact
def test_fit_with_xla_the_paper_loss_and_schedule():
    model = kt.build_transformer(shallow(dropout=0.0))
    model.compile(
        optimizer=keras.optimizers.Adam(
            kt.WarmupSchedule(128, warmup_steps=50),
            beta_1=0.9,
            beta_2=0.98,
            epsilon=1e-9,
        ),
        loss=kt.losses.LabelSmoothedCrossEntropy(),
        metrics=[kt.metrics.MaskedAccuracy(), kt.metrics.Perplexity()],
        jit_compile=True,
    )
    target = np.pad(TARGET, ((0, 0), (0, 2)))
    x = {"source_ids": SOURCE, "target_ids": target[:, :-1]}
    history = model.fit(x, target[:, 1:], epochs=30, verbose=0)
    assert model.jit_compile
    losses = history.history["loss"]  # trained here: margins, not values
    assert losses[-1] < 0.5 * losses[0]
    assert history.history["masked_accuracy"][-1] > 0.9


def test_functional_model_runs_in_a_compiled_function(model):
    compiled = tf.function(lambda s, t: model({"source_ids": s, "target_ids": t}), jit_compile=True)
    np.testing.assert_allclose(compiled(SOURCE, TARGET), logits(model, SOURCE, TARGET), atol=1e-4)


def test_build_transformer_wants_a_config():
    with pytest.raises(ValueError, match="config must be a TransformerConfig, got dict"):
        kt.build_transformer({"d_model": 8})


@pytest.mark.parametrize("policy, scaled", [("mixed_float16", True), ("mixed_bfloat16", False)])
def test_float16_training_uses_loss_scaling(policy, scaled):
    model = kt.build_transformer(shallow(dtype=policy))
    model.compile(optimizer="adam", loss=kt.losses.LabelSmoothedCrossEntropy())
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) is scaled
    target = np.pad(TARGET, ((0, 0), (0, 1)))
    history = model.fit(
        {"source_ids": SOURCE, "target_ids": target[:, :-1]}, target[:, 1:], epochs=2, verbose=0
    )
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(norm_first=True),
        dict(positional="learned"),
        dict(share_embeddings=False, source_vocab_size=40, target_vocab_size=70),
        dict(share_embeddings=False, positional="learned", norm_first=True, num_decoder_layers=3),
        dict(share_embeddings=False, source_vocab_size=40, target_vocab_size=70, output_bias=True),
    ],
)
def test_parameter_count_without_building(overrides):
    config = tiny(**overrides)
    assert config.parameter_count() == kt.build_transformer(config).count_params()


def test_no_two_projection_kernels_start_equal():
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=50))
    kernels = [w.numpy() for w in model.weights if w.path.endswith("/kernel")]
    assert len(kernels) == 2 * 6 + 2 * 10  # 4 attention + 2 feed-forward a layer, cross too
    for i, a in enumerate(kernels):
        for b in kernels[i + 1 :]:
            assert a.shape != b.shape or not np.array_equal(a, b)


def _uneven_batches():
    """Two batches of 8 real target tokens in 4 sentences and of 16 in 1: a batch mean
    weighted by sentences (Keras's `loss`) and one weighted by tokens differ."""
    source = ids(5, 6, seed=3)
    labels = ids(5, 16, seed=4)
    labels[:4, 2:] = 0  # 4 sentences of 2 tokens
    inputs = np.concatenate([np.full((5, 1), 2, "int32"), labels[:, :-1]], axis=1)
    inputs[labels == 0] = 0
    return {"source_ids": source, "target_ids": inputs}, labels


@pytest.mark.parametrize("distributed", [False, True], ids=["one_device", "mirrored"])
def test_fit_and_evaluate_report_the_loss_per_token(distributed, request):
    """`loss` and `val_loss` are sum(token losses) / tokens over the epoch, on one device and
    split over two replicas (where replica 1 of the first batch holds no token at all)."""
    x, y = _uneven_batches()
    strategy = request.getfixturevalue("mirrored") if distributed else tf.distribute.get_strategy()
    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = kt.build_transformer(shallow(dropout=0.0))
        loss = kt.losses.LabelSmoothedCrossEntropy(0.1)
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss=loss)
    batches = [slice(0, 4), slice(4, 5)]
    per_batch = [
        float(loss(y[b], model({k: v[b] for k, v in x.items()}, training=False))) for b in batches
    ]
    tokens = [int((y[b] != 0).sum()) for b in batches]
    per_token = np.dot(per_batch, tokens) / sum(tokens)
    per_sentence = np.dot(per_batch, [4, 1]) / 5
    assert abs(per_token - per_sentence) > 0.01  # the check tells the two apart

    history = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], [per_token], rtol=1e-5)
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=4, verbose=0), per_token, rtol=1e-5)
    assert model.metrics_names[0] == "loss"


def test_other_losses_keep_keras_loss():
    x, y = _uneven_batches()
    model = kt.build_transformer(shallow(dropout=0.0))
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert [m.name for m in model.metrics].count("loss") == 1
    assert model.token_loss not in model.metrics


def test_an_accumulated_update_is_the_mean_over_all_its_tokens():
    """Two batches (8 tokens in 4 sentences, 16 in 1) accumulated into one SGD update, through
    `kt.data.accumulation_groups`, make the update of one batch of both; Keras's accumulation
    alone (the mean of the two batch means) does not. (One replica: Keras cannot accumulate
    under tf.distribute with several, tests/test_resume.py.)"""
    x, y = _uneven_batches()

    def batch(part):
        return tf.data.Dataset.from_tensors(({k: v[part] for k, v in x.items()}, y[part]))

    def updated(batches, accumulation):
        keras.utils.set_random_seed(3)
        model = kt.build_transformer(shallow(dropout=0.0))
        optimizer = keras.optimizers.SGD(1.0, gradient_accumulation_steps=accumulation)
        loss = kt.losses.LabelSmoothedCrossEntropy(0.1)
        # No XLA: one or two steps, and each run would compile its own program.
        model.compile(optimizer=optimizer, loss=loss, jit_compile=False)
        history = model.fit(batches, epochs=1, verbose=0)
        return model.get_weights(), history.history["loss"][0]

    one, one_loss = updated(batch(slice(0, 5)), None)
    two = batch(slice(0, 4)).concatenate(batch(slice(4, 5)))
    grouped, grouped_loss = updated(kt.data.accumulation_groups(two, 2), 2)
    for a, b in zip(one, grouped, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-6)
    assert grouped_loss == pytest.approx(one_loss, rel=1e-5)  # still the mean over tokens
    means, _ = updated(two, 2)
    assert max(np.abs(a - b).max() for a, b in zip(one, means, strict=True)) > 1e-3


def test_fit_on_a_dataset_does_not_warn_that_it_ignores_shuffle():
    """A tf.data.Dataset shuffles itself: fit's default for one is shuffle=False (Keras
    warned that it ignored shuffle=True); an explicit shuffle=True still gets Keras's warning."""
    import warnings

    x, y = _uneven_batches()
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(5)
    model = kt.build_transformer(shallow(dropout=0.0))
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=kt.losses.LabelSmoothedCrossEntropy())
    for kwargs, warned in (({}, False), ({"shuffle": True}, True)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(batches, epochs=1, verbose=0, **kwargs)
        assert any("`shuffle=True` was passed" in str(w.message) for w in caught) == warned


@pytest.mark.exact
def test_fit_traces_the_training_step_once_and_trains_as_keras_fit(monkeypatch):
    """Without a tf.distribute strategy Keras creates the optimizer's variables inside the
    first trace of the training step, and TensorFlow then traces the step a second time
    (its issue 48851). `Transformer.fit` creates them first: one trace, and the weights that
    `keras.Model.fit` itself reaches."""
    traced = []
    step = kt.Transformer.train_step

    def counted(self, *args):
        traced.append(self)
        return step(self, *args)

    monkeypatch.setattr(kt.Transformer, "train_step", counted)
    x, y = _uneven_batches()
    models = []
    for fit in (kt.Transformer.fit, keras.Model.fit):
        keras.utils.set_random_seed(5)
        model = kt.build_transformer(shallow(dropout=0.0))
        model.compile(  # (no XLA: the traces are counted, not compiled)
            optimizer=keras.optimizers.Adam(1e-3),
            loss=kt.losses.LabelSmoothedCrossEntropy(),
            jit_compile=False,
        )
        fit(model, x, y, batch_size=5, epochs=3, shuffle=False, verbose=0)
        models.append(model)
    assert [sum(m is model for m in traced) for model in models] == [1, 2]
    # Bit for bit: one training step's program, the same inputs, on one machine.
    for ours, theirs in zip(*(model.get_weights() for model in models), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    # train_on_batch too.
    model = kt.build_transformer(shallow(dropout=0.0))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=kt.losses.LabelSmoothedCrossEntropy(),
        jit_compile=False,
    )
    for _ in range(2):
        model.train_on_batch(x, y)
    assert sum(m is model for m in traced) == 1
