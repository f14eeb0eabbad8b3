"""The docstring examples of every module run and print what they show, on TensorFlow (the
JAX pass runs those of the modules that run on JAX: tests/jax/test_docstrings.py). Each
example starts from empty globals and imports what it uses (tests/doctests.py)."""

import pytest

from tests import doctests


@pytest.mark.parametrize("module", doctests.module_names())
def test_docstring_examples_run(module):
    results, report = doctests.run_examples(module)
    assert results.failed == 0, report
