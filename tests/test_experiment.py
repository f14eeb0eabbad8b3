"""Experiment YAML files, --set overrides, the model directory's owner check, and the runtime
decisions (XLA per strategy, which worker is the chief)."""

import json

import pytest
import tensorflow as tf
import yaml

from trainers import model_dir as md
from trainers import runtime
from trainers.experiment import ConfigError, load_experiment

DEMO = "trainers/configs/demo.yaml"


def write(tmp_path, text, name="exp.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_bundled_config_loads():
    for name in ("demo", "small", "base_wmt14", "big_wmt14"):
        experiment = load_experiment(f"trainers/configs/{name}.yaml")
        assert experiment.training.steps % experiment.training.steps_per_epoch == 0
    big = load_experiment("trainers/configs/big_wmt14.yaml")
    assert (big.model.d_model, big.model.dropout, big.data.tfds_name) == (
        1024,
        0.3,
        "wmt14_translate/de-en",
    )


def test_demo_config_and_overrides():
    experiment = load_experiment(
        DEMO,
        [
            "training.steps=400",
            "model.dropout=0.2",
            "data.train_limit=100",
            "training.jit_compile=false",
        ],
    )
    assert experiment.preset == "tiny" and experiment.model.d_model == 128
    assert experiment.training.steps == 400 and experiment.model.dropout == 0.2
    assert experiment.data.train_limit == 100 and experiment.training.jit_compile is False


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "model: {preset: tiny}\ndata: {train: x, vocab_sise: 10}\n",
            "unknown key data.vocab_sise",
        ),
        ("model: {preset: tiny}\ndata: {train: x}\noptimizer: {}\n", "unknown section 'optimizer'"),
        ("model: {preset: huge}\ndata: {train: x}\n", "model.preset='huge'"),
        (
            "model: {preset: tiny, vocab_size: 10}\ndata: {train: x}\n",
            "model.vocab_size comes from the learned vocabulary; set data.vocab_size",
        ),
        (
            "model: {preset: tiny, d_model: 130}\ndata: {train: x}\n",
            "model: d_model=130 is not divisible by num_heads=4",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x}\ntraining: {steps: ten}\n",
            "training.steps='ten' must be of type int",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x}\n"
            "training: {steps: 450, steps_per_epoch: 200}\n",
            "training.steps=450 is not a multiple of training.steps_per_epoch=200",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x, shared_vocab: false}\n",
            "model.share_embeddings=true needs data.shared_vocab=true",
        ),
        ("model: {preset: tiny}\ndata: {train: x, format: csv}\n", "data.format='csv'"),
        ("model: {preset: tiny}\ndata: {}\n", "data.train is required"),
        (
            "model: {preset: tiny}\ndata: {train: x, tokens_per_batch: 100}\n",
            "data.tokens_per_batch=100 is smaller than model.max_length=256",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x}\ntraining: {jit_compile: sometimes}\n",
            "training.jit_compile='sometimes'",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x, vocab_size: 100}\n",
            "data.vocab_size=100 must be >= 300",
        ),
        ("model: [1, 2]\n", "'model' must be a mapping"),
        ("model: {preset: tiny\n", "not valid YAML"),
    ],
)
def test_errors_name_the_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as error:
        load_experiment(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    "override, message",
    [
        ("training.steps", "expected SECTION.KEY=VALUE"),
        ("optim.lr=3", "expected SECTION.KEY"),
        ("training.stepz=3", "unknown key training.stepz"),
        ("training.steps=[1", "value is not valid YAML"),
    ],
)
def test_bad_overrides(override, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(DEMO, [override])


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_experiment(tmp_path / "nope.yaml")


def test_resolved_experiment_round_trips(tmp_path):
    experiment = load_experiment(DEMO).with_vocab_sizes(2000, 2000)
    md.save_experiment(tmp_path, experiment)
    assert load_experiment(tmp_path / md.EXPERIMENT, resolved=True) == experiment


def test_model_directory_belongs_to_one_experiment(tmp_path):
    experiment = load_experiment(DEMO)
    assert md.check_owner(tmp_path, experiment) is False
    md.save_experiment(tmp_path, experiment.with_vocab_sizes(2000, 2000))
    assert md.check_owner(tmp_path, experiment) is True
    assert md.check_owner(tmp_path, load_experiment(DEMO, ["training.steps=3200"])) is True
    other = load_experiment(DEMO, ["data.vocab_size=4000", "model.d_ff=256"])
    with pytest.raises(ConfigError, match="belongs to another experiment") as error:
        md.check_owner(tmp_path, other)
    assert "model.d_ff: 512 there, 256 here" in str(error.value)
    assert "data.vocab_size: 2000 there, 4000 here" in str(error.value)


def test_unwritable_model_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="cannot write there"):
        md.check_writable(blocker / "run")


def test_atomic_writes_leave_no_temporary_files(tmp_path):
    md.write_json(tmp_path / "a.json", {"x": 1})
    md.write_atomically(tmp_path / "b.txt", "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.txt"]
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}


def test_xla_is_decided_per_strategy(mirrored):
    single = tf.distribute.get_strategy()
    assert runtime.resolve_jit_compile("auto", single) is True
    assert runtime.resolve_jit_compile(False, single) is False
    assert runtime.resolve_jit_compile("auto", mirrored) is False  # 2 CPU replicas
    assert runtime.resolve_jit_compile(False, mirrored) is False
    with pytest.raises(ConfigError, match="does not work with 2 replicas on CPU devices"):
        runtime.resolve_jit_compile(True, mirrored)


class _Strategy:
    """Stands in for a MultiWorkerMirroredStrategy: only the cluster resolver is read."""

    def __init__(self, tf_config, monkeypatch):
        monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
        self.cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()


@pytest.mark.parametrize(
    "cluster, task, expected",
    [
        ({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 0}, (2, 0, True)),
        ({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 1}, (2, 1, False)),
        ({"chief": ["c:1"], "worker": ["a:1"]}, {"type": "chief", "index": 0}, (2, 0, True)),
        ({"chief": ["c:1"], "worker": ["a:1"]}, {"type": "worker", "index": 0}, (2, 1, False)),
    ],
)
def test_worker_roles_from_tf_config(monkeypatch, cluster, task, expected):
    strategy = _Strategy({"cluster": cluster, "task": task}, monkeypatch)
    assert runtime.worker_info(strategy) == expected
    assert runtime.worker_info(tf.distribute.get_strategy()) == (1, 0, True)


def test_multi_worker_needs_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="reads the cluster from the TF_CONFIG"):
        runtime.make_strategy("multi_worker")


def test_yaml_of_a_run_is_readable(tmp_path):
    md.save_experiment(tmp_path, load_experiment(DEMO).with_vocab_sizes(10, 10))
    saved = yaml.safe_load((tmp_path / md.EXPERIMENT).read_text())
    assert saved["model"]["preset"] == "tiny" and saved["model"]["vocab_size"] == 10
