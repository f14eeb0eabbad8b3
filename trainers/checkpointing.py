"""Crash-safe training state: the backup a restarted run resumes from, and the checkpoints
kept for averaging. Where they go is `trainers.run_dir`'s `BackupFolder` and
`CheckpointFolder`; every file is written with `keras_transformer.files.atomic_write`.

Backup (DIR/backup/): every variable of the model (weights, and the dropout generators'
states that Keras's `save_weights` leaves out) and of the optimizer (moments, iteration), so a
resumed run continues exactly where the backup was taken. Each backup is written to a new
state file, then committed by replacing `latest.json` (which names the file and its sha256).
A crash at any moment leaves the last committed backup intact; a corrupt or truncated state
file is reported by name and the previous one is used.

Checkpoints (DIR/checkpoints/): Keras weight files, one per epoch; the last `keep` stay.
Temporaries that a killed run left there are removed when training starts.
"""

from __future__ import annotations

import hashlib
import json
import math
import zipfile
from pathlib import Path

import keras
import numpy as np

from keras_transformer.files import atomic_write, remove_temporaries
from trainers.run_dir import BackupFolder, CheckpointFolder


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _variables(model: keras.Model) -> list:
    """Model variables (trainable, non-trainable, seed generator states), then optimizer's."""
    return list(model.variables) + list(model.optimizer.variables)


def save_state(model: keras.Model, backup: BackupFolder, epoch: int, keep: int = 2) -> Path:
    """Writes and commits the backup of `epoch` (completed epochs); keeps the last `keep`."""
    backup.path.mkdir(parents=True, exist_ok=True)
    variables = _variables(model)
    arrays = {f"{i:05d}": v.numpy() for i, v in enumerate(variables)}
    state = atomic_write(backup.state(epoch), lambda path: np.savez(path, **arrays))
    record = {
        "epoch": epoch,
        "file": state.name,
        "sha256": _sha256(state),
        "variables": [v.path for v in variables],
    }
    atomic_write(backup.latest, json.dumps(record))  # the commit
    for old in backup.states()[:-keep]:
        old.unlink()
    return state


def restore_state(model: keras.Model, backup: BackupFolder) -> int:
    """Loads the newest intact backup into `model` (built and compiled); returns the number
    of completed epochs it holds, 0 when there is none."""
    candidates = backup.states()[::-1]
    record = None
    if backup.latest.exists():
        try:
            record = json.loads(backup.latest.read_text())
        except ValueError:
            print(f"warning: {backup.latest} is corrupt; looking for an older backup")
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
            return backup.epoch(path)
        print(f"warning: backup {path} {problem}; using the one before")
    if candidates or record is not None:
        print(f"warning: no intact backup in {backup.path}; starting from scratch")
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
        backup: `BackupFolder`. Where the state files go.
        write: bool. False on the workers that are not the chief.
    """

    def __init__(self, backup: BackupFolder, write: bool = True):
        super().__init__()
        self.backup, self.write = backup, write

    def on_epoch_end(self, epoch, logs=None):
        if self.write and _finite(logs) and not self.model.stop_training:
            save_state(self.model, self.backup, epoch + 1)

    def on_train_end(self, logs=None):
        # The finished run keeps its last state, so that more steps continue it.
        if self.write and not self.model.stop_training and self.backup.latest.exists():
            committed = json.loads(self.backup.latest.read_text())["file"]
            for path in self.backup.states():
                if path.name != committed:
                    path.unlink()


class Checkpoints(keras.callbacks.Callback):
    """Writes a checkpoint after every epoch, atomically, keeping the last `keep`.

    Args:
        checkpoints: `CheckpointFolder`. Where the weight files go.
        keep: int. Checkpoints kept (for averaging).
    """

    def __init__(self, checkpoints: CheckpointFolder, keep: int):
        super().__init__()
        self.checkpoints, self.keep = checkpoints, keep

    def on_train_begin(self, logs=None):
        if self.checkpoints.path.exists():
            remove_temporaries(self.checkpoints.path)  # left by a run killed while writing

    def on_epoch_end(self, epoch, logs=None):
        if not _finite(logs) or self.model.stop_training:
            return
        self.checkpoints.path.mkdir(parents=True, exist_ok=True)
        atomic_write(self.checkpoints.file(epoch + 1), self.model.save_weights)
        for old in self.checkpoints.files()[: -self.keep]:
            old.unlink()
