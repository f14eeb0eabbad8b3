"""Keras's own tools on our model: int8 quantization of every projection, LoRA on them, and
no private TensorFlow or Keras API in the library or the trainer."""

import contextlib
import gc
import re
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.reversal import reversal_task

ROOT = Path(__file__).resolve().parent.parent
PROJECTIONS = (keras.layers.Dense, keras.layers.EinsumDense, keras.layers.Embedding)


@contextlib.contextmanager
def young_generation_gc():
    """`gc.collect()` collects only the youngest generation meanwhile.

    Keras's `Layer.__delattr__` runs a full `gc.collect()` for every variable it replaces, so
    for every kernel `quantize` swaps: 0.15 s a layer in a fresh process, over a second in a
    test worker that holds many models and graphs (48 s for the tiny Transformer's 33
    projections). The old kernels are freed by reference counting either way.
    """
    collect = gc.collect
    gc.collect = lambda generation=0: collect(0)
    try:
        yield
    finally:
        gc.collect = collect


def quantize(model):
    with warnings.catch_warnings(), young_generation_gc():
        # Keras warns for every layer without weights to quantize (norms, dropout, inputs).
        warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
        model.quantize("int8")


def _projection_layers(model):
    return [layer for layer in model._flatten_layers() if isinstance(layer, PROJECTIONS)]


def test_int8_quantization_reaches_every_projection():
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=50))
    quantize(model)
    config = model.config
    attention = config.num_encoder_layers + 2 * config.num_decoder_layers
    feed_forward = config.num_encoder_layers + config.num_decoder_layers
    quantized = [layer for layer in _projection_layers(model) if layer.quantization_mode]
    # 4 projections an attention, 2 a feed-forward network, and the tied embedding table.
    assert len(quantized) == 4 * attention + 2 * feed_forward + 1
    assert len(quantized) == len(_projection_layers(model))
    assert {layer.quantization_mode for layer in quantized} == {"int8"}


def save_and_load(model, path):
    """`model` saved to `path` and loaded from it (loaded again from a file of its own, a
    quantized model must save again too)."""
    model.save(path)
    return keras.saving.load_model(path)


QUANTIZED_LAYERS = {
    "attention": (lambda: kt.layers.TransformerAttention(num_heads=2), (5, 8), "float32"),
    "feed_forward": (lambda: kt.layers.PositionwiseFeedForward(d_ff=16), (5, 8), "float32"),
    "embedding": (lambda: kt.layers.TransformerEmbedding(30, 8, output_bias=True), (5,), "int32"),
    "embedding_bfloat16": (
        lambda: kt.layers.TransformerEmbedding(30, 8, dtype="mixed_bfloat16"),
        (5,),
        "int32",
    ),
    "encoder": (lambda: kt.layers.Encoder(2, num_heads=2, d_ff=16), (5, 8), "float32"),
}


@pytest.mark.parametrize("kind", sorted(QUANTIZED_LAYERS))
def test_an_int8_layer_saves_and_loads_in_a_functional_model(kind, tmp_path):
    make_layer, shape, dtype = QUANTIZED_LAYERS[kind]
    inputs = keras.Input(shape, dtype=dtype)
    model = keras.Model(inputs, make_layer()(inputs))
    quantize(model)
    rng = np.random.default_rng(0)
    batch = rng.integers(1, 30, (2, *shape)) if dtype == "int32" else rng.random((2, *shape))
    batch = batch.astype(dtype)
    loaded = save_and_load(save_and_load(model, tmp_path / "int8.keras"), tmp_path / "again.keras")
    np.testing.assert_array_equal(loaded(batch), model(batch))
    modes = {layer.path: layer.quantization_mode for layer in _projection_layers(loaded)}
    assert set(modes.values()) == {"int8"}, modes


def test_an_int8_transformer_saves_and_loads_with_the_same_logits(tmp_path):
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=50))
    quantize(model)
    ids = np.random.default_rng(0).integers(1, 50, (3, 7)).astype("int32")
    batch = {"source_ids": ids, "target_ids": ids[:, ::-1]}
    loaded = save_and_load(save_and_load(model, tmp_path / "int8.keras"), tmp_path / "again.keras")
    np.testing.assert_array_equal(loaded(batch), model(batch))
    assert {layer.quantization_mode for layer in _projection_layers(loaded)} == {"int8"}


@pytest.mark.exact
def test_lora_leaves_only_its_matrices_trainable_and_fine_tunes():
    keras.utils.set_random_seed(3)
    config = kt.TransformerConfig.preset(  # one layer each: LoRA does not depend on depth
        "tiny", vocab_size=20, dropout=0.0, max_length=16, num_encoder_layers=1,
        num_decoder_layers=1,
    )  # fmt: skip
    model = kt.build_transformer(config)
    for layer in _projection_layers(model):
        layer.enable_lora(4)
    # Trainable: the LoRA matrices, and the biases and norms, which LoRA leaves alone.
    names = {v.path.rsplit("/", 1)[-1] for v in model.trainable_variables}
    matrices = names - {"bias", "gamma", "beta"}
    assert matrices == {
        "lora_kernel_a",
        "lora_kernel_b",
        "lora_embeddings_a",
        "lora_embeddings_b",
    }, names
    # Every projection's own matrix is frozen: kernels and embedding tables.
    frozen = [v for v in model.non_trainable_variables if len(v.shape) >= 2]
    assert len(frozen) == len(_projection_layers(model))

    source, target = reversal_task(256, seed=5)
    inputs = {"source_ids": source, "target_ids": target[:, :-1]}
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=kt.losses.LabelSmoothedCrossEntropy(),
        jit_compile=False,  # a few steps: XLA would take longer to compile than to run
    )
    before = model.evaluate(inputs, target[:, 1:], verbose=0)
    frozen_values = [v.numpy() for v in frozen]
    model.fit(inputs, target[:, 1:], batch_size=32, epochs=3, verbose=0)
    assert model.evaluate(inputs, target[:, 1:], verbose=0) < before - 0.1  # a margin
    for variable, value in zip(frozen, frozen_values, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value)


@pytest.mark.parametrize("package", ["keras_transformer", "trainers"])
def test_no_private_tensorflow_or_keras_api(package):
    private = re.compile(r"^\s*(from|import)\s+(tensorflow\.(python|compiler)|keras\.src)\b", re.M)
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / package).rglob("*.py"))
        if private.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
