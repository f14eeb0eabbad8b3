"""kt.lora: LoRA on the attention projections, the rest frozen; a `.keras` file holds the
merged model (Keras's choice), and the adapters saved apart go back on the base model."""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer._workarounds import sublayers

IDS = np.random.default_rng(0).integers(1, 50, (4, 6)).astype("int32")
BATCH = {"source_ids": IDS, "target_ids": IDS[:, ::-1].copy()}


def tiny():
    keras.utils.set_random_seed(2)
    return kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=50, dropout=0.0))


def test_adapters_train_alone_and_outlive_the_keras_file(tmp_path):
    model = tiny()
    model.save(tmp_path / "base.keras")
    paths = kt.lora.enable_lora(model, rank=2)
    assert len(paths) == 2 * (2 + 2 * 2)  # query and value of 6 attention layers
    trainable = {v.path for v in model.trainable_weights}
    assert len(trainable) == 2 * len(paths)  # A and B of each: nothing else trains
    assert all("lora_kernel" in path for path in trainable), sorted(trainable)
    frozen = {v.path: v.numpy() for v in model.weights if v.path not in trainable}
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=kt.losses.LabelSmoothedCrossEntropy(),
        jit_compile=False,  # a few steps: XLA would take longer to compile than to run
    )
    model.fit(BATCH, IDS, epochs=2, verbose=0)
    for variable in model.weights:
        if variable.path in frozen:
            np.testing.assert_array_equal(variable.numpy(), frozen[variable.path])
    tuned = np.asarray(model(BATCH))
    assert not np.allclose(
        tuned, np.asarray(keras.saving.load_model(tmp_path / "base.keras")(BATCH))
    )

    # The .keras file: the adapters merged into the kernels, no LoRA left.
    model.save(tmp_path / "merged.keras")
    merged = keras.saving.load_model(tmp_path / "merged.keras")
    np.testing.assert_allclose(np.asarray(merged(BATCH)), tuned, atol=1e-5)
    assert not any("lora_kernel" in v.path for v in merged.weights)

    # The adapters apart: back on the base model, LoRA on, the same logits.
    kt.lora.save_adapters(model, tmp_path / "adapters.npz")
    base = keras.saving.load_model(tmp_path / "base.keras")
    assert sorted(kt.lora.load_adapters(base, tmp_path / "adapters.npz")) == sorted(paths)
    np.testing.assert_allclose(np.asarray(base(BATCH)), tuned, atol=1e-5)
    assert {v.path for v in base.trainable_weights} == trainable


def test_the_merged_file_of_a_functional_model_loads_with_nothing_frozen(tmp_path):
    """A user's functional model with this library's layers and a Dense head: after LoRA,
    its `.keras` file is a model like any other, every layer and weight trainable (Keras
    keeps a layer's trainable=False in the file, not a weight's)."""
    ids = keras.Input((None,), dtype="int32")
    x = kt.layers.TransformerEmbedding(50, 8, mask_zero=True)(ids)
    x = kt.layers.Encoder(1, num_heads=2, d_ff=16)(x)
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(ids, keras.layers.Dense(3, name="head")(pooled))
    kt.lora.enable_lora(model, rank=2)
    assert all("lora_kernel" in v.path for v in model.trainable_weights)
    model.save(tmp_path / "merged.keras")
    merged = keras.saving.load_model(tmp_path / "merged.keras")
    assert all(layer.trainable for layer in sublayers(merged))
    assert len(merged.trainable_weights) == len(merged.weights)


def test_bad_requests_are_refused():
    model = tiny()
    with pytest.raises(ValueError, match="rank=0 must be an integer >= 1"):
        kt.lora.enable_lora(model, rank=0)
    with pytest.raises(ValueError, match=r"targets \['keys'\]"):
        kt.lora.enable_lora(model, rank=2, targets=("keys",))
    with pytest.raises(ValueError, match="no LoRA adapters: call enable_lora first"):
        kt.lora.save_adapters(model, "unused.npz")
