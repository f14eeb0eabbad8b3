"""The docstring examples of the modules that run on JAX (the layers, model, config, ops,
losses, metrics, schedule, decoding, text and the task) run and print what they show on JAX
too: the same text as on TensorFlow (tests/test_docstrings.py), whose output is written to
hold on both. What needs Keras's TensorFlow backend (`doctests.TENSORFLOW_ONLY`) runs on
TensorFlow only."""

import pytest

from tests import doctests


@pytest.mark.parametrize(
    "module", [name for name in doctests.module_names() if not doctests.tensorflow_only(name)]
)
def test_docstring_examples_run_on_jax(module):
    results, report = doctests.run_examples(module)
    assert results.failed == 0, report
