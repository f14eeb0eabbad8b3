"""The run directory: its layout, the checks made before a run (owner, writable, disk space,
vocabulary), and what the programs read from it."""

import json
import re

import keras
import numpy as np
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
    assert run.hypotheses("test") == tmp_path / "eval" / "model" / "test.hyp"
    averaged = run.hypotheses("test", run_dir.AVERAGED)
    assert averaged == tmp_path / "eval" / "model.averaged" / "test.hyp"
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


def test_an_imported_model_takes_any_data_until_a_fine_tuning_commits_a_backup(tmp_path):
    """A new import, or one whose fine-tuning was removed to start over
    (docs/guides/pretrained.md), starts from model.pretrained.keras on any data; once a backup is
    committed, the directory belongs to that fine-tuning's data."""
    run = RunDirectory(tmp_path)
    tuned = load_experiment(DEMO, ["data.train=first.tsv"]).with_vocab_sizes(2000, 2000)
    run.save_experiment(tuned)
    other = load_experiment(DEMO, ["data.train=second.tsv"])
    with pytest.raises(ConfigError, match="data.train: 'first.tsv' there, 'second.tsv' here"):
        run.check_owner(other)  # not an import
    run.pretrained.write_text("{}")
    assert run.untrained_import() and run.check_owner(other) is True
    assert run.pretrained_weights() == tmp_path / "model.keras"  # imported before it was kept
    (tmp_path / "model.pretrained.keras").write_bytes(b"")
    assert run.pretrained_weights() == tmp_path / run_dir.PRETRAINED_MODEL
    run.backup.path.mkdir()
    run.backup.latest.write_text("{}")
    assert not run.untrained_import()
    with pytest.raises(ConfigError, match="belongs to another experiment"):
        run.check_owner(other)


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
    # 3 copies (weights and Adam's two moments), 4 saved models (model.keras and the preset's
    # weights, and their new copies while they are replaced), in float32.
    config = experiment.model.replace(vocab_size=experiment.data.vocab_size)
    weights = 4 * config.parameter_count()
    needed = weights * (5 + 6 + 4) + (64 << 20)
    usage = type("Usage", (), {"free": needed})
    monkeypatch.setattr(run_dir.shutil, "disk_usage", lambda path: usage)
    RunDirectory(tmp_path / "run").check_disk_space(experiment)  # exactly enough
    usage.free = needed - 1
    with pytest.raises(ConfigError) as error:
        RunDirectory(tmp_path / "run").check_disk_space(experiment)
    assert str(error.value) == (
        f"--model-dir {tmp_path / 'run'}: the run needs about {needed >> 20} MiB (15 copies of "
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
    for load in (run.load_task, run.load_trained):
        with pytest.raises(ConfigError) as error:
            load()
        assert str(error.value) == f"--model-dir {tmp_path}: no experiment.yaml; train it first"
    run.save_experiment(load_experiment(DEMO).with_vocab_sizes(2000, 2000))
    for load in (run.load_task, run.load_trained):
        with pytest.raises(ConfigError) as error:
            load(run_dir.AVERAGED)
        assert str(error.value) == (
            f"--model-dir {tmp_path}: no model.averaged.keras (--model names a file in it)"
        )


def test_a_preset_given_as_a_model_directory_is_named_so(tmp_path):
    (tmp_path / "task.json").write_text("{}")
    with pytest.raises(ConfigError, match="a keras-hub preset \\(task.json\\), not a model"):
        RunDirectory(tmp_path).check_trained()


PRESET_FILES = [
    "assets",
    "config.json",
    "metadata.json",
    "model.weights.h5",
    "preprocessor.json",
    "task.json",
    "tokenizer.json",
]


def trained_directory(path, seed: int = 3, **decoding):
    """A run directory as trainers.train leaves it before its model is saved (experiment.yaml
    with `decoding`, vocab/), and an untrained model of it made with `seed`."""
    vocabularies = bible.vocabularies(size=500)
    size = vocabularies.target.vocabulary_size()
    overrides = ["model.num_encoder_layers=1", "model.num_decoder_layers=1"]
    overrides += [f"decoding.{key}={value}" for key, value in decoding.items()]
    experiment = load_experiment(DEMO, overrides).with_vocab_sizes(size, size)
    run = RunDirectory(path)
    run.save_experiment(experiment)
    run.save_vocabularies(vocabularies)
    keras.utils.set_random_seed(seed)
    return run, kt.build_transformer(experiment.model)


def weights(model) -> list:
    return [np.asarray(w) for w in model.get_weights()]


def test_the_trained_model_is_written_as_model_keras_and_a_keras_hub_preset(tmp_path):
    import keras_hub

    run, model = trained_directory(tmp_path, length_penalty=0.8, stopping="exact")
    run.save_trained(model, run.load_vocabularies())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        PRESET_FILES + ["experiment.yaml", "model.keras", "vocab"]
    )  # no temporary left
    expected = weights(model)
    decoding = kt.decoding.DecodingSettings(length_penalty=0.8, stopping="exact")
    for task in (
        kt.models.TransformerSeq2SeqLM.from_preset(tmp_path),
        keras_hub.models.Seq2SeqLM.from_preset(str(tmp_path)),
    ):
        assert isinstance(task, kt.models.TransformerSeq2SeqLM)
        assert task.decoding == decoding  # experiment.yaml's
        for ours, theirs in zip(weights(task.backbone), expected, strict=True):
            np.testing.assert_array_equal(ours, theirs)
    # The programs' loader: the preset, with flags over experiment.yaml's settings.
    experiment, task = run.load_task(beam_size=2, length_penalty=None)
    assert task.decoding == decoding.replace(beam_size=2) and experiment == run.load_experiment()


def test_a_directory_without_the_preset_loads_as_before(tmp_path):
    """A directory trained before the preset (model.keras, vocab/, experiment.yaml), and
    another model file of a directory with one: the same loader."""
    run, model = trained_directory(tmp_path, beam_size=3)
    run.save_model(model)
    _, task = run.load_task()
    assert task.decoding.beam_size == 3
    for ours, theirs in zip(weights(task.backbone), weights(model), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    run.save_trained(kt.build_transformer(model.config), run.load_vocabularies())
    run.save_model(model, run_dir.AVERAGED)
    _, averaged = run.load_task(run_dir.AVERAGED, stopping="exact")
    assert (averaged.decoding.beam_size, averaged.decoding.stopping) == (3, "exact")
    for ours, theirs in zip(weights(averaged.backbone), weights(model), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_an_interrupted_save_never_leaves_a_preset_that_is_not_model_keras(tmp_path, monkeypatch):
    """The save fails at each of its renames in turn (a crash there): wherever it stops, what
    the directory loads is model.keras's weights (the preset's, when its config.json is
    there; model.keras's own otherwise). The next save completes it."""
    run, old = trained_directory(tmp_path, seed=3)
    vocabularies = run.load_vocabularies()
    run.save_trained(old, vocabularies)
    keras.utils.set_random_seed(4)
    new = kt.build_transformer(old.config)
    real = {"replace": run_dir.os.replace, "rename": run_dir.os.rename}
    moves = {"done": 0, "fail_at": 0}

    def counted(name):
        def move(*args):
            moves["done"] += 1
            if moves["done"] == moves["fail_at"]:
                raise OSError("interrupted")
            return real[name](*args)

        return move

    interrupted = True
    while interrupted:
        moves["done"], moves["fail_at"] = 0, moves["fail_at"] + 1
        monkeypatch.setattr(run_dir.os, "replace", counted("replace"))
        monkeypatch.setattr(run_dir.os, "rename", counted("rename"))
        try:
            run.save_trained(new, vocabularies)
            interrupted = False
        except OSError:
            pass
        monkeypatch.setattr(run_dir.os, "replace", real["replace"])
        monkeypatch.setattr(run_dir.os, "rename", real["rename"])
        keras_file = weights(keras.saving.load_model(run.model()))
        _, task = run.load_task()
        loaded = weights(task.backbone)
        assert all(np.array_equal(a, b) for a, b in zip(loaded, keras_file, strict=True))
    assert moves["fail_at"] > len(PRESET_FILES) + 1  # model.keras and each preset file moved
    assert all(np.array_equal(a, b) for a, b in zip(keras_file, weights(new), strict=True))
    assert (tmp_path / "config.json").exists() and not list(tmp_path.glob(".tmp-*"))


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


def test_the_metrics_of_one_model_file(tmp_path):
    """An export's manifest holds its own model's scores: `metrics(model)` leaves out the
    evaluations of another model file (the averaged one's BLEU is not `model.keras`'s)."""
    run = RunDirectory(tmp_path)
    run.write_summary({"steps": 40})
    run.eval.mkdir()
    run_dir.write_json(run.eval / "test.json", {"bleu": 12.1, "model": "model.averaged.keras"})
    run_dir.write_json(run.eval / "dev.json", {"bleu": 9.0, "model": "model.keras"})
    assert run.metrics("model.keras") == {
        "eval/dev.json": {"bleu": 9.0, "model": "model.keras"},
        "train_summary.json": {"steps": 40},
    }
    assert list(run.metrics("model.averaged.keras")) == ["eval/test.json", "train_summary.json"]
    assert len(run.metrics()) == 3


def test_each_model_file_keeps_its_own_scores(tmp_path):
    """trainers.evaluate writes each model file's results in its own folder of eval/: the
    README's `--split test` (model.keras) no longer takes the place of `make demo`'s
    (model.averaged.keras), and each export's manifest holds its own model's. Scores written
    in eval/ itself by an earlier version count for the model they record, until that
    model's folder holds the split's."""
    run = RunDirectory(tmp_path)
    run.write_summary({"steps": 40})
    for model, bleu in (("model.averaged.keras", 12.1), ("model.keras", 11.0)):
        scores = run.hypotheses("test", model).with_suffix(".json")
        scores.parent.mkdir(parents=True)
        run_dir.write_json(scores, {"bleu": bleu, "model": model})
    run_dir.write_json(run.eval / "dev.json", {"bleu": 9.0, "model": "model.averaged.keras"})
    run_dir.write_json(run.eval / "test.json", {"bleu": 10.0, "model": "model.averaged.keras"})
    assert run.metrics("model.averaged.keras") == {
        "eval/model.averaged/test.json": {"bleu": 12.1, "model": "model.averaged.keras"},
        "eval/dev.json": {"bleu": 9.0, "model": "model.averaged.keras"},
        "train_summary.json": {"steps": 40},
    }
    assert list(run.metrics("model.keras")) == ["eval/model/test.json", "train_summary.json"]
    assert list(run.metrics()) == [
        "eval/model/test.json",
        "eval/model.averaged/test.json",
        "eval/dev.json",
        "train_summary.json",
    ]
