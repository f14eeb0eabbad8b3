"""The LiteRT converter's call, the weights' quantization and the check of the ops written.

`convert` turns the traced signatures (`kt.export.litert_trace`) into the file's bytes in two
stages: `save_signatures` writes a SavedModel of them (the variables they read in its
checkpoint: no graph proto holds the weights, so protobuf's 2 GB limit is not theirs), and
`convert_saved_model` converts it, freezing the weights into the file's constants as the
converter reads them. `kt.export.litert.write` runs the second stage in a process of its own
(`kt.export.litert_child`), which holds the converter's memory and not the model's.
The file holds LiteRT's builtin ops and tensorflow-text's (`TEXT_OPS`) as custom ops, the
weights in float32, float16 or int8 (the converter's own dynamic-range quantization), or int4
(ai-edge-quantizer over the float32 file: `INT4_RECIPE`, the projections in int4 and the
embedding table in int8). `check_ops` refuses a file with any other op (a Flex op, which a
phone's standard runtime lacks).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path

import tensorflow as tf

from keras_transformer import _logs

# The custom ops the file may hold: tensorflow-text's, registered by its
# `tflite_registrar.SELECT_TFTEXT_OPS`.
TEXT_OPS = (
    "RaggedTensorToTensor",
    "TFText>ByteSplitWithOffsets",
    "TFText>FastSentencepieceTokenize",
    "TFText>NgramsStringJoin",
)
QUANTIZE = ("int8", "int4", "float16")


def _entry(operation: str, bits: int) -> dict:
    """ai-edge-quantizer's recipe entry for `operation`'s weights: symmetric `bits`-bit
    integers, a float scale for each output channel, computed as its dynamic-range kernels
    compute (`compute_precision` INTEGER: the activations quantized on the fly)."""
    return {
        "regex": ".*",
        "operation": operation,
        "algorithm_key": "min_max_uniform_quantize",
        "op_config": {
            "weight_tensor_config": {
                "num_bits": bits,
                "symmetric": True,
                "granularity": "CHANNELWISE",
                "dtype": "INT",
            },
            "compute_precision": "INTEGER",
            "explicit_dequantize": False,
        },
    }


# Every projection (FULLY_CONNECTED: the attention's, the feed-forward's) in int4, and the
# embedding table (its one EMBEDDING_LOOKUP: `litert_trace.looked_up`) in int8: the tied
# output projection reads the looked-up table, and an int4 table cost test BLEU at the demo's
# size (BENCHMARKS.md, "On a device: LiteRT"). A scale a channel, not a block: ai-edge-litert
# 2.3.0's builtin FULLY_CONNECTED kernel (LiteRT without XNNPACK) gives wrong products for
# blockwise int4 weights, which XNNPACK computes right; channelwise ones both compute alike.
INT4_RECIPE = [_entry("FULLY_CONNECTED", 4), _entry("EMBEDDING_LOOKUP", 8)]


def convert(functions, quantize: str | None = None) -> bytes:
    """The LiteRT file of a `tf.function` with an input signature (its signature
    `serving_default`), or of a dict of them by signature name: builtin ops, and
    tensorflow-text's as custom ops; int8 (dynamic range), int4 (`quantized_int4`) or
    float16 weights if asked. Both stages in this process: `save_signatures` into a
    temporary folder, then `convert_saved_model`."""
    check_quantize(quantize)
    with tempfile.TemporaryDirectory(prefix="kt-litert-") as folder:
        keys = save_signatures(functions, Path(folder) / "signatures")
        return convert_saved_model(Path(folder) / "signatures", keys, quantize)


def check_quantize(quantize: str | None) -> None:
    """ValueError for weights other than float32 (None) and `QUANTIZE`."""
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(f"quantize={quantize!r} must be None or one of {QUANTIZE}")


def save_signatures(functions, directory) -> list[str]:
    """The first stage of `convert`: writes the SavedModel at `directory` (a new folder)
    whose signatures are `functions` (a `tf.function` with an input signature, named
    `serving_default`, or a dict of them by signature name), the variables they read in its
    checkpoint. Returns the signature names, in order, as `convert_saved_model` takes them.

    The weights stay in the checkpoint (no graph holds them, so none meets protobuf's 2 GB)
    until the converter freezes them as it reads it: `convert_saved_model` in a process
    that never held the model needs its memory alone."""
    if not isinstance(functions, dict):
        functions = {"serving_default": functions}
    root = tf.Module()  # the functions' owner, and of the variables they read
    concrete, variables = {}, {}
    for name, function in functions.items():
        setattr(root, name, function)
        concrete[name] = function.get_concrete_function()
        variables.update({id(variable): variable for variable in concrete[name].variables})
    root.weights = list(variables.values())
    options = tf.saved_model.SaveOptions(save_debug_info=True)  # as the converter saves
    tf.saved_model.save(root, str(directory), signatures=concrete, options=options)
    return list(concrete)


def convert_saved_model(directory, signature_keys, quantize: str | None = None) -> bytes:
    """The second stage of `convert`: the LiteRT file of the signatures `signature_keys` of
    the SavedModel at `directory` (`save_signatures`'), with `convert`'s ops and weights.
    `kt.export.litert_child` runs it in a process of its own."""
    check_quantize(quantize)
    import tensorflow_text  # noqa: F401  (registers its ops, which the SavedModel's graphs hold)

    converter = tf.lite.TFLiteConverter.from_saved_model(
        str(directory), signature_keys=list(signature_keys)
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = True  # tensorflow-text's; `check_ops` refuses any other
    if quantize in ("int8", "float16"):
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    with _logs.native_logs():  # its ERROR line that is none, held to the level (_logs)
        blob = converter.convert()
    return quantized_int4(blob) if quantize == "int4" else blob


def quantized_int4(blob: bytes) -> bytes:
    """A float32 LiteRT file with its projections' weights in int4 and its embedding
    lookups' table in int8, a scale a channel (`INT4_RECIPE`), by ai-edge-quantizer (`pip
    install ai-edge-quantizer`); every other op as it was."""
    try:
        from ai_edge_quantizer import quantizer
    except ImportError as error:
        raise ImportError(
            "quantize='int4' for a LiteRT file needs ai-edge-quantizer: pip install "
            "ai-edge-quantizer (requirements.txt names the version tested)"
        ) from error
    found = quantizer.Quantizer(blob, INT4_RECIPE)
    with _without_progress_bars():
        result = found.quantize(enable_progress_bar=False, enable_progress_report=False)
    return bytes(result.quantized_model)


@contextlib.contextmanager
def _without_progress_bars():
    """A block whose Python standard error is held, then written back without tqdm's
    progress bars (the lines that carry its carriage returns); an exception passes through.

    ai-edge-quantizer 0.10.0 hands `quantize(enable_progress_bar=False)` to its parameters'
    bar only: its model modifier's ("Applying Transformations to tensors", shown for 100
    tensors or more) is built with the default (`Quantizer._get_quantized_model` passes no
    flag to `ModelModifier.modify_model`; no upstream issue found), and `TQDM_DISABLE` does
    not reach it either (the bar's `disable` is given explicitly). Goes when the flag does.
    """
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            yield
    finally:
        lines = held.getvalue().split("\n")  # not splitlines: it cuts at "\r" as well
        sys.stderr.write("\n".join(line for line in lines if "\r" not in line))


def op_names(blob) -> list[str]:
    """Every op name of a LiteRT file (its bytes, or a path to it), sorted, as
    `tf.lite.experimental.Analyzer` lists them (builtins in capitals, custom ops by their
    own names)."""
    report = io.StringIO()
    given = {"model_content": blob} if isinstance(blob, bytes) else {"model_path": str(blob)}
    with contextlib.redirect_stdout(report):
        tf.lite.experimental.Analyzer.analyze(**given)
    return sorted(set(re.findall(r"Op#\d+ ([^(\s]+)\(", report.getvalue())))


def check_ops(ops: list[str]) -> None:
    """Raises ValueError naming every op of `ops` that is neither a LiteRT builtin nor one of
    tensorflow-text's `TEXT_OPS` (a Flex op, or an op no runtime registers)."""
    other = [op for op in ops if not re.fullmatch(r"[A-Z0-9_]+", op) and op not in TEXT_OPS]
    if other:
        raise ValueError(
            f"the LiteRT file would hold ops a device runtime lacks: {other} (only builtins "
            f"and tensorflow-text's {list(TEXT_OPS)} may appear)"
        )


__all__ = [
    "INT4_RECIPE",
    "QUANTIZE",
    "TEXT_OPS",
    "check_ops",
    "check_quantize",
    "convert",
    "convert_saved_model",
    "op_names",
    "quantized_int4",
    "save_signatures",
]
