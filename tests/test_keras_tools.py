"""Keras's own tools on our model: int8 quantization of every projection, LoRA on them, and
no private TensorFlow or Keras API in the library or the trainer."""

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


def quantize(model):
    with warnings.catch_warnings():
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


def test_lora_leaves_only_its_matrices_trainable_and_fine_tunes():
    keras.utils.set_random_seed(3)
    model = kt.build_transformer(
        kt.TransformerConfig.preset("tiny", vocab_size=20, dropout=0.0, max_length=16)
    )
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
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=kt.losses.LabelSmoothedCrossEntropy())
    before = model.evaluate(inputs, target[:, 1:], verbose=0)
    frozen_values = [v.numpy() for v in frozen]
    model.fit(inputs, target[:, 1:], batch_size=32, epochs=3, verbose=0)
    assert model.evaluate(inputs, target[:, 1:], verbose=0) < before - 0.1
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
