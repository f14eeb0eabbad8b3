"""keras-transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)
as Keras 3 layers, a functional-API model, and the paper's training recipe.

Public API (`__all__`, and `dir()`; each module's `__all__` lists its own):
    TransformerConfig, PAD_ID           from config: sizes, switches and presets
    special_ids                         the special token ids of every vocabulary and search
    core                                the light core: decoding settings and their rules,
                                        special ids, the log filter (no TensorFlow, Keras
                                        or keras-hub: the light runtimes use it)
    Transformer, build_transformer      from model: the functional keras.Model
    WarmupSchedule                      from schedule: the learning-rate schedule (paper 5.3)
    config, model, schedule             the modules of the three lines above
    layers                              every sublayer as a keras.layers.Layer
    ops                                 scaled_dot_product_attention and mask builders
    losses, metrics                     label-smoothed loss, masked accuracy, perplexity
    decoding                            cached greedy search, beam search, sampling; a batch's
                                        slices decoded at once under XLA (parallel_search)
    corpus, text, data                  corpus readers, SentencePiece vocabularies, tf.data
    evaluation                          Translator (text in, text out) and sacrebleu scores
    export                              export(task, path, format=...): a TF Serving
                                        SavedModel, a CTranslate2 model or a LiteRT file
    serving                             open(path): the translators of the exports, in
                                        Python (CTranslate2's and LiteRT's without TensorFlow)
    models                              the keras-hub task family: TransformerSeq2SeqLM
                                        (from_preset, generate, fit, save_to_preset), its
                                        backbone, tokenizer and preprocessor
    pretrained                          published checkpoints read into this library's model:
                                        OPUS-MT (Marian) and NLLB-200, `pretrained.load`
    fast                                the opt-in speed path, behind one switch
    lora                                LoRA on the attention projections; adapters saved
                                        and loaded apart from the model
    tokenizers                          the imported models' in-graph tokenizers (Marian's
                                        piece vocabularies, NLLB-200's)
"""

import importlib
import os
import sys
from typing import TYPE_CHECKING

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# TensorFlow's start-up lines (oneDNN and CUDA notices, the failed cuInit of a machine without
# a GPU) and SentencePiece's "precompiled_charsmap is empty" are held back, as the programs
# hold them: TF_CPP_MIN_LOG_LEVEL is 2 unless set (TensorFlow reads it once, as it loads), and
# `core.logs` filters what TensorFlow writes before it reads it. TF_CPP_MIN_LOG_LEVEL=0 shows
# all.
from keras_transformer.core import logs as _logs  # noqa: E402

if "tensorflow" not in sys.modules:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    _logs.install()

# The package imports nothing heavy itself: `keras_transformer.core` and
# `keras_transformer.serving` (the light runtimes) import without TensorFlow, Keras or
# keras-hub. Every module that registers a class with `keras.saving` (the layers, the task
# family, the imported models' tokenizers) is imported once Keras is loaded, before or after
# this package (`_registration`), so that `keras.saving.load_model` and keras-hub's
# `from_preset` find them once `keras_transformer` is imported.
from keras_transformer import _registration  # noqa: E402

_registration.install()

# The public names, each imported on first use (PEP 562).
_NAMES = {
    "PAD_ID": "config",
    "TransformerConfig": "config",
    "Transformer": "model",
    "build_transformer": "model",
    "WarmupSchedule": "schedule",
}
_MODULES = (
    "config",
    "core",
    "corpus",
    "data",
    "decoding",
    "evaluation",
    "export",
    "fast",
    "layers",
    "lora",
    "losses",
    "metrics",
    "model",
    "models",
    "ops",
    "pretrained",
    "schedule",
    "serving",
    "special_ids",
    "text",
    "tokenizers",
)

if TYPE_CHECKING:
    from keras_transformer import (  # noqa: F401
        config,
        core,
        corpus,
        data,
        decoding,
        evaluation,
        export,
        fast,
        layers,
        lora,
        losses,
        metrics,
        model,
        models,
        ops,
        pretrained,
        schedule,
        serving,
        special_ids,
        text,
        tokenizers,
    )
    from keras_transformer.config import PAD_ID, TransformerConfig  # noqa: F401
    from keras_transformer.model import Transformer, build_transformer  # noqa: F401
    from keras_transformer.schedule import WarmupSchedule  # noqa: F401


# Internal modules under their former public names: importing one warns (DeprecationWarning)
# and gives the internal module; the aliases go in the next release.
_DEPRECATED_MODULES = ("backends", "files", "ragged", "workarounds")


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    if name in _MODULES or name in _DEPRECATED_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # The public API and the module's dunders (`__version__`...), not every module imported
    # along the way (PEP 562).
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})


from keras_transformer._version import __version__  # noqa: E402, F401

__all__ = [
    "PAD_ID",
    "Transformer",
    "TransformerConfig",
    "WarmupSchedule",
    "build_transformer",
    "config",
    "core",
    "corpus",
    "data",
    "decoding",
    "evaluation",
    "export",
    "fast",
    "layers",
    "lora",
    "losses",
    "metrics",
    "model",
    "models",
    "ops",
    "pretrained",
    "schedule",
    "serving",
    "special_ids",
    "text",
    "tokenizers",
]
