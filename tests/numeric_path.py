"""Which numeric path each engine takes in this environment: `python -m tests.numeric_path`.

`make test-numerics` (CI, after `make test`) runs the tests that compare exact outputs (two
engines, two precisions, a trained model's: the `exact` marker, tests/README.md) a second
time on another numeric path than the machine's own, so that a test that holds only on one
CPU's last bits fails in CI rather than on a user's machine (STYLE.md 22). It sets
NUMERIC_PATH's variables and KT_TEST_NUMERIC_PATH=capped, and this report says what each
engine then used, each read from the engine itself in a process of its own:

- TensorFlow's oneDNN kernels: on (its default on x86-64), or off (`TF_ENABLE_ONEDNN_OPTS=0`:
  Eigen's instead), as TensorFlow's own start-up line says;
- XLA's CPU code: the instruction set cap its compile options hold (`--xla_cpu_max_isa`);
- CTranslate2: the instruction set it selects (`CT2_FORCE_CPU_ISA`) and that of the oneDNN
  inside it, which its float32 and int8 products run on (`ONEDNN_MAX_CPU_ISA`);
- LiteRT: XNNPACK's delegate (the default; it has no cap) or LiteRT's builtin kernels, which
  tests/conftest.py picks under KT_TEST_NUMERIC_PATH=capped.

With `--check capped` it exits 1 naming each engine that did not take the capped path;
`--run-exact-tests` sets NUMERIC_PATH's variables, checks them so, and runs the `exact` tests
on TensorFlow (two workers) and then on JAX (tests/jax), as `make test-numerics` does.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import programs

# The second numeric path: each engine's own switch, capped at AVX2 (every x86-64 CPU of
# the last decade has it; CI's machines have AVX-512 and some AMX).
NUMERIC_PATH = {
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
    "CT2_FORCE_CPU_ISA": "AVX2",
    "KT_TEST_NUMERIC_PATH": "capped",
}

_TENSORFLOW = """
import tensorflow as tf
print(float(tf.reduce_sum(tf.matmul(tf.ones((8, 8)), tf.ones((8, 8))))))
"""
_XLA = """
import tensorflow as tf
f = tf.function(lambda x: tf.matmul(x, x) + 1.0, jit_compile=True)
print(float(tf.reduce_sum(f(tf.ones((64, 64))))))
"""
_CTRANSLATE2 = """
import sys, ctranslate2
translator = ctranslate2.Translator(sys.argv[1], device="cpu", intra_threads=1)
print(translator.translate_batch([["\u2581a"]], max_decoding_length=2)[0].hypotheses)
"""


def _run(code: str, *args: str, **env: str) -> str:
    """What a new Python process running `code` writes (stdout and stderr)."""
    done = programs.snippet(code, *args, env=env, timeout=600)
    return done.stdout + done.stderr


def _onednn_isa(output: str) -> str | None:
    found = re.search(r"onednn_verbose,info,cpu,isa:(.*)", output)
    return found.group(1).strip() if found else None


def tensorflow() -> str:
    output = _run(_TENSORFLOW, TF_CPP_MIN_LOG_LEVEL="0")  # its oneDNN prints no ISA
    return "oneDNN on" if "oneDNN custom operations are on" in output else "oneDNN off (Eigen)"


def xla() -> str:
    with tempfile.TemporaryDirectory() as dump:
        flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump}".strip()
        _run(_XLA, XLA_FLAGS=flags)
        options = "".join(path.read_text() for path in Path(dump).glob("*debug_options"))
    found = re.search(r'xla_cpu_max_isa: "(\w+)"', options)
    return f"capped at {found.group(1)}" if found else "the CPU's own"


def ctranslate2(directory: Path | None = None) -> str:
    """CTranslate2's selected instruction set and its oneDNN's, on a CTranslate2 model
    directory (a tiny one exported here when none is given)."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = directory or _tiny_ctranslate2_model(Path(scratch))
        output = _run(_CTRANSLATE2, str(directory), CT2_VERBOSE="1", ONEDNN_VERBOSE="1")
    selected = re.search(r"Selected ISA: (\w+)", output)
    return f"{selected.group(1) if selected else '?'}, its oneDNN {_onednn_isa(output)}"


def litert() -> str:
    """What tests/conftest.py gives the tests' LiteRT interpreters."""
    capped = os.environ.get("KT_TEST_NUMERIC_PATH") == "capped"
    return "builtin kernels, no XNNPACK" if capped else "XNNPACK's delegate"


def _tiny_ctranslate2_model(root: Path) -> Path:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras_transformer as kt
    from tests import bible

    vocabularies = bible.vocabularies()
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=vocabularies.target.vocabulary_size(), max_length=16
    )
    model = kt.build_transformer(config)
    return kt.export.export(model, root / "ct2", format="ctranslate2", vocabularies=vocabularies)


def report() -> dict[str, str]:
    return {
        "TensorFlow": tensorflow(),
        "XLA": xla(),
        "CTranslate2": ctranslate2(),
        "LiteRT": litert(),
    }


def not_capped(found: dict[str, str]) -> list[str]:
    """The engines of `report()` that did not take the capped path."""
    wanted = {
        "TensorFlow": "oneDNN off",
        "XLA": "capped at AVX2",
        "CTranslate2": "AVX2, its oneDNN Intel AVX2",
        "LiteRT": "builtin kernels",
    }
    return [name for name, text in wanted.items() if not found[name].startswith(text)]


def run_exact_tests(pytest_args: list[str]) -> int:
    """The `exact` tests on NUMERIC_PATH, on TensorFlow then on JAX: the first failing
    pass's exit status, or 0."""
    environment = {**os.environ, **NUMERIC_PATH}
    passes = [
        ["-n", "2", "--dist", "loadfile"],
        ["tests/jax", "tests/test_layer_contracts.py"],
    ]
    for backend, arguments in zip(("tensorflow", "jax"), passes, strict=True):
        print(f"The exact tests on the capped numeric path, KERAS_BACKEND={backend}:", flush=True)
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "exact"]
        status = subprocess.run(
            [*command, *arguments, *pytest_args], env={**environment, "KERAS_BACKEND": backend}
        ).returncode
        if status not in (0, 5):  # 5: no test of that pass is marked
            return status
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", choices=["capped"], help="fail unless every engine is capped")
    parser.add_argument(
        "--run-exact-tests",
        nargs=argparse.REMAINDER,
        metavar="PYTEST_ARGS",
        help="check the capped path, then run the exact tests on it",
    )
    args = parser.parse_args(argv)
    if args.run_exact_tests is not None:
        os.environ.update(NUMERIC_PATH)  # for the probes' processes
        args.check = "capped"
    found = report()
    for name, text in found.items():
        print(f"{name:12} {text}")
    if args.check and not_capped(found):
        print(f"not on the capped path: {', '.join(not_capped(found))}", file=sys.stderr)
        return 1
    if args.run_exact_tests is not None:
        return run_exact_tests(args.run_exact_tests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
