"""The docstring examples of `keras_transformer`'s modules (their `Examples:` sections), run
with `doctest`: by tests/test_docstrings.py on TensorFlow and tests/jax/test_docstrings.py on
JAX.

Each docstring's examples start from empty globals, not from their module's: an example
imports what it uses, so it runs as a user would type it. Output is compared with ELLIPSIS
and NORMALIZE_WHITESPACE, and is written to hold on both backends (`tuple(x.shape)`,
`keras.ops.convert_to_numpy`, dtype names), since the same text runs on each.
"""

from __future__ import annotations

import doctest
import importlib
import io
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "keras_transformer"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# keras_transformer's modules that are deprecated aliases of others (importing one warns).
DEPRECATED_MODULES = (
    "backends",
    "files",
    "ragged",
    "workarounds",
    "pretrained.tokenizer",
    "pretrained.nllb_tokenizer",
    "pretrained.checkpoint",
    "decoding.cache",
)

# What needs Keras's TensorFlow backend (`backends.require_tensorflow`: tf.data, tf.distribute,
# SavedModel, TensorFlow ops), with its submodules: its examples run on TensorFlow only.
TENSORFLOW_ONLY = (
    "keras_transformer.corpus",
    "keras_transformer.data",
    "keras_transformer.decoding.parallel",
    "keras_transformer.evaluation",
    "keras_transformer.export",
    "keras_transformer.fast",
    "keras_transformer.pretrained",
    "keras_transformer.tokenizers",
    "keras_transformer._ragged",
)


def module_names() -> list[str]:
    """Every module of the package, by its dotted name, from the files (nothing imported)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    # The deprecated aliases of internal modules (importing one warns): not modules of their own.
    aliases = {f"keras_transformer.{name}" for name in DEPRECATED_MODULES}
    return [name for name in names if name not in aliases]


def tensorflow_only(name: str) -> bool:
    return any(name == only or name.startswith(f"{only}.") for only in TENSORFLOW_ONLY)


def run_examples(name: str) -> tuple[doctest.TestResults, str]:
    """Runs the examples of module `name`'s docstrings: `(TestResults(failed, attempted),
    doctest's report of the failures)`. Skipped examples (`+SKIP`) are not attempted."""
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    for test in doctest.DocTestFinder().find(module, name, globs={}):
        runner.run(test, out=report.write)
    return doctest.TestResults(runner.failures, runner.tries), report.getvalue()


def main(names: list[str]) -> None:
    """`python -m tests.doctests [MODULE...]`: each module's counts, then the failures."""
    for name in names or module_names():
        results, report = run_examples(name)
        print(f"{name}: {results.attempted} run, {results.failed} failed", flush=True)
        print(report, end="", flush=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
