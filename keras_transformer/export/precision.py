"""Reduced-precision weights for an export: int8 (Keras's `quantize("int8")`) or bfloat16.

`reduced_precision(model, quantize)` gives the model an export writes, a copy of `model`
whose weights are `quantize`'s type; `model` itself is left as it was. Either copy is made
of the same Keras layers, so a SavedModel of it holds nothing but TensorFlow ops and loads,
as the float32 one does, with `tensorflow` and `tensorflow_text` alone:

- "int8": every projection and the embedding table (`Dense`, `EinsumDense`, `Embedding`)
  quantized by Keras's `quantize("int8")`: int8 weights with a float32 scale per output
  unit, each input quantized on the fly. Layer norms, biases and the position table stay
  float32.
- "bfloat16": the copy is built under Keras's "bfloat16" dtype policy: weights stored and
  matrix products computed in bfloat16; the softmax, the layer norms and the logits in
  float32 (as under mixed precision). CPUs compute bfloat16 natively only with AVX512_BF16
  or AMX-BF16 (x86) or the BF16 extension (Arm); elsewhere TensorFlow emulates it, slower
  than float32. So where the exporting CPU has none of them (`cpu_has_bfloat16`), the
  export falls back to float32 weights, with a warning; the manifest records the weights
  written ("quantize") and why ("quantize_fallback"). The choice is made on the machine
  that exports: export on (a machine like) the one that serves.

A model already quantized, or with LoRA adapters, is refused: its float weights are gone
(or not merged), and a second quantization would stack on the first.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import NamedTuple

import keras

from keras_transformer import _workarounds as workarounds
from keras_transformer.model import Transformer, zeros_initialized

QUANTIZE_MODES = ("int8", "bfloat16")
CPUINFO = Path("/proc/cpuinfo")
# The /proc/cpuinfo flags of native bfloat16 arithmetic, which oneDNN (TensorFlow's CPU
# kernels) uses: x86's AVX512_BF16 and AMX-BF16, Arm's BF16 extension.
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


class ReducedPrecision(NamedTuple):
    """What `reduced_precision` gives: the model to export, the type of its weights
    ("int8", "bfloat16" or "float32") and, when those are not the type asked for, why
    (else None)."""

    model: keras.Model
    weights: str
    fallback: str | None


def cpu_has_bfloat16(cpuinfo: Path = CPUINFO) -> bool:
    """Whether this machine's CPU computes bfloat16 natively: one of `BFLOAT16_FLAGS` among
    the flags (x86) or features (Arm) of `cpuinfo`. False where the file cannot be read
    (a system other than Linux): bfloat16 is then never assumed."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() in ("flags", "features") and set(value.split()) & set(
            BFLOAT16_FLAGS
        ):
            return True
    return False


def _check_quantize(quantize: str | None) -> None:
    """ValueError unless `quantize` is None or one of `QUANTIZE_MODES`."""
    if quantize is not None and quantize not in QUANTIZE_MODES:
        raise ValueError(f"quantize={quantize!r} must be None or one of {QUANTIZE_MODES}")


def _check_plain(model, quantize: str) -> None:
    """ValueError naming the first layer of `model` that is already quantized or has LoRA
    adapters: such a model has no plain float weights to quantize."""
    for layer in workarounds.sublayers(model):
        if getattr(layer, "quantization_mode", None) or getattr(layer, "lora_enabled", False):
            raise ValueError(
                f"quantize={quantize!r}: the model's layer {layer.path} is already quantized "
                "or has LoRA adapters; export it without quantize, or quantize its float "
                "weights (LoRA adapters merged) instead"
            )


def weight_type(model) -> str:
    """The type of `model`'s weights: its quantization mode ("int8") if any layer has one,
    else the dtype of its largest weight (the embedding table: "float32", "bfloat16"...)."""
    for layer in workarounds.sublayers(model):
        if getattr(layer, "quantization_mode", None):
            return layer.quantization_mode
    largest = max(model.weights, key=lambda weight: math.prod(weight.shape))
    return keras.backend.standardize_dtype(largest.dtype)


def reduced_precision(model, quantize: str | None) -> ReducedPrecision:
    """The model to export with `quantize`'s weights: a copy of `model`, which stays as it
    was (see the module doc).

    Args:
        model: a `TransformerSeq2SeqLM` or a `kt.Transformer`.
        quantize: str or None. "int8", "bfloat16", or None (`model` itself, as it is).

    Returns:
        A `ReducedPrecision`: the copy (a model of `model`'s class, a task with the same
        preprocessor and decoding settings), the type of its weights, and why they are not
        `quantize`'s (bfloat16 on a CPU without it: float32 weights, and a warning) or None.

    Raises:
        ValueError: `quantize` is not one of `QUANTIZE_MODES`, or `model` is already
            quantized or has LoRA adapters.
    """
    _check_quantize(quantize)
    if quantize is None:
        return ReducedPrecision(model, weight_type(model), None)
    _check_plain(model, quantize)
    fallback = None
    if quantize == "bfloat16" and not cpu_has_bfloat16():
        fallback = (
            "bfloat16 asked, and this CPU has no native bfloat16 arithmetic (AVX512_BF16, "
            "AMX-BF16 or Arm BF16), where TensorFlow emulates it, slower than float32: "
            "float32 weights written"
        )
        warnings.warn(f"quantize='bfloat16': {fallback}", UserWarning, stacklevel=2)
        return ReducedPrecision(model, weight_type(model), fallback)
    copy = _copy(model, "bfloat16" if quantize == "bfloat16" else None)
    if quantize == "int8":
        with warnings.catch_warnings():  # one a layer without weights (norms, dropout...)
            warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
            copy.quantize("int8")
    return ReducedPrecision(copy, quantize, None)


def _copy(model, dtype=None):
    """A new model of `model`'s class and config with its weights (cast to `dtype`'s, a
    dtype policy name; None: `model`'s own policy). A task's copy shares its preprocessor
    (which has no weights) and takes its decoding settings."""
    from keras_transformer.models import TransformerBackbone

    source = getattr(model, "backbone", model)  # every weight of a task is its backbone's
    policy = dtype or source.dtype_policy
    build = TransformerBackbone if isinstance(source, TransformerBackbone) else Transformer
    with zeros_initialized():  # every weight is the model's
        copy = build(model.config, dtype=policy)
    for variable, value in zip(copy.weights, source.weights, strict=True):
        variable.assign(keras.ops.cast(value, variable.dtype))
    if source is model:
        return copy
    return type(model)(
        copy,
        model.preprocessor,
        decoding=model.decoding,
        sampling=model.sampling,
        compile=False,
    )


__all__ = [
    "QUANTIZE_MODES",
    "ReducedPrecision",
    "cpu_has_bfloat16",
    "reduced_precision",
    "weight_type",
]
