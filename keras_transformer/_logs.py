"""TensorFlow's start-up lines, held to `TF_CPP_MIN_LOG_LEVEL`.

TensorFlow reads `TF_CPP_MIN_LOG_LEVEL` only once its libraries are loaded, but their static
initializers log before that, through Abseil, which writes every line before
`absl::InitializeLog()` whatever the threshold (abseil/abseil-cpp#1957, open; TensorFlow's
side: tensorflow/tensorflow#102212). Each of the two copies of these libraries that
`import tensorflow` loads writes, whatever the level:

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795580723.601126   14929 port.cc:153] oneDNN custom operations are on. ...
    I0000 00:00:1795580723.601438   14929 cudart_stub.cc:31] Could not find cuda drivers ...

and the first look at the devices adds, on a machine without a usable GPU,

    E0000 00:00:1795580916.328109   16772 cuda_platform.cc:52] failed call to cuInit: ...

`install()` runs the first `import tensorflow` of the process, and that look at the devices,
with file descriptor 2 sent to a temporary file; then it writes back every line except those
the level hides: log lines below it (INFO at 1, WARNING too at 2, ERROR too at 3), Abseil's
notice (from 1) and the failed cuInit (from 2, as the warning it is: no GPU). Anything else,
Python's warnings included, is written back as it was, after the import. With
`TF_CPP_MIN_LOG_LEVEL=0` nothing is filtered. A crash inside the import would lose the
captured lines: `faulthandler` still reports where it happened, and the same command with
`TF_CPP_MIN_LOG_LEVEL=0` shows everything.

Later lines are left to the level, but a few. tensorflow-text's own copy of SentencePiece
logs through its own logger, which no setting of that copy reaches from Python (its level
is a C++ static, not exported), and writes

    normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use identity normalization.

for each vocabulary without a normalization table (every one this project learns: its
normalization is the identity) when the op loads it: making a tokenizer, loading a
SavedModel. The programs run those calls inside `native_logs()`, which holds SentencePiece's
lines to the level as TensorFlow's (its INFO hidden from 1).

The LiteRT paths write three more kinds, none of them held to any level from Python:

- Running a LiteRT file without importing TensorFlow (`kt.serving.LiteRTTranslator`) loads
  TensorFlow's framework library for tensorflow-text's op registrar, and its static
  initializers write Abseil's notice and the oneDNN and cudart lines above.
- LiteRT's interpreter, at its first allocation of tensors, writes through TensorFlow Lite's
  own logger, which reads no `TF_CPP_MIN_LOG_LEVEL` (its level is set from C++ alone,
  `tflite::LoggerOptions::SetMinimumLogSeverity`, which ai-edge-litert's Python does not
  reach: tensorflow/tensorflow#58050, #74882)

      INFO: Created TensorFlow Lite XNNPACK delegate for CPU.

- LiteRT's converter (`kt.export.litert_convert.convert`), on any graph with `tf.repeat` (the
  search's `ops.repeat` of its hypotheses), writes an ERROR that is none: TensorFlow's repeat
  casts its int32 `repeats` to int32, the converter folds that Cast into an Identity that keeps
  the Cast's `Truncate` attribute, and TensorFlow's check of the new node logs that it ignores
  the attribute (no upstream issue found; `tf.repeat` in any converted function shows it)

      E0000 00:00:1796540241.551491    5668 node_def_util.cc:682] NodeDef mentions attribute
      Truncate which is not in the op definition: Op<name=Identity; ...> This may be expected
      if your graph generating binary is newer  than this binary. Unknown attributes will be
      ignored. NodeDef: {{node unnamed}}

  (one line). The translator and the converter run those calls inside `native_logs()`, where
  TensorFlow Lite's INFO lines are held to the level as TensorFlow's (from 1; its WARNING and
  ERROR lines are always shown), and this one line of `node_def_util.cc` counts as the warning
  it is (from 2, as the failed cuInit); any other attribute, or another op, is shown.

TensorFlow's `util.cc:131] oneDNN supports DT_INT64 only on platforms with AVX-512` (an
ERROR, once a process, for the first int64 Transpose in a graph, whatever the CPU) has its
cause removed instead: the library's graphs join ragged rows without TensorFlow's ragged
concatenation, which transposes int64 row splits (`keras_transformer._ragged`).
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile

# Abseil's "I0000 00:00:1795580723.601126   14929 port.cc:153] ...", TensorFlow's older
# "2025-01-01 00:00:00.000000: I tensorflow/core/...cc:42] ...", tensorflow-text's
# SentencePiece's "normalizer.cc(51) LOG(INFO) precompiled_charsmap is ..." and TensorFlow
# Lite's "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." (its INFO alone): the
# severity.
_LOG_LINE = re.compile(
    rb"^(?:(?:(?P<absl>[IWEF])\d{4} [\d:.]+ +\d+ |[\d-]+ [\d:.]+: (?P<tf>[IWEF]) )\S+:\d+\] "
    rb"|\S+\.cc\(\d+\) LOG\((?P<piece>[IWEF])(?:NFO|ARNING|RROR|ATAL)\) "
    rb"|(?P<lite>I)NFO: )"
)
_SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_ABSL_NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called"
# ERROR lines that are warnings (the module doc): a machine without a GPU, and the converter's
# Cast folded into an Identity.
_WARNINGS_AS_ERRORS = (
    b"failed call to cuInit",
    b"] NodeDef mentions attribute Truncate which is not in the op definition: Op<name=Identity;",
)


def min_log_level() -> int:
    """TF_CPP_MIN_LOG_LEVEL as TensorFlow reads it: 0 when unset or not a number."""
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


def hidden(line: bytes, level: int) -> bool:
    """Whether TensorFlow, had it read `level` in time, would not have written `line`."""
    if level >= 1 and line.startswith(_ABSL_NOTICE):
        return True
    match = _LOG_LINE.match(line)
    if match is None:
        return False
    severity = _SEVERITY[match["absl"] or match["tf"] or match["piece"] or match["lite"]]
    if severity == _SEVERITY[b"E"] and any(known in line for known in _WARNINGS_AS_ERRORS):
        severity = _SEVERITY[b"W"]
    return severity < min(level, _SEVERITY[b"F"])


def filter_lines(text: bytes, level: int) -> bytes:
    """`text` without the lines that `hidden` names."""
    return b"".join(line for line in text.splitlines(keepends=True) if not hidden(line, level))


@contextlib.contextmanager
def filtered_stderr(level: int):
    """Sends file descriptor 2 to a temporary file inside the block, then writes back what
    `filter_lines` keeps. A no-op when descriptor 2 is not open."""
    sys.stderr.flush()
    try:
        terminal = os.dup(2)
    except OSError:
        yield
        return
    faulthandler_was_on = faulthandler.is_enabled()
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        faulthandler.enable(file=terminal)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(terminal, 2)
            if faulthandler_was_on:  # on descriptor 2: `sys.stderr` may have none (Jupyter)
                faulthandler.enable(file=2)
            else:
                faulthandler.disable()
            os.close(terminal)
            capture.seek(0)
            kept = filter_lines(capture.read(), level)
            while kept:
                kept = kept[os.write(2, kept) :]


def native_logs():
    """A block whose C++ log lines (TensorFlow's, TensorFlow Lite's and tensorflow-text's
    SentencePiece's) are held to `TF_CPP_MIN_LOG_LEVEL` (`filtered_stderr`), or left alone
    at level 0. For the calls that load a SentencePiece model or a LiteRT file (milliseconds)
    and for a LiteRT conversion (seconds): anything else written to standard error meanwhile
    is written back after them."""
    level = min_log_level()
    return filtered_stderr(level) if level > 0 else contextlib.nullcontext()


class _FilteredLoader(importlib.abc.Loader):
    """TensorFlow's own loader, run inside `filtered_stderr`, then the look at the devices."""

    def __init__(self, loader, level: int):
        self.loader = loader
        self.level = level

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.loader
        with filtered_stderr(self.level):
            self.loader.exec_module(module)
            module.config.list_physical_devices()


class _FirstTensorFlowImport(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` with the other finders, once, and wraps its loader."""

    def __init__(self, level: int):
        self.level = level

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _FilteredLoader(spec.loader, self.level)
        return spec


def install() -> None:
    """Filters the first `import tensorflow` of this process, if it is still to come and
    `TF_CPP_MIN_LOG_LEVEL` hides anything."""
    level = min_log_level()
    if level <= 0 or "tensorflow" in sys.modules:
        return
    if any(isinstance(finder, _FirstTensorFlowImport) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _FirstTensorFlowImport(level))
