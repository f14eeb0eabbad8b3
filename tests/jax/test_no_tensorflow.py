"""The package on JAX with TensorFlow hidden, as keras-hub's "NoTensorflow" job runs it: the
layers, the model (fit, save, load) and the searches work, and what needs TensorFlow says so."""

import pytest

from tests import programs

SCRIPT = """
import importlib.abc, sys

class NoTensorflow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text", "tf_keras"):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")

sys.meta_path.insert(0, NoTensorflow())

import numpy as np
import keras
import keras_transformer as kt

assert keras.config.backend() == "jax"
keras.utils.set_random_seed(0)
config = kt.TransformerConfig.preset(
    "tiny", vocab_size=30, max_length=16, num_encoder_layers=1, num_decoder_layers=1
)
model = kt.build_transformer(config)
model.compile(optimizer="adam", loss=kt.losses.LabelSmoothedCrossEntropy(),
              metrics=[kt.metrics.MaskedAccuracy(), kt.metrics.Perplexity()])
ids = np.random.default_rng(0).integers(4, 30, (8, 6)).astype("int32")
target = np.concatenate([np.full((8, 1), 2), ids, np.full((8, 1), 3)], 1).astype("int32")
history = model.fit({"source_ids": ids, "target_ids": target[:, :-1]}, target[:, 1:],
                    epochs=2, batch_size=4, verbose=0)
model.save(sys.argv[1])
loaded = keras.saving.load_model(sys.argv[1])
greedy = kt.decoding.greedy_search(loaded, ids[:2], max_extra_length=3)[0]
beam = kt.decoding.beam_search(loaded, ids[:2], max_extra_length=3)[0]
drawn = kt.decoding.sample(loaded, ids[:2], top_k=3, seed=1, max_extra_length=3)[0]
for name in ("data", "corpus", "evaluation", "export", "pretrained"):
    try:
        getattr(kt, name)
    except ImportError as error:
        assert "needs Keras's TensorFlow backend" in str(error), error
        assert "'jax'" in str(error), error
    else:
        raise AssertionError(f"kt.{name} imported without TensorFlow")
try:
    kt.models
except ImportError as error:
    assert "kt.models needs the tensorflow and tensorflow-text packages" in str(error), error
else:
    raise AssertionError("kt.models imported without TensorFlow")
try:
    kt.fast.enable()
except ImportError as error:
    assert "kt.fast's speed path needs Keras's TensorFlow backend" in str(error), error
else:
    raise AssertionError("kt.fast.enable() without TensorFlow")
assert not any(name.split(".")[0] == "tensorflow" for name in sys.modules)
print("ok", np.asarray(greedy).shape, np.asarray(beam).shape, np.asarray(drawn).shape,
      history.history["loss"][-1] < history.history["loss"][0])
"""


@pytest.mark.exact
def test_the_package_runs_on_jax_with_tensorflow_hidden(tmp_path):
    result = programs.snippet(SCRIPT, tmp_path / "model.keras", env={"KERAS_BACKEND": "jax"})
    # True: the second epoch's loss below the first's (no margin).
    assert result.stdout.splitlines()[-1] == "ok (2, 9) (2, 9) (2, 9) True"
