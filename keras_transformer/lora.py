"""LoRA (Hu et al., 2021) on a Transformer, with adapters that outlive a `.keras` file.

Keras's `enable_lora(rank)` adds `lora_kernel_a [in, rank]` and `lora_kernel_b [rank, out]`
to a `Dense` or `EinsumDense` and freezes its kernel. Saving merges them: a `.keras` file holds
`W + (alpha / rank) A B` and no adapters, so the loaded model is the fine-tuned one, without
LoRA (what serving wants). To go on training the adapters, or to keep several sets of them
for one base model, keep them apart: `save_adapters` writes them alone (a few hundred KB for
the base model at rank 8), `load_adapters` puts them back on a base model loaded again.

    model = keras.saving.load_model("base.keras")
    kt.lora.enable_lora(model, rank=8)  # query and value of every attention; the rest frozen
    model.compile(...); model.fit(...)
    kt.lora.save_adapters(model, "adapters.npz")
    ...
    model = keras.saving.load_model("base.keras")
    kt.lora.load_adapters(model, "adapters.npz")  # LoRA on, the adapters trained so far
"""

from __future__ import annotations

import json

import keras
import numpy as np

from keras_transformer import _workarounds as workarounds

TARGETS = ("query", "value")  # the LoRA paper's choice (its section 7.1)


def enable_lora(model, rank: int, *, alpha: float | None = None, targets=TARGETS) -> list[str]:
    """Turns LoRA on for the projections named `targets` inside every attention layer of
    `model` (`TransformerAttention`'s `query`, `key`, `value`, `output`), and freezes every
    other weight, their biases included: the adapters alone train (the LoRA paper's
    setting; keras-hub's `Backbone.enable_lora` leaves the biases trainable).

    Args:
        model: a built `keras.Model` (or layer) made of this library's layers.
        rank: int. The adapters' rank r.
        alpha: float or None. The scale's numerator, `alpha / rank`. Defaults to None (rank).
        targets: names of the projections. Defaults to ("query", "value").

    Returns:
        The paths of the layers given adapters.
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank={rank!r} must be an integer >= 1")
    unknown = set(targets) - {"query", "key", "value", "output"}
    if unknown:
        raise ValueError(f"targets {sorted(unknown)}: choose among query, key, value, output")
    layers = _projections(model, targets)
    if not layers:
        raise ValueError(f"{model.name} has no attention projection named {list(targets)}")
    _freeze(model)
    for layer in layers:
        _lora_on(layer, rank, alpha)
    return [layer.path for layer in layers]


def _freeze(model) -> None:
    """Every weight of `model` frozen, as Keras's `enable_lora` freezes a kernel: the weights,
    not the layers, whose `trainable=False` a `.keras` file would keep (the merged model
    would load with its layers frozen)."""
    for variable in model.weights:
        variable.trainable = False


def _lora_on(layer, rank: int, alpha) -> None:
    """Keras's `enable_lora` on `layer`, its bias frozen too (by `_freeze`): the adapters are
    all that trains, so that they are all that `save_adapters` needs to keep."""
    layer.enable_lora(rank, lora_alpha=alpha)


def save_adapters(model, path) -> None:
    """Writes the LoRA adapters of `model` (and each one's rank and alpha) to `path`, an
    `.npz` file; nothing else of the model."""
    layers = [layer for layer in workarounds.sublayers(model) if getattr(layer, "lora_enabled", 0)]
    if not layers:
        raise ValueError(f"{model.name} has no LoRA adapters: call enable_lora first")
    arrays, settings = {}, {}
    for index, layer in enumerate(layers):
        arrays[f"a{index}"] = keras.ops.convert_to_numpy(layer.lora_kernel_a)
        arrays[f"b{index}"] = keras.ops.convert_to_numpy(layer.lora_kernel_b)
        settings[layer.path] = {"index": index, "rank": layer.lora_rank, "alpha": layer.lora_alpha}
    np.savez(path, settings=np.array(json.dumps(settings)), **arrays)


def load_adapters(model, path) -> list[str]:
    """Puts the adapters of `path` (`save_adapters`) on the same layers of `model`, a model
    of the same configuration: LoRA is turned on there as `enable_lora` does (everything
    else frozen), and the adapters take the saved values.

    Returns:
        The paths of the layers given adapters.
    """
    with np.load(path) as stored:
        settings = json.loads(str(stored["settings"]))
        by_path = {layer.path: layer for layer in workarounds.sublayers(model)}
        missing = sorted(set(settings) - set(by_path))
        if missing:
            raise ValueError(f"{path}: {model.name} has no layer {', '.join(missing)}")
        _freeze(model)
        for layer_path, setting in settings.items():
            layer = by_path[layer_path]
            a, b = stored[f"a{setting['index']}"], stored[f"b{setting['index']}"]
            if not getattr(layer, "lora_enabled", False):
                _lora_on(layer, setting["rank"], setting["alpha"])
            if tuple(layer.lora_kernel_a.shape) != a.shape:
                raise ValueError(
                    f"{path}: {layer_path}'s adapter is {a.shape}, the layer's "
                    f"{tuple(layer.lora_kernel_a.shape)}"
                )
            layer.lora_kernel_a.assign(a)
            layer.lora_kernel_b.assign(b)
    return list(settings)


def _projections(model, targets) -> list:
    """The `targets` projections (`query_dense`...) of every attention layer in `model`."""
    from keras_transformer.layers.attention import TransformerAttention

    attentions = [
        layer
        for layer in [model, *workarounds.sublayers(model)]
        if isinstance(layer, TransformerAttention)
    ]
    return [getattr(attention, f"{name}_dense") for attention in attentions for name in targets]


__all__ = ["TARGETS", "enable_lora", "load_adapters", "save_adapters"]
