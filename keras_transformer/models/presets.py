"""Where a `TransformerSeq2SeqLM` comes from: a keras-hub preset, a Hugging Face Marian
(OPUS-MT) or NLLB-200 (M2M100) checkpoint (a directory, or `hf://ORG/NAME[@REVISION]` on the
Hub), or a `trainers.train` model directory, told apart by their files."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import keras_hub

from keras_transformer import _hub as hub
from keras_transformer import _workarounds as workarounds
from keras_transformer.decoding.settings import DecodingSettings
from keras_transformer.models.keywords import check_keywords

PRESET = "preset"
CHECKPOINT = "checkpoint"  # a Hugging Face checkpoint of a family kt.pretrained converts
MODEL_DIRECTORY = "model directory"
MODEL_FILE = "model.keras"  # a model directory's trained model (trainers.run_dir's MODEL)
EXPERIMENT = "experiment.yaml"
VOCABULARY = "vocab"
# What `from_preset` takes beside `load_weights`: `decoding` whatever the preset, `model_file`
# for a model directory, and for a keras-hub preset what keras-hub's loader takes: its
# `dtype` (the backbone's) and the task's own constructor arguments.
KEYWORDS = ("decoding", "model_file")
KERAS_HUB_KEYWORDS = ("dtype", "preprocessor", "sampling", "compile", "name", "trainable")


def kind(preset, model_file: str | None = None) -> str:
    """What `preset` is: `PRESET` (a keras-hub preset, or a handle keras-hub resolves),
    `CHECKPOINT` (a Hugging Face checkpoint of a `model_type` that `kt.pretrained.FAMILIES`
    converts) or `MODEL_DIRECTORY`. Raises ValueError naming the path or file otherwise."""
    if isinstance(preset, str) and "://" in preset:
        return PRESET  # kaggle://, hf://...: keras-hub's loaders
    path = Path(preset)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such preset or model directory")
    if not path.is_dir():
        raise ValueError(f"{path} is a file; a preset, checkpoint or model directory is a folder")
    if model_file is not None:
        return MODEL_DIRECTORY
    config_path = path / "config.json"
    if config_path.exists():
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(f"{config_path}: not valid JSON ({error})") from None
        if not isinstance(config, dict):
            raise ValueError(f"{config_path}: expected a JSON object")
        if "registered_name" in config:
            return PRESET
        if "model_type" in config:
            _check_converted(config_path, config["model_type"])
            return CHECKPOINT
    if (path / MODEL_FILE).exists() or (path / EXPERIMENT).exists():
        return MODEL_DIRECTORY
    raise ValueError(
        f"{path} is neither a keras-hub preset (config.json with 'registered_name', as "
        "save_to_preset writes it), a Hugging Face Marian or NLLB-200 checkpoint (config.json "
        "with 'model_type': 'marian' or 'm2m_100') nor a trainers.train model directory "
        "(experiment.yaml, model.keras, vocab/)"
    )


def load_task(cls, preset, load_weights: bool = True, *, decoding=None, model_file=None, **kwargs):
    """`cls.from_preset`: the task of a preset, checkpoint or model directory, with
    `decoding` (settings or a dict of some settings) over the one it stores. A keyword it
    does not take is refused by name before anything is read or downloaded."""
    # `load_weights` is a parameter of its own: named among those taken, for a misspelling.
    taken = ("load_weights", *KEYWORDS)
    check_keywords(kwargs, KERAS_HUB_KEYWORDS, f"{cls.__name__}.from_preset", taken)
    if hub.is_hub_id(preset):
        preset = _from_hub(preset, model_file)
    found = kind(preset, model_file)
    if found == PRESET:
        _check_backbone(preset, cls)
        task = keras_hub.models.Task.from_preset.__func__(cls, str(preset), load_weights, **kwargs)
    else:
        if kwargs:
            raise ValueError(
                f"{preset} is a {found}: from_preset takes no {sorted(kwargs)} for it "
                "(only decoding= and, for a model directory, model_file=)"
            )
        if found == CHECKPOINT:
            from keras_transformer.pretrained import import_checkpoint

            imported = import_checkpoint(preset)
            model, vocabularies, stored = imported.model, imported.vocabularies, imported.decoding
        else:
            model, vocabularies, stored = _model_directory(Path(preset), model_file or MODEL_FILE)
        task = task_from_transformer(cls, model, vocabularies, stored, share_weights=True)
    if isinstance(decoding, dict):
        task.decoding = task.decoding.replace(**decoding)
    elif decoding is not None:
        if not isinstance(decoding, DecodingSettings):
            raise ValueError(f"decoding={decoding!r} must be a DecodingSettings or a dict")
        task.decoding = decoding
    return task


def task_from_transformer(cls, model, vocabularies, decoding=None, share_weights=False, **kwargs):
    """The task of a `kt.Transformer` and its `Vocabularies`: a `TransformerBackbone` built
    from the same config, with the weights copied into it, or with `share_weights` the
    model's own layers (no second copy of the weights in memory)."""
    from keras_transformer.model import zeros_initialized
    from keras_transformer.models.backbone import TransformerBackbone
    from keras_transformer.models.preprocessor import TransformerSeq2SeqLMPreprocessor
    from keras_transformer.models.tokenizer import TransformerTokenizer

    changed = [
        layer.path
        for layer in workarounds.sublayers(model)
        if getattr(layer, "quantization_mode", None) or getattr(layer, "lora_enabled", False)
    ]
    if changed:
        raise ValueError(
            f"the model {model.name!r} does not have a plain Transformer's weights ({changed[0]} "
            "is quantized or has LoRA adapters): merge or dequantize it first"
        )
    if share_weights:
        backbone = TransformerBackbone(model.config, layers_of=model)
    else:
        with zeros_initialized():  # every weight is the model's
            backbone = TransformerBackbone(model.config)
        for variable, value in zip(backbone.weights, model.weights, strict=True):
            variable.assign(value)  # one at a time, no numpy copy
    preprocessor = TransformerSeq2SeqLMPreprocessor(TransformerTokenizer(vocabularies))
    return cls(backbone, preprocessor, decoding=decoding, **kwargs)


def _from_hub(preset: str, model_file: str | None):
    """A Hub checkpoint this library converts (Marian, NLLB-200) as its downloaded snapshot
    directory; anything else on the Hub (a keras-hub preset, a transformers model keras-hub
    converts) as the id itself, for keras-hub's loader, which downloads it as it does today.
    The id is checked, and config.json downloaded, first."""
    snapshot = hub.fetch(preset)
    if snapshot.model_type is not None:
        if model_file is not None:
            raise ValueError(
                f"model_file={model_file!r}: {preset} is a Hugging Face checkpoint, not a model "
                "directory"
            )
        return snapshot.path
    if snapshot.revision is not None:
        raise ValueError(
            f"{preset}: not a Marian or NLLB-200 checkpoint, so keras-hub's loader reads it, "
            f"and it takes no revision: load {hub.PREFIX}{snapshot.repo_id}"
        )
    return preset


def _check_converted(config_path: Path, model_type) -> None:
    """Refuses a config.json whose `model_type` no family of `kt.pretrained.FAMILIES`
    converts, naming the ones that do."""
    from keras_transformer.pretrained import FAMILIES

    if model_type not in FAMILIES:
        converted = ", and ".join(f"{name!r}: {f.title}" for name, f in FAMILIES.items())
        raise ValueError(
            f"{config_path}: model_type={model_type!r} is not one this library converts (it "
            f"converts {converted})"
        )


def _check_backbone(preset, cls) -> None:
    """Refuses a local preset of another backbone, naming its config.json."""
    config_path = Path(preset) / "config.json"
    if not config_path.exists():
        return  # a handle: keras-hub checks it
    registered = json.loads(config_path.read_text(encoding="utf-8"))["registered_name"]
    found = keras.saving.get_registered_object(registered)
    if found is not cls.backbone_cls:
        raise ValueError(
            f"{config_path}: a preset of {registered}, not of "
            f"{cls.backbone_cls.__name__}; load it with keras-hub's own task for that model"
        )


def _model_directory(path: Path, model_file: str):
    """A `trainers.train` (or `trainers.import_marian`) model directory's model, vocabulary
    and decoding settings (its experiment.yaml's `decoding` section)."""
    import yaml

    from keras_transformer.text import Vocabularies

    model_path = path / model_file
    if not model_path.exists():
        raise FileNotFoundError(f"{model_path}: no such model file in the model directory")
    if not (path / VOCABULARY).is_dir():
        raise FileNotFoundError(f"{path / VOCABULARY}: the model directory has no vocabulary")
    decoding = DecodingSettings()
    experiment = path / EXPERIMENT
    if experiment.exists():
        try:
            section = (yaml.safe_load(experiment.read_text(encoding="utf-8")) or {}).get("decoding")
        except yaml.YAMLError as error:
            raise ValueError(f"{experiment}: not valid YAML: {error}") from None
        if section:
            decoding = DecodingSettings.from_dict(section, f"{experiment}, decoding")
    model = keras.saving.load_model(model_path)
    return model, Vocabularies.load(path / VOCABULARY), decoding


__all__ = ["CHECKPOINT", "MODEL_DIRECTORY", "PRESET", "check_keywords", "kind"]
