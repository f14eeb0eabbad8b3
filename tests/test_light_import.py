"""`import keras_transformer` registers every class a saved file names (the layers, the task
family, the imported models' tokenizers: tests/test_new_process.py), and leaves out what only
some uses need: sacrebleu, the checkpoint converters, the exports and their translators load
on first use of `kt.evaluation`, `kt.pretrained`, `kt.export` and `kt.serving`."""

import json

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests import programs
from tests.test_reliability import random_updates

ON_FIRST_USE = (
    "sacrebleu",
    "safetensors",
    "keras_transformer.evaluation",
    "keras_transformer.export",
    "keras_transformer.pretrained",
    "keras_transformer.serving",
)


@pytest.mark.slow
def test_the_package_leaves_scoring_converters_and_exports_to_first_use():
    code = f"""
import json, sys
import keras_transformer
import keras_transformer.layers
print(json.dumps([name for name in {ON_FIRST_USE!r} if name in sys.modules]))
"""
    assert json.loads(programs.snippet(code).stdout.splitlines()[-1]) == []


def test_the_text_modules_are_attributes_loaded_on_first_use():
    for name in ("corpus", "data", "evaluation", "export", "pretrained", "serving", "text"):
        assert getattr(kt, name).__name__ == f"keras_transformer.{name}"
        assert name in dir(kt)
    assert set(kt.__all__) <= set(dir(kt))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        kt.nothing  # noqa: B018


LIGHT = """
import json, sys
for name in ("tensorflow", "keras", "keras_hub", "tensorflow_text"):
    sys.modules[name] = None  # unimportable: `import name` raises ImportError
import keras_transformer
import keras_transformer.core
from keras_transformer import serving
from keras_transformer.core import logs, rules, settings, special_ids
from keras_transformer.serving import ctranslate2, litert
import trainers.translate

settings.DecodingSettings(beam_size=2, target_prefix="spa_Latn")
print(json.dumps({
    "runtimes": [serving.CTranslate2Translator.__name__, serving.LiteRTTranslator.__name__],
    "rule": rules.with_source_prefix("Hello", "eng_Latn"),
    "limit": rules.output_limit(7, 50, 256),
    "eos": special_ids.EOS_ID,
    "filter": logs.min_log_level(),
    "heavy": [name for name in sys.modules if name.split(".")[0] in (
        "tensorflow", "keras", "keras_hub", "tensorflow_text") and sys.modules[name]],
}))
"""


def test_the_core_and_the_light_runtimes_import_without_tensorflow_keras_or_keras_hub():
    answer = json.loads(programs.snippet(LIGHT).stdout.splitlines()[-1])
    assert answer == {
        "runtimes": ["CTranslate2Translator", "LiteRTTranslator"],
        "rule": "eng_Latn Hello",
        "limit": 57,
        "eos": 3,
        "filter": 2,
        "heavy": [],
    }


LATER = """
import json, sys
import keras_transformer
{first}
light = [name for name in ("tensorflow", "keras") if name in sys.modules]
import keras
names = ["Transformer", "TransformerSeq2SeqLM", "MultiHeadAttention", "WarmupSchedule"]
found = [keras.saving.get_registered_object(f"keras_transformer>{{name}}") for name in names]
print(json.dumps({{"light": light, "registered": [c is not None for c in found]}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "first", ["", "from keras_transformer.layers import attention", "import keras_hub"]
)
def test_every_class_is_registered_once_keras_is_loaded_whatever_loads_it(first):
    """`import keras_transformer` imports no Keras; the classes are registered once Keras is
    loaded: by `import keras` afterwards, a module of ours, or keras-hub."""
    answer = json.loads(programs.snippet(LATER.format(first=first)).stdout.splitlines()[-1])
    assert answer["registered"] == [True] * 4
    assert answer["light"] == ([] if not first else ["tensorflow", "keras"])


def labelled_batch():
    rng = np.random.default_rng(0)
    inputs = {
        "source_ids": rng.integers(1, 60, (4, 7)).astype("int32"),
        "target_ids": rng.integers(1, 60, (4, 6)).astype("int32"),
    }
    return inputs, rng.integers(0, 60, (4, 6)).astype("int32")


LOAD = """
import json, sys
import keras
import numpy as np
import keras_transformer  # registers the classes the file names

model = keras.saving.load_model(sys.argv[1])
rng = np.random.default_rng(0)
inputs = {
    "source_ids": rng.integers(1, 60, (4, 7)).astype("int32"),
    "target_ids": rng.integers(1, 60, (4, 6)).astype("int32"),
}
labels = rng.integers(0, 60, (4, 6)).astype("int32")
scores = model.evaluate(inputs, labels, verbose=0, return_dict=True)
print(json.dumps({"scores": scores}))
"""


@pytest.mark.slow
def test_a_compiled_model_loads_after_importing_the_package_alone(tmp_path):
    # One layer each: loading, not depth, is under test (evaluate traces the model).
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=60, num_encoder_layers=1, num_decoder_layers=1
    )
    model = kt.build_transformer(config)
    model.compile(
        optimizer=keras.optimizers.Adam(kt.WarmupSchedule(config.d_model, warmup_steps=10)),
        loss=kt.losses.LabelSmoothedCrossEntropy(0.1),
        metrics=[kt.metrics.MaskedAccuracy(), kt.metrics.Perplexity(), kt.metrics.TokenCount()],
        jit_compile=False,  # loading, not compiling, is under test (XLA: twice, seconds each)
    )
    inputs, labels = labelled_batch()
    random_updates(model, seed=1)  # optimizer state, which the file holds too
    expected = model.evaluate(inputs, labels, verbose=0, return_dict=True)
    model.save(tmp_path / "model.keras")
    loaded = json.loads(programs.snippet(LOAD, tmp_path / "model.keras").stdout.splitlines()[-1])
    assert loaded["scores"].keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_allclose(loaded["scores"][name], value, rtol=1e-5, err_msg=name)


def test_perplexity_keeps_keras_hub_sums_config_and_variables():
    import keras_hub

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 9, (3, 5))
    logits = rng.normal(size=(3, 5, 9)).astype("float32")
    weights = rng.uniform(size=(3, 5)).astype("float32")
    ours = kt.metrics.Perplexity()
    theirs = keras_hub.metrics.Perplexity(from_logits=True, mask_token_id=0)
    for metric in (ours, theirs):
        metric.update_state(labels, logits)
        metric.update_state(labels[:1], logits[:1], sample_weight=weights[:1])
    np.testing.assert_allclose(float(ours.result()), float(theirs.result()), rtol=1e-6)
    assert ours.get_config() == theirs.get_config()
    assert [v.path for v in ours.variables] == [v.path for v in theirs.variables]
    unmasked = kt.metrics.Perplexity(from_logits=False, mask_token_id=None)
    reference = keras_hub.metrics.Perplexity()
    probabilities = np.asarray(keras.ops.softmax(logits))
    for metric in (unmasked, reference):
        metric.update_state(labels, probabilities)
    np.testing.assert_allclose(float(unmasked.result()), float(reference.result()), rtol=1e-6)
    with pytest.raises(ValueError, match="dtype='int32'"):
        kt.metrics.Perplexity(dtype="int32")
