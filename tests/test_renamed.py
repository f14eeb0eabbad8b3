"""The layers' former names (keras_transformer/layers/_renamed.py): `MultiHeadAttention` and
`Dropout` warn once and are the renamed layers; configs and `.keras` files saved under them
(and with AddAndNorm's former `epsilon`) load, with their weights, without a warning."""

import importlib
import json
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_transformer as kt

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "renamed"

# former name -> (new name, a small instance of the new layer)
RENAMED = {
    "MultiHeadAttention": ("TransformerAttention", lambda: kt.layers.TransformerAttention(2)),
    "Dropout": ("PerReplicaDropout", lambda: kt.layers.PerReplicaDropout(0.1, seed=1)),
}
MODULES = {"MultiHeadAttention": "attention", "Dropout": "dropout"}


@pytest.mark.parametrize("old", RENAMED)
@pytest.mark.parametrize("where", ["package", "module"])
def test_the_former_name_warns_once_and_is_the_renamed_layer(old, where):
    new, _ = RENAMED[old]
    module = (
        kt.layers
        if where == "package"
        else importlib.import_module(f"keras_transformer.layers.{MODULES[old]}")
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer = (
            getattr(module, old)(2) if old == "MultiHeadAttention" else getattr(module, old)(0.1)
        )
    assert [w.category for w in caught] == [DeprecationWarning]
    message = str(caught[0].message)
    assert f"{module.__name__}.{old} is deprecated" in message and new in message
    assert caught[0].filename == __file__  # the warning points at the code that read the name
    assert type(layer) is getattr(kt.layers, new)


def test_the_former_names_are_not_listed():
    assert not {"MultiHeadAttention", "Dropout"} & {*kt.layers.__all__, *dir(kt.layers)}
    with pytest.raises(AttributeError, match="has no attribute 'Attention'"):
        kt.layers.Attention  # noqa: B018


@pytest.mark.parametrize("old", RENAMED)
def test_a_config_saved_under_the_former_name_deserializes_without_a_warning(old):
    new, make = RENAMED[old]
    layer = make()
    saved = json.loads(
        json.dumps(keras.layers.serialize(layer))
        .replace(f'"{new}"', f'"{old}"')
        .replace(f'"keras_transformer>{new}"', f'"keras_transformer>{old}"')
    )
    assert saved["registered_name"] == f"keras_transformer>{old}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        restored = keras.layers.deserialize(saved)
    assert isinstance(restored, getattr(kt.layers, new))
    assert restored.get_config() == layer.get_config()


@pytest.mark.exact
def test_a_keras_file_saved_before_the_renames_loads_with_its_weights():
    # Written by the package before the renames (tests/fixtures/renamed/make_fixture.py): ours
    # and Keras's MultiHeadAttention in one functional model, their weights filed under
    # `multi_head_attention` and `multi_head_attention_1`.
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        model = keras.saving.load_model(FIXTURE / "model.keras")
    # expected.npz was computed on the CPU that made the fixture: another CPU's kernels
    # (oneDNN or Eigen, another ISA) sum in another order, a few float32 ulps (1.2e-7 x 2.2,
    # the largest output) a layer; a weight not loaded moves outputs by far more than 1e-5.
    expected = np.load(FIXTURE / "expected.npz")
    outputs = model(expected["inputs"], training=False)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(outputs), expected["outputs"], rtol=1e-5, atol=1e-5
    )
    kinds = [type(layer) for layer in model.layers]
    assert sum(issubclass(kind, kt.layers.TransformerAttention) for kind in kinds) == 1
    assert sum(issubclass(kind, kt.layers.PerReplicaDropout) for kind in kinds) == 1
    assert keras.layers.MultiHeadAttention in kinds
    (residual,) = [layer for layer in model.layers if isinstance(layer, kt.layers.AddAndNorm)]
    assert residual.layer_norm_epsilon == residual.layer_norm.epsilon == 1e-3  # saved `epsilon`


def test_a_model_loaded_from_a_former_file_saves_and_loads_again(tmp_path):
    model = keras.saving.load_model(FIXTURE / "model.keras")
    model.save(tmp_path / "again.keras")
    again = keras.saving.load_model(tmp_path / "again.keras")
    x = np.load(FIXTURE / "expected.npz")["inputs"]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(again(x, training=False)),
        keras.ops.convert_to_numpy(model(x, training=False)),
    )
