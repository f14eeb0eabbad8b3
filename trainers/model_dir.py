"""The model directory: what a training run writes, and how the other programs read it.

    DIR/experiment.yaml        the resolved configuration (owns the directory)
    DIR/vocab/                 SentencePiece model(s): shared.model or source/target.model,
                               and manifest.json (their sha256: replaced files are refused)
    DIR/checkpoints/           ckpt-NNNNN.weights.h5, one every training.steps_per_epoch steps
    DIR/backup/                the training state a restarted run resumes from (see
                               trainers/checkpointing.py); a finished run keeps its last one
    DIR/logs/                  TensorBoard
    DIR/model.keras            the trained model (fine-tune it with model.fit)
    DIR/model.averaged.keras   written by trainers.average_checkpoints
    DIR/train_summary.json     strategy, replicas, steps, losses, tokens/s, dev BLEU
    DIR/eval/                  hypotheses and scores from trainers.evaluate

Everything is written under a temporary name and renamed, so a crash never leaves a
half-written file under a real name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import keras
import numpy as np
import yaml

import keras_transformer  # noqa: F401  (registers the classes that load_model needs)
from keras_transformer.text import Vocabularies
from trainers.experiment import ConfigError, Experiment, load_experiment

EXPERIMENT = "experiment.yaml"
SUMMARY = "train_summary.json"
MODEL = "model.keras"
AVERAGED = "model.averaged.keras"
CHECKPOINT_PATTERN = "ckpt-*.weights.h5"


def write_atomically(path: Path, data: bytes | str) -> None:
    """Writes `data` to `path` through a temporary file and a rename."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if isinstance(data, str):
        data = data.encode("utf-8")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def write_json(path: Path, value) -> None:
    write_atomically(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def save_model(model: keras.Model, path: Path) -> None:
    """`model.save` through a temporary file and a rename."""
    path = Path(path)
    temporary = path.with_name(f".{path.stem}.tmp-{os.getpid()}.keras")
    model.save(temporary)
    os.replace(temporary, path)


def weights_fingerprint(model: keras.Model) -> str:
    """sha256 of all weights' bytes, in order: equal fingerprints, equal models."""
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    return digest.hexdigest()


def check_disk_space(directory: Path, experiment: Experiment) -> None:
    """Refuses to start a run whose files cannot fit on the disk: the kept checkpoints, two
    backups (weights and Adam's two moments each), and two saved models, in float32."""
    config = experiment.model
    if config.share_embeddings:
        config = config.replace(vocab_size=experiment.data.vocab_size)
    else:
        size = experiment.data.vocab_size
        config = config.replace(source_vocab_size=size, target_vocab_size=size)
    weights = 4 * config.parameter_count()
    copies = experiment.training.keep_checkpoints + 2 * 3 + 2
    needed = weights * copies + (64 << 20)  # plus logs, vocabularies and summaries
    existing = Path(directory).absolute()
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if free < needed:
        raise ConfigError(
            f"--model-dir {directory}: the run needs about {needed >> 20} MiB "
            f"({copies} copies of {weights >> 20} MiB of weights and optimizer state) but "
            f"only {free >> 20} MiB are free there"
        )


def check_writable(directory: Path) -> None:
    """Creates `directory` if needed and proves it can be written, before any work starts."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"--model-dir {directory}: cannot write there ({error})") from None


def _comparable(experiment: dict) -> dict:
    """The parts of an experiment that must not change within one model directory."""
    model = {k: v for k, v in experiment["model"].items() if not k.endswith("vocab_size")}
    return {"model": model, "data": experiment["data"]}


def check_owner(directory: Path, experiment: Experiment) -> bool:
    """True if `directory` already holds a run of this experiment, False if it is new.

    Raises ConfigError when it holds a run of another experiment (model or data differ);
    training settings may change between runs (more steps, another BLEU interval).
    """
    saved_path = directory / EXPERIMENT
    if not saved_path.exists():
        return False
    saved = yaml.safe_load(saved_path.read_text(encoding="utf-8"))
    ours = experiment.to_dict()
    if _comparable(saved) != _comparable(ours):
        differences = [
            f"{section}.{key}: {saved[section].get(key)!r} there, {value!r} here"
            for section in ("model", "data")
            for key, value in _comparable(ours)[section].items()
            if saved[section].get(key) != value
        ]
        raise ConfigError(
            f"--model-dir {directory} belongs to another experiment ({'; '.join(differences)});"
            " use a new --model-dir, or the configuration it was trained with"
        )
    return True


def save_experiment(directory: Path, experiment: Experiment) -> None:
    write_atomically(directory / EXPERIMENT, yaml.safe_dump(experiment.to_dict(), sort_keys=False))


def wait_for(path: Path, timeout: float = 600.0) -> None:
    """Waits for another worker (the chief) to write `path`."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:.0f} s (chief failed?)")
        time.sleep(0.5)


def load_trained(directory, model_file: str = MODEL):
    """(experiment, vocabularies, model) of a trained model directory."""
    directory = Path(directory)
    for needed in (EXPERIMENT, model_file):
        if not (directory / needed).exists():
            raise ConfigError(f"--model-dir {directory}: no {needed}; train it first")
    experiment = load_experiment(directory / EXPERIMENT, resolved=True)
    vocabularies = load_vocabularies(directory)
    model = keras.saving.load_model(directory / model_file)
    check_vocabulary(model.config, vocabularies, directory)
    return experiment, vocabularies, model


def load_vocabularies(directory: Path) -> Vocabularies:
    """The vocabularies in `directory/vocab`; ConfigError if missing or not the original."""
    try:
        return Vocabularies.load(Path(directory) / "vocab")
    except (OSError, ValueError) as error:
        raise ConfigError(f"--model-dir {directory}: {error}") from None


def check_vocabulary(config, vocabularies: Vocabularies, directory) -> None:
    """The model's embedding sizes must be the vocabulary's."""
    sizes = (vocabularies.source.vocabulary_size(), vocabularies.target.vocabulary_size())
    if sizes != (config.source_vocab, config.target_vocab):
        raise ConfigError(
            f"{directory}: the vocabulary has {sizes[0]}/{sizes[1]} source/target pieces but "
            f"the model expects {config.source_vocab}/{config.target_vocab}"
        )
