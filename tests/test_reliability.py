"""Faults: a killed trainer resumes to the same weights, a killed worker's cluster resumes,
corrupt or half-written state is detected and skipped, a NaN loss stops training and keeps
the last good state, configuration errors come before any work."""

import json
import shutil
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer._files import temporary_path
from tests import bible
from tests.test_trainer import slice_config, summary_line, train_cli
from trainers import checkpointing, run_dir
from trainers.checkpointing import Progress
from trainers.errors import ConfigError
from trainers.experiment import load_experiment
from trainers.run_dir import BackupFolder, CheckpointFolder


def tiny_compiled_model():
    model = kt.build_transformer(
        kt.TransformerConfig.preset(
            "tiny", vocab_size=30, num_encoder_layers=1, num_decoder_layers=1
        )
    )
    model.compile(optimizer="adam", loss=kt.losses.LabelSmoothedCrossEntropy(), jit_compile=False)
    random_updates(model)  # backups, not training, are under test
    return model


def random_updates(model, updates: int = 1, seed: int = 0) -> None:
    """`updates` optimizer updates of random gradients, applied eagerly: the optimizer's step
    and moments become real state without tracing a training step (seconds a test)."""
    rng = np.random.default_rng(seed)
    for _ in range(updates):
        gradients = [rng.normal(size=v.shape).astype("float32") for v in model.trainable_variables]
        model.optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))


def snapshot(model):
    return [v.numpy().copy() for v in model.variables + model.optimizer.variables]


def assert_holds(model, snapshot_before):
    """Every variable of `model` and its optimizer equals the snapshot."""
    for before, after in zip(snapshot_before, snapshot(model), strict=True):
        np.testing.assert_array_equal(before, after)


def perturb(model):
    for variable in model.variables + model.optimizer.variables:
        variable.assign(variable + keras.ops.cast(1, variable.dtype))


# -- Input position ---------------------------------------------------------------------------


def test_the_input_resumes_at_its_position():
    corpus, vocabularies = bible.pairs("train", 600), bible.vocabularies()

    def batches():
        return kt.data.make_dataset(
            corpus.to_dataset(), vocabularies, max_length=48, tokens_per_batch=512, seed=5
        )

    uninterrupted = [labels for _, labels in batches().take(30).as_numpy_iterator()]
    resumed = [labels for _, labels in batches().skip(20).take(10).as_numpy_iterator()]
    for a, b in zip(uninterrupted[20:], resumed, strict=True):
        np.testing.assert_array_equal(a, b)


# -- Backups and checkpoints ------------------------------------------------------------------


def test_a_backup_restores_every_variable_including_dropout_generators(tmp_path):
    model = tiny_compiled_model()
    seeds = [v for v in model.variables if "seed_generator" in v.path]
    assert seeds  # the dropout layers' generator states, which save_weights leaves out
    saved = snapshot(model)
    backup = BackupFolder(tmp_path)
    progress = Progress(updates=1, batches=1)  # the model's one update
    assert checkpointing.save_state(model, backup, progress) == backup.state(1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.json", "state-00000001.npz"]
    perturb(model)
    assert checkpointing.restore_state(model, backup) == progress
    assert_holds(model, saved)


def test_a_corrupt_backup_is_named_and_the_one_before_is_used(tmp_path, capsys):
    model, backup = tiny_compiled_model(), BackupFolder(tmp_path)
    checkpointing.save_state(model, backup, Progress(1, 1))
    first = snapshot(model)
    perturb(model)
    checkpointing.save_state(model, backup, Progress(2, 2))
    state = backup.state(2)
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # truncated
    perturb(model)
    assert checkpointing.restore_state(model, backup) == Progress(1, 1)
    assert f"backup {state} does not match its recorded sha256" in capsys.readouterr().out
    assert_holds(model, first)


def test_an_uncommitted_or_unreadable_record_is_survived(tmp_path, capsys):
    model, backup = tiny_compiled_model(), BackupFolder(tmp_path)
    checkpointing.save_state(model, backup, Progress(1, 1))
    committed = snapshot(model)
    # A crash after writing the next state file, before committing it: never used.
    perturb(model)
    np.savez(backup.state(2), *[v.numpy() for v in model.variables])
    assert checkpointing.restore_state(model, backup) == Progress(1, 1)
    assert_holds(model, committed)
    # A torn commit record: the newest readable state is used, with a warning.
    backup.latest.write_text('{"updates": 1, "fi')
    backup.state(2).unlink()
    perturb(model)
    assert checkpointing.restore_state(model, backup) == Progress(1, 1)
    assert_holds(model, committed)
    assert f"warning: {backup.latest} is corrupt" in capsys.readouterr().out
    assert checkpointing.restore_state(model, BackupFolder(tmp_path / "nothing")) == Progress()
    assert capsys.readouterr().out == ""  # no backup at all is no warning


def test_checkpoints_are_written_atomically(tmp_path, monkeypatch):
    model, checkpoints = tiny_compiled_model(), CheckpointFolder(tmp_path)
    callback = checkpointing.Checkpoints(checkpoints, keep=2)
    callback.set_model(model)
    counter = checkpointing.batch_counter(model)
    for epoch in range(3):
        counter.assign(10 * (epoch + 1))  # named by the updates done
        callback.on_epoch_end(epoch, {"loss": 1.0})
    kept = [checkpoints.file(20), checkpoints.file(30)]
    assert sorted(tmp_path.iterdir()) == kept

    def crash(path, *args, **kwargs):
        assert Path(path) == temporary_path(checkpoints.file(40))  # never a checkpoint's name
        Path(path).write_bytes(b"half an h5 file")
        raise OSError("No space left on device")

    monkeypatch.setattr(model, "save_weights", crash)
    counter.assign(40)
    with pytest.raises(OSError, match="No space left"):
        callback.on_epoch_end(3, {"loss": 1.0})
    assert sorted(tmp_path.iterdir()) == kept  # the torn file is gone with the failed write
    # A run killed while writing leaves its temporary; the next run's start removes it.
    temporary_path(checkpoints.file(40)).write_bytes(b"half an h5 file")
    callback.on_train_begin()
    assert sorted(tmp_path.iterdir()) == kept
    callback.on_epoch_end(4, {"loss": float("nan")})  # a NaN epoch is never kept
    assert sorted(tmp_path.iterdir()) == kept


def test_a_backup_left_half_written_is_removed_when_training_starts(tmp_path):
    model, backup = tiny_compiled_model(), BackupFolder(tmp_path)
    checkpointing.save_state(model, backup, Progress(1, 1))
    kept = sorted(tmp_path.iterdir())
    torn = [temporary_path(backup.state(2)), temporary_path(backup.latest)]
    for path in torn:
        path.write_bytes(b"half a file")  # a run killed while writing its next backup
    callback = checkpointing.Backup(backup, start=Progress(1, 1))
    callback.set_model(model)
    callback.on_train_begin()
    assert sorted(tmp_path.iterdir()) == kept
    checkpointing.batch_counter(model).assign(3)
    callback.on_epoch_end(0, {"loss": 1.0})
    record = json.loads(backup.latest.read_text())
    assert (record["updates"], record["batches"], record["file"]) == (3, 3, backup.state(3).name)


# -- Killed processes -------------------------------------------------------------------------


def wait_for_backup(path: Path, process, timeout=300):
    """Waits until the run in `path` has committed its first backup."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"training ended before its backup: {process.stderr.read()}")
        try:
            json.loads((path / "backup" / "latest.json").read_text())
            return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError("no backup appeared")


def files(directory: Path) -> dict:
    return {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.exact
def test_a_killed_run_resumes_to_the_weights_of_an_uninterrupted_one(
    killed, uninterrupted, tmp_path
):
    config, model_dir = killed[0], tmp_path / "killed"
    shutil.copytree(killed[1], model_dir)
    result = train_cli(config, model_dir)
    assert "resuming after update " in result.stdout
    resumed = summary_line(result.stdout)
    assert resumed["steps"] == 40
    # Bit-identical: one program, the same inputs, on one machine.
    assert resumed["weights_sha256"] == uninterrupted["weights_sha256"]
    # A finished run keeps its last state, from which the same command with more steps
    # continues it (tests/test_resume.py runs that).
    backup = BackupFolder(model_dir / "backup")
    assert backup.states() == [backup.state(40)]


# -- NaN --------------------------------------------------------------------------------------


def test_a_nan_loss_stops_training_and_keeps_the_last_good_state(tmp_path, monkeypatch, capsys):
    from trainers import train

    calls = tf.Variable(0)
    original = kt.losses.LabelSmoothedCrossEntropy.call

    def poisoned(self, y_true, y_pred):  # the 25th batch's loss is NaN
        calls.assign_add(1)
        losses = original(self, y_true, y_pred)
        return tf.where(calls >= 25, tf.constant(float("nan")), losses)

    monkeypatch.setattr(kt.losses.LabelSmoothedCrossEntropy, "call", poisoned)
    config = slice_config(tmp_path, steps=60, steps_per_epoch=20)
    code = train.main(
        [
            "--config",
            str(config),
            "--model-dir",
            str(tmp_path / "model"),
            "--set",
            "data.dev=null",
            "--set",
            "training.jit_compile=false",
            "--verbose",
            "0",
        ]
    )
    assert code == 1
    assert "the loss became NaN or infinite; the last good checkpoint is in" in (
        capsys.readouterr().err
    )
    model_dir = tmp_path / "model"
    checkpoint = CheckpointFolder(model_dir / "checkpoints").file(20)
    assert list((model_dir / "checkpoints").iterdir()) == [checkpoint]
    assert json.loads((model_dir / "backup" / "latest.json").read_text())["updates"] == 20
    assert not (model_dir / "model.keras").exists() and not (model_dir / "config.json").exists()
    assert json.loads((model_dir / "train_summary.json").read_text())["stopped_early"]


# -- Configuration errors before any work -----------------------------------------------------


def test_a_full_disk_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from trainers import train

    experiment = load_experiment(slice_config(tmp_path))
    monkeypatch.setattr(
        run_dir.shutil, "disk_usage", lambda path: type("U", (), {"free": 10 << 20})
    )
    with pytest.raises(ConfigError, match="but only 10 MiB are free there"):
        train.train(experiment, tmp_path / "model")
    assert not (tmp_path / "model").exists()


@pytest.mark.slow
def test_a_vocabulary_that_does_not_match_the_checkpoint_is_refused(killed, tmp_path, capsys):
    from trainers import train

    config, model_dir = killed[0], tmp_path / "model"
    shutil.copytree(killed[1], model_dir)
    vocab = model_dir / "vocab" / "shared.model"
    before, size = files(model_dir), load_experiment(config).data.vocab_size
    # Refusals need no process of their own (op determinism and the speed switch are
    # process-wide: left off).
    arguments = ["--config", str(config), "--model-dir", str(model_dir)]
    arguments += ["--set", "training.fast=false", "--set", "training.deterministic=false"]
    # Another vocabulary of the same size: caught by the sha256 that the run recorded.
    vocab.write_bytes(kt.text.train_sentencepiece(bible.pairs("train", 300).targets, size))
    assert train.main(arguments) == 2
    assert f"{vocab} is not the vocabulary this directory was made with" in (
        capsys.readouterr().err
    )
    # Another size, with the record gone too: caught against the run's embedding sizes.
    vocab.write_bytes(kt.text.train_sentencepiece(bible.pairs("train", 300).targets, 350))
    (model_dir / "vocab" / "manifest.json").unlink()
    assert train.main(arguments) == 2
    error = capsys.readouterr().err
    assert "the vocabulary has 350/350 source/target pieces" in error
    assert f"but the model expects {size}/{size}" in error
    # Nothing was lost: but for the two vocabulary files this test changed, the directory is
    # the killed run's, which resumes (test_a_killed_run_resumes_to_the_weights_...).
    after, vocabulary = files(model_dir), Path("vocab/shared.model")
    assert set(after) == set(before) - {Path("vocab/manifest.json")}
    assert all(after[name] == before[name] for name in after if name != vocabulary)
