"""Resumes with changed training settings: progress is counted in optimizer updates, so
another epoch size or gradient accumulation continues the run to its planned updates (an
epoch size that cannot is refused before any work), never silently from scratch."""

import json
import shutil

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.test_reliability import random_updates, snapshot
from tests.test_trainer import slice_config, summary_line, train_cli
from trainers import checkpointing
from trainers.checkpointing import Progress
from trainers.run_dir import BackupFolder, CheckpointFolder


@pytest.mark.slow
@pytest.mark.exact
def test_resumes_with_another_epoch_size_or_accumulation_train_the_planned_updates(
    tmp_path, capsys, uninterrupted, killed
):
    from trainers import train

    config, model_dir = killed[0], tmp_path / "changed"
    shutil.copytree(killed[1], model_dir)
    # Killed after 20 updates in epochs of 20, resumed in epochs of 10 up to 40: the
    # uninterrupted run of 40, bit for bit (the epoch size only says when checkpoints,
    # backups and log lines happen).
    result = train_cli(config, model_dir, "--set", "training.steps_per_epoch=10")
    resumed = summary_line(result.stdout)
    assert resumed["steps"] == 40
    assert resumed["weights_sha256"] == uninterrupted["weights_sha256"]
    assert "resuming after update 20 " in result.stdout
    # An epoch size that does not divide the updates done is refused before any training,
    # and so are fewer steps than were done; nothing is lost. (In this process: a refusal
    # needs no process of its own.)
    for overrides, message in (
        (
            ["training.steps=90", "training.steps_per_epoch=30"],
            "training.steps_per_epoch=30 does not divide the 40 updates that the backup in",
        ),
        (["training.steps=20"], "has done 40 updates, more than training.steps=20"),
    ):
        # Not this process's op determinism nor speed switch, which are process-wide.
        overrides += ["training.deterministic=false", "training.fast=false"]
        sets = [item for override in overrides for item in ("--set", override)]
        code = train.main(["--config", str(config), "--model-dir", str(model_dir), *sets])
        assert code == 2
        assert message in capsys.readouterr().err
    assert json.loads((model_dir / "train_summary.json").read_text()) == resumed
    # Then updates of two batches up to 60: the run resumes from its backup (never silently
    # from scratch), the input goes on after the 40 batches consumed, and the checkpoints
    # are named by update, so none of the new ones is taken for an old one.
    more = ("--set", "training.steps=60", "--set", "training.gradient_accumulation_steps=2")
    result = train_cli(config, model_dir, *more)
    assert "starting from scratch" not in result.stdout
    assert "resuming after update 40 (40 batches consumed)" in result.stdout
    assert summary_line(result.stdout)["steps"] == 60
    record = json.loads((model_dir / "backup" / "latest.json").read_text())
    assert (record["updates"], record["batches"]) == (60, 40 + 2 * 20)
    names = sorted(p.name for p in (model_dir / "checkpoints").iterdir())
    assert names == [CheckpointFolder(model_dir).file(n).name for n in (40, 60)]


def test_accumulation_over_several_replicas_is_refused_before_any_work(tmp_path, capsys):
    """Keras cannot accumulate gradients under tf.distribute with several replicas (its
    update runs in a cond that cannot all-reduce): a clear refusal, not a crash at step 1."""
    from trainers import train

    config = slice_config(tmp_path, dev=False, steps=4, steps_per_epoch=2)
    model_dir = tmp_path / "run"
    code = train.main(
        ["--config", str(config), "--model-dir", str(model_dir), "--strategy", "mirrored"]
        + ["--set", "training.gradient_accumulation_steps=2"]
    )
    assert code == 2
    assert "training.gradient_accumulation_steps=2 needs one replica, and this run has 2" in (
        capsys.readouterr().err
    )
    assert not model_dir.exists() or not any(model_dir.iterdir())


def test_a_backup_resumes_under_another_accumulation(tmp_path):
    """The weights and Adam's moments come back; the optimizer's batch counter becomes the
    updates done times the new accumulation, so Adam's step and the schedule's update number
    go on; the gradient accumulators start empty."""
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=30, num_encoder_layers=1, num_decoder_layers=1
    )

    def compiled(accumulation):
        model = kt.build_transformer(config)
        schedule = kt.WarmupSchedule(128, warmup_steps=10, accumulation_steps=accumulation)
        optimizer = keras.optimizers.Adam(
            schedule, gradient_accumulation_steps=accumulation if accumulation > 1 else None
        )
        model.compile(
            optimizer=optimizer, loss=kt.losses.LabelSmoothedCrossEntropy(), jit_compile=False
        )
        return model, schedule

    (model, _), backup = compiled(1), BackupFolder(tmp_path)
    random_updates(model, updates=3, seed=1)
    checkpointing.save_state(model, backup, Progress(updates=3, batches=3))
    saved = snapshot(model)

    other, schedule = compiled(4)
    other.optimizer.build(other.trainable_variables)
    for variable in other.optimizer.variables:  # as if a batch were half accumulated
        variable.assign(variable + keras.ops.cast(1, variable.dtype))
    assert checkpointing.restore_state(other, backup) == Progress(updates=3, batches=3)
    assert int(other.optimizer.iterations.numpy()) == 3
    assert int(checkpointing.batch_counter(other).numpy()) == 12
    accumulators = [v for v in other.optimizer.variables if "accumulator" in v.path]
    assert len(accumulators) == len(other.trainable_variables)
    assert not any(np.any(v.numpy()) for v in accumulators)
    skipped = {id(v) for v in accumulators}
    restored = [v for v in other.variables + other.optimizer.variables if id(v) not in skipped]
    counter = checkpointing.batch_counter(other)
    for before, variable in zip(saved, restored, strict=True):
        if variable is not counter:
            np.testing.assert_array_equal(before, variable.numpy(), err_msg=variable.path)
    assert float(other.optimizer.learning_rate) == pytest.approx(float(schedule(12)))
