"""Experiment YAML files, --set overrides, and the runtime decisions (XLA per strategy, which
worker is the chief). The run directory's checks are in test_run_dir.py."""

import json

import pytest
import tensorflow as tf

import keras_transformer as kt
from trainers import runtime
from trainers.errors import ConfigError
from trainers.experiment import DecodingConfig, load_experiment

DEMO = "trainers/configs/demo.yaml"


def write(tmp_path, text, name="exp.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "name, expected",
    [
        ("demo", ("tiny", 128, 0.0, "tsv", 4000, 1400, 200, 5)),
        ("small", ("small", 256, 0.1, "tsv", 8000, 10_000, 500, 5)),
        ("base_wmt14", ("base", 512, 0.1, "tfds", 37000, 100_000, 1000, 5)),
        ("big_wmt14", ("big", 1024, 0.3, "tfds", 37000, 300_000, 1000, 20)),
    ],
)
def test_every_bundled_config_loads(name, expected):
    experiment = load_experiment(f"trainers/configs/{name}.yaml")
    model, data, training = experiment.model, experiment.data, experiment.training
    assert (
        experiment.preset,
        model.d_model,
        model.dropout,
        data.format,
        data.vocab_size,
        training.steps,
        training.steps_per_epoch,
        training.keep_checkpoints,
    ) == expected
    if data.format == "tfds":
        assert data.tfds_name == "wmt14_translate/de-en"


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
    # The demo's decoding settings, recorded once for evaluate and export; overridable.
    assert experiment.decoding == DecodingConfig(beam_size=4, length_penalty=1.0)
    assert experiment.to_dict()["decoding"]["stopping"] == "early"
    greedy = load_experiment(DEMO, ["decoding.beam_size=1"]).decoding
    assert (greedy.beam_size, greedy.length_penalty) == (1, 1.0)


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
        (
            "model: {preset: tiny}\ndata: {train: x}\ndecoding: {stopping: late}\n",
            "decoding.stopping='late' must be one of",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x}\ndecoding: {beam_size: 0}\n",
            "decoding.beam_size=0 must be an integer >= 1",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x}\ndecoding: {beam_size: 2, n_best: 3}\n",
            "decoding.n_best=3 must be between 1 and the beam size 2",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x}\ndecoding: {finish_rule: marian}\n",
            "decoding.finish_rule='marian' must be one of",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x}\ndecoding: {beam: 2}\n",
            "unknown key decoding.beam \\(known: beam_size, finish_rule, length_penalty, "
            "max_extra_length, n_best, ranking, source_prefix, stopping, target_prefix\\)",
        ),
        (
            "model: {preset: tiny}\ndata: {train: x}\ndecoding: {ranking: wu}\n",
            "decoding.ranking='wu' must be one of \\('gnmt', 'length'\\)",
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


def test_the_decoding_section_is_the_librarys_settings(tmp_path):
    assert DecodingConfig is kt.decoding.DecodingSettings  # the old name, kept
    # A model directory's experiment.yaml from before finish_rule, max_extra_length and
    # n_best: the three keys it has, the library's defaults for the others.
    old = write(
        tmp_path,
        "model: {preset: tiny, vocab_size: 500}\ndata: {train: ''}\n"
        "decoding: {beam_size: 5, length_penalty: 1.0, stopping: exact}\n",
    )
    settings = load_experiment(old, resolved=True).decoding
    assert settings == kt.decoding.DecodingSettings(5, 1.0, "exact")
    assert (settings.finish_rule, settings.max_extra_length, settings.n_best) == (
        "tensor2tensor",
        50,
        1,
    )
    new = load_experiment(
        DEMO,
        ["decoding.finish_rule=fairseq", "decoding.max_extra_length=20", "decoding.n_best=2"],
    )
    assert new.decoding == kt.decoding.DecodingSettings(
        length_penalty=1.0, finish_rule="fairseq", max_extra_length=20, n_best=2
    )
    assert new.to_dict()["decoding"] == new.decoding.to_dict()  # all six, in the YAML
    # ranking: "gnmt" where the file says nothing (a directory from before it), else its own.
    assert settings.ranking == "gnmt"
    ranked = write(
        tmp_path, "model: {preset: tiny}\ndata: {train: x}\ndecoding: {ranking: length}\n"
    )
    assert load_experiment(ranked).decoding.ranking == "length"
    assert load_experiment(DEMO, ["decoding.ranking=length"]).decoding.ranking == "length"


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


def test_an_overrides_error_names_the_flag_not_the_file(tmp_path):
    """A value set by --set is refused as the flag's, not the file's (a new user's
    `--set training.steps=1` on an imported model's experiment.yaml); a value from the file
    beside it names the file too, and the error says what to set."""
    with pytest.raises(ConfigError) as error:
        load_experiment(DEMO, ["training.steps=1"])
    assert str(error.value).startswith(
        f"--set training.steps=1 (with {DEMO}): training.steps=1 is not a multiple of "
        "training.steps_per_epoch=200"
    )
    assert "--set training.steps_per_epoch=1" in str(error.value)
    assert load_experiment(DEMO, ["training.steps=1", "training.steps_per_epoch=1"])
    for override, message in [
        ("training.jit_compile=maybe", "--set training.jit_compile=maybe: training.jit_compile"),
        ("data.vocab_size=10", "--set data.vocab_size=10: data.vocab_size=10 must be >= 300"),
        ("model.preset=huge", "--set model.preset=huge: model.preset='huge'"),
        ("training.steps=ten", "--set training.steps=ten: training.steps='ten' must be of type"),
    ]:
        with pytest.raises(ConfigError) as error:
            load_experiment(DEMO, ["model.dropout=0.2", override])
        assert str(error.value).startswith(message), str(error.value)
    # Only the file's values: the file, as before.
    path = write(tmp_path, "model: {preset: tiny}\ndata: {train: x}\ntraining: {steps: 7}\n")
    with pytest.raises(ConfigError, match=f"^{path}: training.steps=7 is not a multiple"):
        load_experiment(path, ["model.dropout=0.2"])


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_experiment(tmp_path / "nope.yaml")


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
