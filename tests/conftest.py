"""Test setup: the Keras backend, two devices, seeds and a clean dtype policy.

`make test` runs the suite twice, side by side: on TensorFlow (every test but tests/jax/),
and on JAX (`KERAS_BACKEND=jax`: tests/jax/ and the layer contract tests), with two devices
either way: two logical CPU devices for MirroredStrategy, two XLA host devices for Keras's
`DataParallel`. On JAX nothing here imports TensorFlow.
"""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
BACKEND = os.environ["KERAS_BACKEND"]
if BACKEND == "tensorflow":
    import tensorflow as tf

    # Two logical CPU devices, so MirroredStrategy runs two replicas on a machine without
    # GPUs. This must happen before TensorFlow initializes its devices, hence at import time.
    _cpus = tf.config.list_physical_devices("CPU")
    # Under pytest-xdist, each worker's TensorFlow gets its share of the cores for its
    # operations' own threads: two workers on two cores then do not oversubscribe them (the
    # export, model, CTranslate2 and reliability test files took 6% less time). The programs
    # tests start keep TensorFlow's default (all cores): they often run alone.
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    tf.config.threading.set_intra_op_parallelism_threads(max(1, (os.cpu_count() or 1) // _workers))
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
elif BACKEND == "jax":
    # Two host devices for keras.distribution.DataParallel; before JAX starts. XLA's CPU
    # programs run on one thread each: `make test` runs this pass beside the TensorFlow
    # pass's two workers on two cores, where XLA's own thread pool only competes with them
    # (the flags of JAX's issues 743 and 1539). And XLA compiles them without LLVM's
    # optimizations, JAX's own setting for smoke tests (its PR 3208): the tests' programs
    # are small and run a few times, so compiling is most of their cost (what both save:
    # BENCHMARKS.md's history in git, "The test suite's time"). The programs tests start
    # inherit these settings.
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
    os.environ["XLA_FLAGS"] = " ".join(
        [
            os.environ.get("XLA_FLAGS", ""),
            "--xla_force_host_platform_device_count=2",
            "--xla_cpu_multi_thread_eigen=false",
            "intra_op_parallelism_threads=1",
        ]
    ).strip()

import keras  # noqa: E402
import pytest  # noqa: E402

if os.environ.get("KT_TEST_NUMERIC_PATH") == "capped":  # `make test-numerics`
    # LiteRT's second numeric path: its builtin kernels instead of XNNPACK's delegate, which
    # has no instruction-set cap (the other engines' caps are NUMERIC_PATH's variables,
    # tests/numeric_path.py). Set before the test modules import the interpreter; a program
    # a test starts in a process of its own keeps XNNPACK.
    try:
        from ai_edge_litert import interpreter as _litert
    except ImportError:
        pass
    else:
        # The class's own __init__ wrapped in place: a subclass bound to the module's name
        # recursed, since LiteRT's __init__ calls super(InterpreterWithCustomOps, self).
        _custom_ops_init = _litert.InterpreterWithCustomOps.__init__

        def _builtin_kernels(self, *args, **kwargs):
            builtin = _litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
            kwargs.setdefault("experimental_op_resolver_type", builtin)
            _custom_ops_init(self, *args, **kwargs)

        _litert.InterpreterWithCustomOps.__init__ = _builtin_kernels

# tests/jax/ is the JAX pass's own: `make test` runs it with KERAS_BACKEND=jax.
collect_ignore = [] if BACKEND == "jax" else ["jax"]


@pytest.fixture(autouse=True)
def _seeded_float32():
    """Every test starts seeded under the float32 policy, with `kt.fast`'s speed switch off,
    and leaves them that way: a trainer run in the test's process turns the switch on for
    the rest of its process, as it does in a process of its own (test_dropout's stock-path
    test failed after test_reliability's in-process NaN run in the same worker)."""
    from keras_transformer import fast

    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    fast.disable()
    yield
    fast.disable()
    keras.config.set_dtype_policy("float32")


def compiled(function):
    """`function` compiled by XLA: `tf.function(jit_compile=True)` on TensorFlow, `jax.jit`
    on JAX."""
    if BACKEND == "jax":
        import jax

        return jax.jit(function)
    return tf.function(function, jit_compile=True)


@pytest.fixture
def as_written(monkeypatch):
    """`as_written(module, name)` replaces `module.name` with a call that records, in the
    list it returns, whether it ran as written (True) or as AutoGraph's conversion of it
    (False; AutoGraph converts whatever a converted function calls)."""

    def spy_on(module, name):
        original, record = getattr(module, name), []

        def spy(*args, **kwargs):
            record.append(sys._getframe().f_code.co_filename == __file__)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
        return record

    return spy_on


@pytest.fixture(scope="session")
def mirrored():
    """A MirroredStrategy over the two logical CPU devices, one for the whole session:
    several strategies in one process can collide on collective instance keys."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def pytest_collection_modifyitems(config, items):
    """On JAX, the tests of TensorFlow's MirroredStrategy do not apply: deselected (JAX's
    own distribution: tests/jax/test_distribution.py)."""
    if BACKEND == "tensorflow":
        return
    kept = [item for item in items if "mirrored" not in getattr(item, "fixturenames", ())]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept


@pytest.fixture(scope="session")
def reversal_model(tmp_path_factory, worker_id):
    """A small model trained on the reversal task (tests/reversal.py), once for the whole
    run (about 35 s saved when test_decoding and test_learning run on different workers)."""
    from tests.reversal import train_reversal_model

    return shared(
        tmp_path_factory,
        worker_id,
        "reversal_model.keras",
        train_reversal_model,
        lambda model, path: model.save(path),
        keras.saving.load_model,
    )


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory, worker_id):
    """An untrained tiny model (seed 3, the bundled vocabulary, max_length 24, one layer each
    side: an export holds the model's variables whatever its depth) and its
    SavedModel, exported with the defaults as `trainers.export` traces them (speed switch on;
    for tests/test_export.py, which holds its translations to the library's, and
    tests/test_example_serve_client.py): `(model, directory, version, calls)`, `calls` the
    searches its tracing called, as (name, stopping) pairs. Exported once for the whole run
    (tracing the four signatures takes a while)."""
    import json
    from pathlib import Path

    import keras_transformer as kt
    from keras_transformer import decoding, export
    from tests import bible

    def make():
        keras.utils.set_random_seed(3)
        config = kt.TransformerConfig.preset(
            "tiny",
            vocab_size=bible.vocabularies().target.vocabulary_size(),
            max_length=24,
            num_encoder_layers=1,
            num_decoder_layers=1,
        )
        model = kt.build_transformer(config)
        directory = tmp_path_factory.mktemp("saved_models") / "tiny"
        calls = []

        search = decoding.DecodingPlan.search

        def recorded(plan, model, source_ids, *args, **kwargs):
            # The one call every signature's search goes through, a `DecodingPlan`'s: its
            # settings' stopping, and how many hypotheses it was asked for.
            name = "decode" if plan.n_best == 1 else f"decode n_best={plan.n_best}"
            calls.append((name, plan.settings.stopping))
            return search(plan, model, source_ids, *args, **kwargs)

        with pytest.MonkeyPatch.context() as patch, kt.fast.switched(True):
            patch.setattr(decoding.DecodingPlan, "search", recorded)
            version = export.export(
                model, directory, vocabularies=bible.vocabularies(), manifest={"note": "test"}
            )
        return model, directory, version, calls

    def save(result, path):
        model, directory, version, calls = result
        path.mkdir()
        model.save(path / "model.keras")
        record = {"directory": str(directory), "version": str(version), "calls": calls}
        (path / "export.json").write_text(json.dumps(record))

    def load(path):
        record = json.loads((path / "export.json").read_text())
        calls = [tuple(call) for call in record["calls"]]
        model = keras.saving.load_model(path / "model.keras")
        return model, Path(record["directory"]), Path(record["version"]), calls

    return shared(tmp_path_factory, worker_id, "tiny_export", make, save, load)


@pytest.fixture(scope="session")
def briefly_trained():
    """The tiny preset with one encoder and one decoder layer (pre-norm, no dropout,
    `max_length` 96), trained 300 updates on the bundled corpus, and its vocabulary (tests/
    bible.py's): `(model, vocabularies)`. Enough for a few BLEU points, and translations that
    differ from sentence to sentence and between greedy and beam search (as many as two
    layers each reach in twice the time). Stored, not trained in the run (its make script,
    tests/fixtures/briefly_trained/make_fixture.py: about 40 s a run saved, and the same
    weights on every CPU), for tests/test_ctranslate2.py and tests/test_every_door.py."""
    from pathlib import Path

    from keras_transformer import text

    stored = Path(__file__).resolve().parent / "fixtures" / "briefly_trained"
    model = keras.saving.load_model(stored / "model.keras", compile=False)
    return model, text.Vocabularies.load(stored / "vocab")


def shared(tmp_path_factory, worker_id, name: str, make, save, load):
    """`make()`'s result once for the whole run: under pytest-xdist the first worker that
    needs it makes and saves it, the others load it (pytest-xdist's recipe for a session
    fixture made once)."""
    from filelock import FileLock

    if worker_id == "master":  # not distributed
        return make()
    path = tmp_path_factory.getbasetemp().parent / name
    with FileLock(f"{path}.lock"):
        if path.exists():
            return load(path)
        result = make()
        save(result, path)
        return result


@pytest.fixture(scope="session")
def slice_run(tmp_path_factory, worker_id):
    """A model directory that `trainers.train` wrote in a process of its own: the training
    slice (tests/test_trainer.py), 20 updates, no dev split, no XLA. Trained once for the
    whole run, for the tests that need a briefly trained run directory written by another
    process (tests/test_new_process.py, tests/test_litert.py, tests/test_startup_logs.py;
    each trained its own). Tests work on copies of it: some write into theirs."""
    import shutil

    from tests.test_trainer import slice_config, train_cli

    def make():
        tmp = tmp_path_factory.mktemp("slice-run")
        config = slice_config(tmp, dev=False, steps=20, steps_per_epoch=10, jit_compile="false")
        train_cli(config, tmp / "run", "--verbose", "0")
        return tmp / "run"

    return shared(
        tmp_path_factory,
        worker_id,
        "slice_run",
        make,
        lambda run, path: shutil.copytree(run, path),
        lambda path: path,
    )


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory, worker_id):
    """The summary of the training slice's run (tests/test_trainer.py) with the settings
    RESUME_REFERENCE, uninterrupted: the reference that resumed runs must equal bit for bit
    (tests/test_reliability.py, tests/test_resume.py)."""
    import json

    from tests.test_trainer import RESUME_REFERENCE, slice_config, summary_line, train_cli

    def make():
        tmp = tmp_path_factory.mktemp("uninterrupted")
        config = slice_config(tmp, **RESUME_REFERENCE)
        return summary_line(train_cli(config, tmp / "once").stdout)

    return shared(
        tmp_path_factory,
        worker_id,
        "uninterrupted.json",
        make,
        lambda summary, path: path.write_text(json.dumps(summary)),
        lambda path: json.loads(path.read_text()),
    )


@pytest.fixture(scope="session")
def killed(tmp_path_factory, worker_id):
    """A run with the settings RESUME_REFERENCE killed in its second epoch, after its first
    backup (update 20): `(config, model directory)`, for the tests that resume it
    (tests/test_reliability.py, tests/test_resume.py). Tests work on copies of the directory."""
    import json
    import signal
    import time
    from pathlib import Path

    from tests.test_reliability import wait_for_backup
    from tests.test_trainer import RESUME_REFERENCE, slice_config, start_training

    def make():
        tmp = tmp_path_factory.mktemp("killed")
        config = slice_config(tmp, **RESUME_REFERENCE)  # uninterrupted: 40 updates
        process = start_training(config, tmp / "run")
        wait_for_backup(tmp / "run", process)
        time.sleep(0.3)  # into the second epoch (of 20 updates, about 2 s)
        process.send_signal(signal.SIGKILL)
        process.wait()
        return config, tmp / "run"

    return shared(
        tmp_path_factory,
        worker_id,
        "killed.json",
        make,
        lambda paths, path: path.write_text(json.dumps([str(p) for p in paths])),
        lambda path: tuple(Path(p) for p in json.loads(path.read_text())),
    )
