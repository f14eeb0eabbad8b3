"""Crash-safe training state: the backup a restarted run resumes from, and the checkpoints
kept for averaging. Where they go is `trainers.run_dir`'s `BackupFolder` and
`CheckpointFolder`; every file is written with `keras_transformer._files.atomic_write`.

Progress is counted in optimizer updates, never in epochs: a resumed run may change
`training.steps_per_epoch` (how often checkpoints, backups and log lines happen) or
`training.gradient_accumulation_steps` (batches an update) and still train the planned number
of updates, and files are named by the update they were taken after.

Backup (DIR/backup/): every variable of the model (weights, and the dropout generators'
states that Keras's `save_weights` leaves out) and of the optimizer (moments, iteration) but
its gradient accumulators (empty at an update, which is where backups are taken), with the
`Progress` made: updates, and training batches consumed (the input position), so a resumed
run continues exactly where the backup was taken. Each backup is written to a new state
file, then committed by replacing `latest.json` (which names the file and its sha256). A crash
at any moment leaves the last committed backup intact; a corrupt or truncated state file is
reported by name and the previous one is used.

Checkpoints (DIR/checkpoints/): Keras weight files, one per epoch; the last `keep` stay.
Temporaries that a killed run left there are removed when training starts.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zipfile
from pathlib import Path

import keras
import numpy as np

from keras_transformer._files import atomic_write, remove_temporaries, sha256
from trainers.errors import ConfigError
from trainers.run_dir import BackupFolder, CheckpointFolder

# Keras's name for the optimizer's batch counter, and the suffix of its gradient accumulators.
_ITERATION = "iteration"
_ACCUMULATOR = "gradient_accumulator"
_PROGRESS = ("progress.updates", "progress.batches")  # the progress's keys in a state file


@dataclasses.dataclass(frozen=True)
class Progress:
    """How far a run has got.

    Args:
        updates: int. Optimizer updates done (what `training.steps` counts).
        batches: int. Training batches consumed from the input pipeline, whose order the seed
            fixes: what a resumed run skips. updates x gradient_accumulation_steps while that
            setting never changed.
    """

    updates: int = 0
    batches: int = 0


def _variables(model: keras.Model) -> list:
    """Model variables (trainable, non-trainable, seed generator states), then the
    optimizer's but its gradient accumulators, which hold nothing between updates and exist
    only with gradient accumulation."""
    optimizer = [v for v in model.optimizer.variables if not v.name.endswith(_ACCUMULATOR)]
    return list(model.variables) + optimizer


def batch_counter(model: keras.Model):
    """The optimizer's count of the batches it was given: `optimizer.iterations` counts
    updates, which differ with gradient accumulation."""
    (counter,) = [v for v in model.optimizer.variables if v.name == _ITERATION]
    return counter


def save_state(model: keras.Model, backup: BackupFolder, progress: Progress, keep: int = 2) -> Path:
    """Writes and commits the backup taken after `progress.updates` updates; keeps the last
    `keep` state files."""
    backup.path.mkdir(parents=True, exist_ok=True)
    variables = _variables(model)
    arrays = {f"{i:05d}": v.numpy() for i, v in enumerate(variables)}
    arrays[_PROGRESS[0]], arrays[_PROGRESS[1]] = (
        np.int64(progress.updates),
        np.int64(progress.batches),
    )
    state = atomic_write(backup.state(progress.updates), lambda path: np.savez(path, **arrays))
    record = {
        "updates": progress.updates,
        "batches": progress.batches,
        "file": state.name,
        "sha256": sha256(state),
        "variables": [v.path for v in variables],
    }
    atomic_write(backup.latest, json.dumps(record))  # the commit
    for old in backup.states()[:-keep]:
        old.unlink()
    return state


def restore_state(model: keras.Model, backup: BackupFolder) -> Progress:
    """Loads the newest intact backup into `model` (built and compiled) and returns its
    progress, `Progress()` when there is none.

    The model's optimizer may accumulate gradients over another number of batches than the
    backup's: its batch counter becomes the updates done times its own accumulation, so
    Adam's step and the learning-rate schedule go on from the update reached."""
    candidates = backup.states()[::-1]
    record = None
    if backup.latest.exists():
        try:
            record = json.loads(backup.latest.read_text())
        except ValueError:
            print(f"warning: {backup.latest} is corrupt; looking for an older backup")
    if record is not None and "updates" not in record:
        raise ConfigError(
            f"{backup.latest} was written by an older version of keras-transformer, which "
            "counted epochs: finish the run with that version, or start a new --model-dir"
        )
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    variables = _variables(model)
    for path in candidates:
        if record is not None and backup.updates(path) > record["updates"]:
            continue  # written after the last commit: never committed
        problem = _check(path, record, variables)
        if problem is None:
            with np.load(path) as arrays:
                for i, variable in enumerate(variables):
                    variable.assign(arrays[f"{i:05d}"])
                progress = Progress(*(int(arrays[key]) for key in _PROGRESS))
            accumulation = model.optimizer.gradient_accumulation_steps or 1
            batch_counter(model).assign(progress.updates * accumulation)
            for accumulator in model.optimizer.variables:
                if accumulator.name.endswith(_ACCUMULATOR):
                    accumulator.assign(keras.ops.zeros_like(accumulator))
            return progress
        print(f"warning: backup {path} {problem}; using the one before")
    if candidates or record is not None:
        print(f"warning: no intact backup in {backup.path}; starting from scratch")
    return Progress()


def _check(path: Path, record: dict | None, variables: list) -> str | None:
    """Why the state file at `path` cannot be loaded, or None if it can."""
    if record is not None and record["file"] == path.name and sha256(path) != record["sha256"]:
        return "does not match its recorded sha256 (truncated or corrupt)"
    try:
        with np.load(path) as arrays:
            if any(key not in arrays.files for key in _PROGRESS):
                return "holds no progress (written by an older version)"
            count = len(arrays.files) - len(_PROGRESS)
            if count != len(variables):
                return f"holds {count} variables, the model {len(variables)}"
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
        start: `Progress` or None. Where this run started, restored from a backup: the
            batches consumed are counted on from it. Defaults to None (nothing done).
        write: bool. False on the workers that are not the chief.
    """

    def __init__(self, backup: BackupFolder, start: Progress | None = None, write: bool = True):
        super().__init__()
        self.backup, self.start, self.write = backup, start or Progress(), write
        self._first_batch = 0

    def on_train_begin(self, logs=None):
        self._first_batch = int(batch_counter(self.model).numpy())
        if self.write and self.backup.path.exists():
            remove_temporaries(self.backup.path)  # left by a run killed while writing

    def progress(self) -> Progress:
        """The progress made so far: the optimizer's updates, and the batches consumed."""
        batches = int(batch_counter(self.model).numpy()) - self._first_batch
        updates = int(self.model.optimizer.iterations.numpy())
        return Progress(updates, self.start.batches + batches)

    def on_epoch_end(self, epoch, logs=None):
        if self.write and _finite(logs) and not self.model.stop_training:
            save_state(self.model, self.backup, self.progress())

    def on_train_end(self, logs=None):
        # The finished run keeps its last state, so that more steps continue it.
        if self.write and not self.model.stop_training and self.backup.latest.exists():
            committed = json.loads(self.backup.latest.read_text())["file"]
            for path in self.backup.states():
                if path.name != committed:
                    path.unlink()


class Checkpoints(keras.callbacks.Callback):
    """Writes a checkpoint after every epoch, atomically, named by the updates done; keeps the
    last `keep`.

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
        updates = int(self.model.optimizer.iterations.numpy())
        atomic_write(self.checkpoints.file(updates), self.model.save_weights)
        for old in self.checkpoints.files()[: -self.keep]:
            old.unlink()
