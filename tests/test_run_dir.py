"""The run directory: its layout, the checks made before a run (owner, writable, disk space,
vocabulary), and what the programs read from it."""

import json
import re

import pytest
import yaml

import keras_transformer as kt
from tests import bible
from trainers import run_dir
from trainers.errors import ConfigError
from trainers.experiment import load_experiment
from trainers.run_dir import RunDirectory

DEMO = "trainers/configs/demo.yaml"


def test_the_layout_is_the_readmes(tmp_path):
    run = RunDirectory(tmp_path)
    assert run.experiment_file == tmp_path / "experiment.yaml"
    assert run.vocab == tmp_path / "vocab"
    assert run.checkpoints.file(7) == tmp_path / "checkpoints" / "ckpt-00000007.weights.h5"
    assert run.backup.state(12) == tmp_path / "backup" / "state-00000012.npz"
    assert run.backup.latest == tmp_path / "backup" / "latest.json"
    assert run.backup.updates(run.backup.state(12)) == 12
    assert run.logs == tmp_path / "logs" and run.bleu_logs == tmp_path / "logs" / "bleu"
    assert run.model() == tmp_path / "model.keras"
    assert run.model(run_dir.AVERAGED) == tmp_path / "model.averaged.keras"
    assert run.summary == tmp_path / "train_summary.json"
    assert run.hypotheses("test") == tmp_path / "eval" / "test.hyp"
    assert list(tmp_path.iterdir()) == []  # naming paths creates nothing


def test_checkpoints_and_states_are_listed_oldest_first(tmp_path):
    run = RunDirectory(tmp_path)
    for updates in (100_000_000, 2, 9):  # past the names' 8 digits too
        run.checkpoints.path.mkdir(exist_ok=True)
        run.checkpoints.file(updates).write_bytes(b"")
        run.backup.path.mkdir(exist_ok=True)
        run.backup.state(updates).write_bytes(b"")
    (run.checkpoints.path / "notes.txt").write_text("not a checkpoint")
    (run.checkpoints.path / "ckpt-best.weights.h5").write_bytes(b"a user's own file")
    assert run.checkpoints.files() == [run.checkpoints.file(n) for n in (2, 9, 100_000_000)]
    assert run.backup.states() == [run.backup.state(n) for n in (2, 9, 100_000_000)]


def test_the_experiment_round_trips_as_readable_yaml(tmp_path):
    run = RunDirectory(tmp_path)
    experiment = load_experiment(DEMO).with_vocab_sizes(2000, 2000)
    run.save_experiment(experiment)
    assert run.load_experiment() == experiment
    saved = yaml.safe_load((tmp_path / "experiment.yaml").read_text())
    assert saved["model"]["preset"] == "tiny" and saved["model"]["vocab_size"] == 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["experiment.yaml"]


def test_a_directory_belongs_to_one_experiment(tmp_path):
    run = RunDirectory(tmp_path)
    experiment = load_experiment(DEMO)
    assert run.check_owner(experiment) is False
    run.save_experiment(experiment.with_vocab_sizes(2000, 2000))
    assert run.check_owner(experiment) is True
    assert run.check_owner(load_experiment(DEMO, ["training.steps=3200"])) is True
    other = load_experiment(DEMO, ["data.vocab_size=3000", "model.d_ff=256"])
    with pytest.raises(ConfigError) as error:
        run.check_owner(other)
    assert str(error.value) == (
        f"--model-dir {tmp_path} belongs to another experiment (model.d_ff: 512 there, 256 "
        "here; data.vocab_size: 4000 there, 3000 here); use a new --model-dir, or the "
        "configuration it was trained with"
    )


def test_an_unwritable_directory_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(
        ConfigError, match=re.escape(f"--model-dir {blocker / 'run'}: cannot write")
    ):
        RunDirectory(blocker / "run").check_writable()
    run = RunDirectory(tmp_path / "new" / "run")
    run.check_writable()
    assert list(run.root.iterdir()) == []  # created, and the probe removed


def test_a_disk_without_room_is_refused(tmp_path, monkeypatch):
    experiment = load_experiment(DEMO)
    # tiny with the demo's 4,000 shared pieces and 128 positions: 5 checkpoints, 2 backups of
    # 3 copies (weights and Adam's two moments), 2 saved models, in float32.
    config = experiment.model.replace(vocab_size=experiment.data.vocab_size)
    weights = 4 * config.parameter_count()
    needed = weights * (5 + 6 + 2) + (64 << 20)
    usage = type("Usage", (), {"free": needed})
    monkeypatch.setattr(run_dir.shutil, "disk_usage", lambda path: usage)
    RunDirectory(tmp_path / "run").check_disk_space(experiment)  # exactly enough
    usage.free = needed - 1
    with pytest.raises(ConfigError) as error:
        RunDirectory(tmp_path / "run").check_disk_space(experiment)
    assert str(error.value) == (
        f"--model-dir {tmp_path / 'run'}: the run needs about {needed >> 20} MiB (13 copies of "
        f"{weights >> 20} MiB of weights and optimizer state) but only "
        f"{(needed - 1) >> 20} MiB are free there"
    )
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_of_another_size_is_refused(tmp_path):
    run = RunDirectory(tmp_path)
    vocabularies = bible.vocabularies(size=500)
    run.save_vocabularies(vocabularies)
    loaded = run.load_vocabularies()
    assert loaded.source.proto == vocabularies.source.proto
    run.check_vocabulary(kt.TransformerConfig.preset("tiny", vocab_size=500), loaded)
    with pytest.raises(ConfigError) as error:
        run.check_vocabulary(kt.TransformerConfig.preset("tiny", vocab_size=600), loaded)
    assert str(error.value) == (
        f"{tmp_path}: the vocabulary has 500/500 source/target pieces but the model expects 600/600"
    )
    (run.vocab / "shared.model").unlink()
    with pytest.raises(ConfigError, match=re.escape(f"--model-dir {tmp_path}: {run.vocab}")):
        run.load_vocabularies()


def test_programs_are_told_what_is_missing(tmp_path):
    run = RunDirectory(tmp_path)
    with pytest.raises(ConfigError) as error:
        run.load_trained()
    assert str(error.value) == f"--model-dir {tmp_path}: no experiment.yaml; train it first"
    run.save_experiment(load_experiment(DEMO).with_vocab_sizes(2000, 2000))
    with pytest.raises(ConfigError) as error:
        run.load_trained(run_dir.AVERAGED)
    assert str(error.value) == f"--model-dir {tmp_path}: no model.averaged.keras; train it first"


def test_a_finished_run_and_the_metrics(tmp_path):
    run = RunDirectory(tmp_path)
    assert run.finished_run(40) is None and run.metrics() == {}
    run.write_summary({"steps": 40})
    assert run.finished_run(40) == {"steps": 40} and run.finished_run(60) is None
    run.eval.mkdir()
    run_dir.write_json(run.eval / "test.json", {"bleu": 9.5})
    assert run.metrics() == {"eval/test.json": {"bleu": 9.5}, "train_summary.json": {"steps": 40}}
    run.write_summary({"steps": 40, "stopped_early": "NaN"})
    assert run.finished_run(40) is None
    assert json.loads(run.summary.read_text()) == {"steps": 40, "stopped_early": "NaN"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval", "train_summary.json"]
