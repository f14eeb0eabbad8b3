"""Experiment configuration: a YAML file with `model`, `data`, `training` and `decoding`
sections mapped onto dataclasses, overridden from the command line with
`--set section.key=value`.

Unknown sections and keys, and values that cannot work, are errors that name the key and
where its value came from: the file, or the --set argument. The model section is a
`TransformerConfig`: `preset: NAME` plus any field override (`preset: null`: no preset, the
fields over TransformerConfig's defaults, as an imported model's experiment.yaml says); the
vocabulary sizes are not set there, they come from the vocabulary learned on the data.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import yaml

from keras_transformer import TransformerConfig
from keras_transformer.config import PRESETS
from keras_transformer.decoding.settings import DecodingSettings
from keras_transformer.text import MIN_VOCAB_SIZE
from trainers.errors import ConfigError

DATA_FORMATS = ("tsv", "text", "tfds")
SECTIONS = ("model", "data", "training", "decoding")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the parallel text is and how it becomes batches.

    Args:
        format: "tsv" (one file a split, columns named by language), "text" (files
            PREFIX.SRC and PREFIX.TGT a split) or "tfds" (a TensorFlow Datasets set).
        train, dev, test: per format, the TSV file, the path prefix, or the TFDS split name.
            dev and test may be null.
        source_language, target_language: TSV column names, file suffixes, or TFDS keys.
        tfds_name: TFDS dataset (format "tfds"), e.g. "wmt14_translate/de-en".
        tfds_data_dir: TFDS data directory; None means TFDS's default.
        train_limit: use only the first N training pairs (quick runs; the files are still
            checked to their end); None = all.
        vocab_size: SentencePiece pieces per vocabulary (a soft limit).
        shared_vocab: one vocabulary for both languages (needed by model.share_embeddings).
        vocab_model_type: "unigram" or "bpe".
        vocab_max_sentences: sentences sampled to learn the vocabulary (a shared vocabulary
            takes both sides of half as many pairs): a sample drawn while the corpus is
            scanned, so memory stays bounded whatever the corpus's size.
        tokens_per_batch: padded positions per global batch (paper: about 25000 a side).
        shuffle_buffer: pairs in the shuffle buffer.
    """

    format: str = "tsv"
    train: str = ""
    dev: str | None = None
    test: str | None = None
    source_language: str = "en"
    target_language: str = "es"
    tfds_name: str | None = None
    tfds_data_dir: str | None = None
    train_limit: int | None = None
    vocab_size: int = 8000
    shared_vocab: bool = True
    vocab_model_type: str = "unigram"
    vocab_max_sentences: int = 1_000_000
    tokens_per_batch: int = 4096
    shuffle_buffer: int = 100_000


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """How the model is trained (paper section 5).

    Args:
        steps: optimizer steps in all.
        steps_per_epoch: steps between checkpoints, backups and log lines.
        warmup_steps, learning_rate_scale: `WarmupSchedule` (paper 5.3).
        label_smoothing: eps_ls (paper 5.4).
        adam_beta_1, adam_beta_2, adam_epsilon: Adam (paper 5.3: 0.9, 0.98, 1e-9).
        jit_compile: "auto" (XLA with one replica, not across CPU devices), true or false.
        gradient_accumulation_steps: batches whose gradients make one update, the mean over
            all their target tokens (1 = off).
        bleu_every_steps: decode the dev set and log BLEU/chrF every K steps (0 = at the end
            only).
        bleu_max_sentences: decode at most this many dev sentences; None = all.
        bleu_beam_size: beam for the dev BLEU (1 = greedy, faster).
        keep_checkpoints: checkpoints kept (the last ones, for averaging).
        seed: seed of initialization, dropout and shuffling.
        deterministic: TensorFlow's op determinism: a run and its resumption after a crash
            give bit-identical weights (slower). The input order is always fixed by the seed.
        fast: turn on `keras_transformer.fast`, the speed path (the same model and results
            up to float rounding; false trains on the stock path).
    """

    steps: int = 10_000
    steps_per_epoch: int = 500
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    label_smoothing: float = 0.1
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    jit_compile: Any = "auto"
    gradient_accumulation_steps: int = 1
    bleu_every_steps: int = 0
    bleu_max_sentences: int | None = None
    bleu_beam_size: int = 1
    keep_checkpoints: int = 5
    seed: int = 1234
    deterministic: bool = False
    fast: bool = True


DecodingConfig = DecodingSettings
"""The `decoding` section: how the model translates once trained, the defaults of
`trainers.evaluate`, `trainers.export` and `trainers.visualize` (whose flags override them),
recorded once in the model directory so that a bare `evaluate` scores as the export serves.
It is the library's `kt.decoding.DecodingSettings` (beam_size, length_penalty, stopping,
finish_rule, max_extra_length, n_best, target_prefix, ranking; the paper's beam search,
section 6.1, by default),
under the name this module always gave it."""


@dataclasses.dataclass(frozen=True)
class Experiment:
    """The whole configuration of a run. `model` has its vocabulary sizes filled once the
    vocabulary is known (`with_vocab_sizes`)."""

    preset: str | None  # None: the model's fields alone (an imported model's)
    model: TransformerConfig
    data: DataConfig
    training: TrainingConfig
    decoding: DecodingSettings = DecodingSettings()

    def with_vocab_sizes(self, source: int, target: int) -> Experiment:
        if self.model.share_embeddings:
            model = self.model.replace(vocab_size=target)
        else:
            model = self.model.replace(source_vocab_size=source, target_vocab_size=target)
        return dataclasses.replace(self, model=model)

    def to_dict(self) -> dict[str, Any]:
        model = self.model.to_dict()
        return {
            "model": {"preset": self.preset, **model},
            "data": dataclasses.asdict(self.data),
            "training": dataclasses.asdict(self.training),
            "decoding": self.decoding.to_dict(),
        }


_VOCAB_FIELDS = ("vocab_size", "source_vocab_size", "target_vocab_size")


class _Origins:
    """Where each value of an experiment came from, for its errors: the YAML file, or the
    `--set` argument that set it (the last one, when a key is set twice)."""

    def __init__(self, path: str):
        self.path = path
        self.flags: dict[str, str] = {}  # "section.key" -> the --set argument

    def __call__(self, *names: str) -> str:
        """The origin of the values `names` ("section.key"): the --set arguments among
        them, with the file when some others come from it; the file alone otherwise."""
        flags = list(dict.fromkeys(self.flags[n] for n in names if n in self.flags))
        if not flags:
            return self.path
        told = ", ".join(f"--set {flag}" for flag in flags)
        rest = any(name not in self.flags for name in names)
        return f"{told} (with {self.path})" if rest else told


def load_experiment(path, overrides: list[str] = (), *, resolved: bool = False) -> Experiment:
    """Reads a YAML experiment and applies `section.key=value` overrides (values are YAML).

    An error names where the offending value came from: the file, or the override.
    `resolved=True` reads a model directory's experiment.yaml, whose model section holds the
    vocabulary sizes."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {_one_line(error)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with model, data and training sections")
    sections = {}
    for name in SECTIONS:
        section = raw.get(name) or {}
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: section {name!r} must be a mapping of keys to values")
        sections[name] = dict(section)
    for name in raw:
        if name not in sections:
            raise ConfigError(f"{path}: unknown section {name!r} (known: {', '.join(SECTIONS)})")
    origins = _Origins(str(path))
    for override in overrides:
        section, key, value = _parse_override(override)
        sections[section][key] = value
        origins.flags[f"{section}.{key}"] = override.strip()
    return _build(sections, origins, resolved=resolved)


def _parse_override(override: str):
    name, sep, text = override.partition("=")
    section, dot, key = name.strip().partition(".")
    if not sep or not dot or section not in SECTIONS or not key:
        raise ConfigError(
            f"--set {override!r}: expected SECTION.KEY=VALUE with SECTION one of "
            f"{', '.join(SECTIONS)}"
        )
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(
            f"--set {override!r}: value is not valid YAML: {_one_line(error)}"
        ) from None
    return section, key.strip(), value


def _one_line(error: yaml.YAMLError) -> str:
    """The parser's error in one line, as the programs print errors: what it expected and
    found, and where (its own message spans lines, with an excerpt of the text)."""
    mark = getattr(error, "problem_mark", None)
    parts = [getattr(error, "context", None), getattr(error, "problem", None)]
    what = "; ".join(part for part in parts if part) or str(error)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return " ".join(what.split()) + where


def _build(sections: dict[str, dict], where: _Origins, resolved: bool) -> Experiment:
    model = dict(sections["model"])
    # No preset (null): the fields below are the whole model, over TransformerConfig's
    # defaults (an imported model's, whose sizes are no preset's).
    preset = model.pop("preset", "base")
    if preset is not None and preset not in PRESETS:
        raise ConfigError(
            f"{where('model.preset')}: model.preset={preset!r}; choose one of "
            f"{sorted(PRESETS)}, or null for none"
        )
    for field in _VOCAB_FIELDS:
        if field in model and not resolved:
            raise ConfigError(
                f"{where(f'model.{field}')}: model.{field} comes from the learned vocabulary; "
                "set data.vocab_size instead"
            )
    data = _dataclass(DataConfig, sections["data"], "data", where)
    training = _dataclass(TrainingConfig, sections["training"], "training", where)
    decoding = _dataclass(DecodingSettings, sections["decoding"], "decoding", where)
    try:
        if preset is None:
            model_config = TransformerConfig.from_dict(model)
        else:
            model_config = TransformerConfig.preset(preset, **model)
    except ValueError as error:
        keys = [f"model.{key}" for key in model] or ["model"]
        raise ConfigError(f"{where(*keys)}: model: {error}") from None
    _check_data(model_config, data, where, resolved)  # the checks that span fields
    _check_counts(data, training, where)
    _check_training(training, where)
    return Experiment(preset, model_config, data, training, decoding)


def _dataclass(cls, values: dict, section: str, where: _Origins):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(
                f"{where(f'{section}.{key}')}: unknown key {section}.{key} "
                f"(known: {', '.join(sorted(fields))})"
            )
        _check_type(f"{section}.{key}", value, fields[key], where)
    try:
        return cls(**values)
    except ValueError as error:  # DecodingSettings checks its values: "beam_size=0 must..."
        keys = [f"{section}.{key}" for key in values] or [section]
        raise ConfigError(f"{where(*keys)}: {section}.{error}") from None


def _check_type(name: str, value, field: dataclasses.Field, where: _Origins) -> None:
    kind = field.type if isinstance(field.type, str) else field.type.__name__
    optional = "None" in kind
    if value is None:
        if not optional:
            raise ConfigError(f"{where(name)}: {name} may not be null")
        return
    expected = kind.split(" | ")[0]
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "Any": True,
    }[expected]
    if not ok:
        raise ConfigError(f"{where(name)}: {name}={value!r} must be of type {expected}")


def _at_least(where: _Origins, minimum: int, **values) -> None:
    for name, value in values.items():
        if value is not None and value < minimum:
            raise ConfigError(f"{where(name)}: {name}={value} must be >= {minimum}")


def _check_data(model: TransformerConfig, data: DataConfig, where: _Origins, resolved: bool):
    if data.format not in DATA_FORMATS:
        raise ConfigError(
            f"{where('data.format')}: data.format={data.format!r}; choose one of {DATA_FORMATS}"
        )
    if not data.train and not resolved:  # an imported model's directory has none yet
        raise ConfigError(f"{where('data.train')}: data.train is required")
    if data.format == "tfds" and not data.tfds_name:
        raise ConfigError(
            f"{where('data.format', 'data.tfds_name')}: data.format=tfds needs data.tfds_name"
        )
    if model.share_embeddings and not data.shared_vocab:
        raise ConfigError(
            f"{where('model.share_embeddings', 'data.shared_vocab')}: "
            "model.share_embeddings=true needs data.shared_vocab=true "
            "(one vocabulary for source, target and output projection)"
        )
    if data.vocab_model_type not in ("unigram", "bpe"):
        raise ConfigError(
            f"{where('data.vocab_model_type')}: data.vocab_model_type={data.vocab_model_type!r}"
        )
    if data.tokens_per_batch < model.max_length:
        raise ConfigError(
            f"{where('data.tokens_per_batch', 'model.max_length')}: "
            f"data.tokens_per_batch={data.tokens_per_batch} is smaller than "
            f"model.max_length={model.max_length}: no batch could hold a long sentence"
        )


def _check_counts(data: DataConfig, training: TrainingConfig, where: _Origins) -> None:
    _at_least(
        where,
        1,
        **{
            "data.train_limit": data.train_limit,
            "data.vocab_max_sentences": data.vocab_max_sentences,
            "training.steps": training.steps,
            "training.steps_per_epoch": training.steps_per_epoch,
            "training.warmup_steps": training.warmup_steps,
            "training.gradient_accumulation_steps": training.gradient_accumulation_steps,
            "training.bleu_max_sentences": training.bleu_max_sentences,
            "training.bleu_beam_size": training.bleu_beam_size,
            "training.keep_checkpoints": training.keep_checkpoints,
        },
    )
    _at_least(
        where,
        0,
        **{
            "data.shuffle_buffer": data.shuffle_buffer,
            "training.bleu_every_steps": training.bleu_every_steps,
        },
    )
    _at_least(where, MIN_VOCAB_SIZE, **{"data.vocab_size": data.vocab_size})


def _check_training(training: TrainingConfig, where: _Origins) -> None:
    if training.steps % training.steps_per_epoch:
        raise ConfigError(
            f"{where('training.steps', 'training.steps_per_epoch')}: "
            f"training.steps={training.steps} is not a multiple of "
            f"training.steps_per_epoch={training.steps_per_epoch} (the updates between "
            "checkpoints): set both, e.g. --set training.steps_per_epoch="
            f"{math.gcd(training.steps, training.steps_per_epoch)}"
        )
    if training.jit_compile not in ("auto", True, False):
        raise ConfigError(
            f"{where('training.jit_compile')}: training.jit_compile={training.jit_compile!r}; "
            "use auto, true or false"
        )
    if not 0 <= training.label_smoothing < 1:
        raise ConfigError(
            f"{where('training.label_smoothing')}: training.label_smoothing must be in [0, 1)"
        )


def open_split(data: DataConfig, split: str):
    """A split to stream (`CorpusFiles` or `TfdsSplit`), not yet read; None if not configured.

    `data.train` etc. may be a glob pattern matching several TSV files."""
    from keras_transformer import corpus

    location = getattr(data, split)
    if location is None:
        return None
    source, target = data.source_language, data.target_language
    if data.format == "tsv":
        return corpus.tsv_files(location, source, target)
    if data.format == "text":
        return corpus.text_files(f"{location}.{source}", f"{location}.{target}")
    return corpus.TfdsSplit(data.tfds_name, location, source, target, data.tfds_data_dir)


def read_split(data: DataConfig, split: str):
    """The `ParallelCorpus` of a split ("train", "dev" or "test") read into memory, or None if
    not configured."""
    opened = open_split(data, split)
    if opened is None:
        return None
    pairs = opened.read()
    if split == "train" and data.train_limit:
        pairs = pairs.take(data.train_limit)
    return pairs
