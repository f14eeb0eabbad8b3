"""Test setup: the TensorFlow backend, two logical CPU devices, seeds and a clean dtype policy."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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


@pytest.fixture
def mirrored():
    """A MirroredStrategy over the two logical CPU devices."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
