"""TensorFlow's start-up lines: hidden from the command-line programs and from library use by
default, shown with TF_CPP_MIN_LOG_LEVEL=0; errors and Python's warnings still shown
(keras_transformer/_logs.py, which trainers/startup_logs.py loads). The LiteRT paths too:
TensorFlow Lite's INFO lines, and the converter's one ERROR line that is none."""

import re
import sys

import pytest

from tests import programs
from trainers import startup_logs

# What TensorFlow writes while it starts: Abseil's notice and C++ log lines of any severity
# ("I0000 00:00:1795580723.601126   14929 port.cc:153] oneDNN custom operations are on").
START_UP_LINE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog|[IWEF]\d{4} [\d:.]+ +\d+ \S+\] )"
)

INFO = b"I0000 00:00:1795580723.601126   14929 port.cc:153] oneDNN custom operations are on.\n"
NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
WARNING = b"W0000 00:00:1795580723.6   14929 dso_loader.cc:77] Could not load libcudnn.so.9\n"
NO_GPU = b"E0000 00:00:1795580916.3   16772 cuda_platform.cc:52] failed call to cuInit: ...\n"
ERROR = b"E0000 00:00:1795580916.3   16772 env.cc:12] could not read /data/x: permission denied\n"
OLD_FORMAT = b"2025-01-01 00:00:00.000000: I tensorflow/core/platform/cpu_feature_guard.cc:1] AVX\n"
PYTHON = b"/site-packages/x.py:1: UserWarning: a Python warning\n  warnings.warn(\n"
# tensorflow-text's SentencePiece, loading a vocabulary with the identity normalization.
PIECE_INFO = (
    b"normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use identity normalization.\n"
)
PIECE_ERROR = b"model_interface.cc(80) LOG(ERROR) a SentencePiece error\n"
# TensorFlow Lite's own logger: the interpreter's first allocation, and an error of its.
LITE_INFO = b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n"
LITE_ERROR = b"ERROR: Didn't find op for builtin opcode 'SOMETHING' version '9'.\n"
# The converter's Cast of tf.repeat folded into an Identity (keras_transformer/_logs.py), and
# another attribute that the check ignores: an error that is shown.
TRUNCATE = (
    b"E0000 00:00:1796540241.551491    5668 node_def_util.cc:682] NodeDef mentions attribute "
    b"Truncate which is not in the op definition: Op<name=Identity; signature=input:T -> "
    b"output:T; attr=T:type> This may be expected if your graph generating binary is newer  "
    b"than this binary. Unknown attributes will be ignored. NodeDef: {{node unnamed}}\n"
)
OTHER_ATTRIBUTE = (
    b"E0000 00:00:1796540241.5   5668 node_def_util.cc:682] NodeDef mentions attribute "
    b"debug_name which is not in the op definition: Op<name=VarHandleOp; ...>\n"
)
INFOS = INFO + OLD_FORMAT + PIECE_INFO + LITE_INFO
ERRORS = ERROR + OTHER_ATTRIBUTE + PIECE_ERROR
TEXT = NOTICE + INFOS + WARNING + NO_GPU + TRUNCATE + ERRORS + LITE_ERROR + PYTHON


@pytest.mark.parametrize(
    "level, kept",
    [
        (0, TEXT),
        (1, WARNING + NO_GPU + TRUNCATE + ERRORS + LITE_ERROR + PYTHON),
        (2, ERRORS + LITE_ERROR + PYTHON),
        (3, LITE_ERROR + PYTHON),
    ],
)
def test_each_level_hides_what_tensorflow_would(level, kept):
    assert startup_logs.filter_lines(TEXT, level) == kept


def test_a_fatal_line_is_never_hidden():
    fatal = b"F0000 00:00:1.5   1 cpu_feature_guard.cc:9] The TensorFlow library needs AVX\n"
    assert startup_logs.filter_lines(fatal, 9) == fatal


WINDOW = f"""
import os, sys, warnings
from trainers import startup_logs

with startup_logs.filtered_stderr(2):
    os.write(2, {INFO + NO_GPU + ERROR!r})
    print("printed by Python", file=sys.stderr)
    warnings.warn("a warning inside the window", stacklevel=1)
print("after the window", file=sys.stderr)
"""


def test_the_filter_writes_back_errors_and_python_output():
    result = programs.snippet(WINDOW, timeout=60)
    lines = result.stderr.splitlines()
    assert lines[0] == ERROR.decode().rstrip("\n")
    assert lines[1] == "printed by Python"
    assert "UserWarning: a warning inside the window" in lines[2]
    assert lines[-1] == "after the window"
    assert "port.cc" not in result.stderr and "cuInit" not in result.stderr


def test_install_does_nothing_once_tensorflow_is_loaded(monkeypatch):
    import tensorflow  # noqa: F401

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    startup_logs.install()
    assert not any(isinstance(f, startup_logs._logs._FirstTensorFlowImport) for f in sys.meta_path)


# What a user's shell gives a program: TF_CPP_MIN_LOG_LEVEL unset; SHOWN sets it to 0.
AS_A_USER = {"TF_CPP_MIN_LOG_LEVEL": None}
SHOWN = {"TF_CPP_MIN_LOG_LEVEL": "0"}
REFUSAL = "python -m trainers.average_checkpoints: error: --last=0 must be >= 1"


@pytest.fixture
def refused(tmp_path):
    """A command whose `--last 0` is refused after TensorFlow, Keras and the library are
    loaded (its model directory, with an experiment.yaml, passes the checks made before):
    the whole start-up, then an error that must still be printed."""
    (tmp_path / "experiment.yaml").write_text("model: {}\n")
    return ("trainers.average_checkpoints", "--model-dir", tmp_path, "--last", "0")


@pytest.mark.slow
def test_a_program_starts_quietly_and_still_prints_its_error(refused):
    result = programs.program(*refused, env=AS_A_USER, timeout=300, check=False)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [REFUSAL], result.stderr


@pytest.mark.slow
def test_tf_cpp_min_log_level_0_shows_the_start_up_lines_again(refused):
    result = programs.program(*refused, env=SHOWN, timeout=300, check=False)
    assert result.returncode == 2
    assert REFUSAL in result.stderr
    if not any(START_UP_LINE.match(line) for line in result.stderr.splitlines()):
        pytest.skip("TensorFlow writes no start-up line on this machine")


@pytest.fixture(scope="module")
def litert_export(tmp_path_factory, slice_run):
    """A model directory briefly trained (`trainers.train`: a copy of conftest's
    `slice_run`), and `trainers.export --format litert` of it run as a user runs it: `(its
    CompletedProcess, the LiteRT file)`."""
    pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
    import shutil

    tmp = tmp_path_factory.mktemp("litert-logs")
    shutil.copytree(slice_run, tmp / "model")
    out = tmp / "litert"
    exported = programs.program(
        "trainers.export", "--model-dir", tmp / "model", "--format", "litert", "--out", out,
        env=AS_A_USER, timeout=300, check=False,
    )  # fmt: skip
    return exported, out / "model.tflite"


@pytest.mark.slow
def test_a_litert_export_is_quiet(litert_export):
    """No line of the converter's (its ERROR about the `Truncate` attribute it ignores)."""
    exported, _ = litert_export
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert exported.stderr == "", exported.stderr
    assert exported.stdout.startswith("wrote ")


@pytest.mark.slow
def test_translating_with_a_litert_file_is_quiet_unless_asked(litert_export):
    """TensorFlow's start-up lines (its framework library loaded for tensorflow-text's ops)
    and TensorFlow Lite's XNNPACK line are hidden; TF_CPP_MIN_LOG_LEVEL=0 shows them."""
    _, model = litert_export
    quiet, shown = (
        programs.program(
            "trainers.translate", "--model", model, input="Jesus wept.\n", env=env, timeout=300
        )
        for env in (AS_A_USER, SHOWN)
    )
    for result in (quiet, shown):
        assert result.returncode == 0, result.stderr[-3000:]
        assert len(result.stdout.splitlines()) == 1
    assert len(quiet.stderr.splitlines()) == 1, quiet.stderr
    assert quiet.stderr.startswith("translated 1 sentence in "), quiet.stderr
    assert "INFO: Created TensorFlow Lite XNNPACK delegate" in shown.stderr
    assert any(START_UP_LINE.match(line) for line in shown.stderr.splitlines()), shown.stderr


LOAD_A_VOCABULARY = """
import sys
from trainers import startup_logs
import keras_transformer as kt

words = ["".join(chr(97 + (7 * i + 3 * j) % 26) for j in range(2 + i % 6)) for i in range(500)]
sentences = [" ".join(words[(13 * s + k) % 500] for k in range(8)) for s in range(2000)]
proto = kt.text.train_sentencepiece(sentences, 400)
with startup_logs.native_logs():
    kt.text.make_tokenizer(proto)
print("loaded", file=sys.stderr)
"""


@pytest.mark.slow
def test_sentencepieces_line_is_held_to_the_level_where_the_programs_load_a_vocabulary():
    quiet, shown = (
        programs.snippet(LOAD_A_VOCABULARY, env=env, timeout=300) for env in (AS_A_USER, SHOWN)
    )
    assert quiet.stderr.splitlines() == ["loaded"], quiet.stderr
    assert "precompiled_charsmap is empty" in shown.stderr


LIBRARY_USE = """
import keras_transformer as kt
from keras_transformer.models import TransformerSeq2SeqLM

vocabularies = kt.text.Vocabularies.train(
    ["In the beginning God created the heaven and the earth."] * 3,
    ["En el principio creó Dios los cielos y la tierra."] * 3,
    300,
)
config = kt.TransformerConfig.preset("tiny", vocab_size=vocabularies.target.vocabulary_size())
task = TransformerSeq2SeqLM.from_transformer(kt.build_transformer(config), vocabularies)
task.generate(["In the beginning.", "God."])
marian = TransformerSeq2SeqLM.from_preset("tests/fixtures/marian/shared")
marian.generate(["In the beginning."] * 3)
print("done")
"""


@pytest.mark.slow
def test_library_use_is_quiet_unless_asked():
    """A session of library calls (a vocabulary learned, a task made, a Marian checkpoint
    loaded, translations) writes nothing of TensorFlow's or SentencePiece's to standard error
    by default; TF_CPP_MIN_LOG_LEVEL=0 shows them."""
    runs = {}
    for level in (None, "0"):
        env = {"TF_CPP_MIN_LOG_LEVEL": level}  # None: unset
        result = programs.snippet(LIBRARY_USE, env=env, timeout=300)
        assert result.stdout.splitlines()[-1] == "done"
        runs[level] = result.stderr
    assert runs[None] == "", runs[None]
    assert "precompiled_charsmap is empty" in runs["0"]
    assert any(START_UP_LINE.match(line) for line in runs["0"].splitlines())
