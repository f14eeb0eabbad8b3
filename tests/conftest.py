"""Test setup: the TensorFlow backend, two logical CPU devices, seeds and a clean dtype policy."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Under pytest-xdist, each worker's TensorFlow (and each program a test starts, which
# inherits the variable) gets its share of the cores for its operations' own threads
# instead of all of them: two workers on two cores then do not oversubscribe them (the
# export, model, CTranslate2 and reliability tests took 6% less time this way).
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))

import tensorflow as tf  # noqa: E402

# Two logical CPU devices, so MirroredStrategy runs two replicas on a machine without GPUs.
# This must happen before TensorFlow initializes its devices, hence at import time.
_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded_float32():
    """Every test starts seeded under the float32 policy and leaves it that way."""
    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture(scope="session")
def mirrored():
    """A MirroredStrategy over the two logical CPU devices, one for the whole session:
    several strategies in one process can collide on collective instance keys."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(scope="session")
def reversal_model(tmp_path_factory, worker_id):
    """A small model trained on the reversal task (tests/reversal.py), once for the whole
    run: under pytest-xdist the first worker that needs it trains and saves it, the others
    load it (pytest-xdist's recipe for a session fixture made once; about 35 s saved
    when test_decoding and test_learning run on different workers)."""
    from filelock import FileLock

    from tests.reversal import train_reversal_model

    if worker_id == "master":  # not distributed
        return train_reversal_model()
    saved = tmp_path_factory.getbasetemp().parent / "reversal_model.keras"
    with FileLock(f"{saved}.lock"):
        if saved.exists():
            return keras.saving.load_model(saved)
        model = train_reversal_model()
        model.save(saved)
        return model
