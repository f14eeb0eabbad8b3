"""Crash-safe training state: the backup a restarted run resumes from, and the checkpoints
kept for averaging.

Backup (DIR/backup/): every variable of the model (weights, and the dropout generators'
states that Keras's `save_weights` leaves out) and of the optimizer (moments, iteration), so a
resumed run continues exactly where the backup was taken. Each backup is written to a new
file under a temporary name and renamed, then committed by replacing `latest.json` (which
names the file and its sha256) in one atomic rename. A crash at any moment leaves the last
committed backup intact; a corrupt or truncated state file is reported by name and the
previous one is used.

Checkpoints (DIR/checkpoints/ckpt-NNNNN.weights.h5): Keras weight files, one per epoch,
written under a temporary name and renamed; the last `keep` stay.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import zipfile
from pathlib import Path

import keras
import numpy as np

LATEST = "latest.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _variables(model: keras.Model) -> list:
    """Model variables (trainable, non-trainable, seed generator states), then optimizer's."""
    return list(model.variables) + list(model.optimizer.variables)


def save_state(model: keras.Model, directory: Path, epoch: int, keep: int = 2) -> Path:
    """Writes and commits the backup of `epoch` (completed epochs); keeps the last `keep`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    variables = _variables(model)
    name = f"state-{epoch:05d}.npz"
    temporary = directory / f".{name}.tmp-{os.getpid()}"
    with open(temporary, "wb") as file:
        np.savez(file, **{f"{i:05d}": v.numpy() for i, v in enumerate(variables)})
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, directory / name)
    record = {
        "epoch": epoch,
        "file": name,
        "sha256": _sha256(directory / name),
        "variables": [v.path for v in variables],
    }
    temporary = directory / f".{LATEST}.tmp-{os.getpid()}"
    temporary.write_text(json.dumps(record))
    os.replace(temporary, directory / LATEST)  # the commit
    for old in sorted(directory.glob("state-*.npz"))[:-keep]:
        old.unlink()
    return directory / name


def restore_state(model: keras.Model, directory: Path) -> int:
    """Loads the newest intact backup into `model` (built and compiled); returns the number
    of completed epochs it holds, 0 when there is none."""
    directory = Path(directory)
    candidates = sorted(directory.glob("state-*.npz"), reverse=True)
    record = None
    if (directory / LATEST).exists():
        try:
            record = json.loads((directory / LATEST).read_text())
        except ValueError:
            print(f"warning: {directory / LATEST} is corrupt; looking for an older backup")
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    variables = _variables(model)
    for path in candidates:
        if record is not None and path.name > record["file"]:
            continue  # written after the last commit: never committed
        problem = _check(path, record, variables)
        if problem is None:
            with np.load(path) as arrays:
                for i, variable in enumerate(variables):
                    variable.assign(arrays[f"{i:05d}"])
            return int(path.name[len("state-") : -len(".npz")])
        print(f"warning: backup {path} {problem}; using the one before")
    if candidates or record is not None:
        print(f"warning: no intact backup in {directory}; starting from scratch")
    return 0


def _check(path: Path, record: dict | None, variables: list) -> str | None:
    """Why the state file at `path` cannot be loaded, or None if it can."""
    if record is not None and record["file"] == path.name and _sha256(path) != record["sha256"]:
        return "does not match its recorded sha256 (truncated or corrupt)"
    try:
        with np.load(path) as arrays:
            if len(arrays.files) != len(variables):
                return f"holds {len(arrays.files)} variables, the model {len(variables)}"
            for i, variable in enumerate(variables):
                if arrays[f"{i:05d}"].shape != tuple(variable.shape):
                    return f"has another shape for {variable.path}"
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        return f"cannot be read ({type(error).__name__}: {error})"
    return None


def _finite(logs) -> bool:
    """False when the epoch's loss is NaN or infinite: such a state must not be kept."""
    loss = (logs or {}).get("loss")
    return loss is None or math.isfinite(float(loss))


class Backup(keras.callbacks.Callback):
    """Saves the backup at the end of every epoch (on the chief only: all workers hold the
    same state and restore from it); when training ends, only the last one stays, so that the
    same command with more steps continues the run.

    Args:
        directory: the backup folder.
        write: bool. False on the workers that are not the chief.
    """

    def __init__(self, directory, write: bool = True):
        super().__init__()
        self.directory, self.write = Path(directory), write

    def on_epoch_end(self, epoch, logs=None):
        if self.write and _finite(logs) and not self.model.stop_training:
            save_state(self.model, self.directory, epoch + 1)

    def on_train_end(self, logs=None):
        # The finished run keeps its last state, so that more steps continue it.
        if self.write and not self.model.stop_training and (self.directory / LATEST).exists():
            committed = json.loads((self.directory / LATEST).read_text())["file"]
            for path in self.directory.glob("state-*.npz"):
                if path.name != committed:
                    path.unlink()


class Checkpoints(keras.callbacks.Callback):
    """Writes `ckpt-NNNNN.weights.h5` after every epoch, atomically, keeping the last `keep`.

    Args:
        directory: the checkpoints folder.
        keep: int. Checkpoints kept (for averaging).
    """

    def __init__(self, directory, keep: int):
        super().__init__()
        self.directory, self.keep = Path(directory), keep

    def on_train_begin(self, logs=None):
        for stale in self.directory.glob(".tmp-*"):  # left by a crash while writing
            stale.unlink()

    def on_epoch_end(self, epoch, logs=None):
        if not _finite(logs) or self.model.stop_training:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"ckpt-{epoch + 1:05d}.weights.h5"
        temporary = self.directory / f".tmp-{os.getpid()}-{name}"
        self.model.save_weights(temporary)
        os.replace(temporary, self.directory / name)
        for old in sorted(self.directory.glob("ckpt-*.weights.h5"))[: -self.keep]:
            old.unlink()
