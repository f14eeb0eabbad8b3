"""Train a Transformer: `python -m trainers.train --config CONFIG.yaml --model-dir DIR`.

    python -m trainers.train --config trainers/configs/demo.yaml --model-dir runs/demo
    kt-train --config small --model-dir runs/mine --set data.train=train.tsv \\
        --set data.dev=dev.tsv --set data.test=test.tsv  # a config shipped with the package
    python -m trainers.train --config trainers/configs/small.yaml --model-dir runs/small \\
        --strategy mirrored --set training.steps=20000
    python -m trainers.train --model-dir runs/opus-en-es --set data.train=mine.tsv  # fine-tune
    TF_CONFIG='{"cluster": ...}' python -m trainers.train ... --strategy multi_worker

Everything that can be checked is checked before any work starts: the configuration, the
model directory (writable, not another experiment's) and the corpora. Running the same
command again resumes from the last backup; a finished run is not repeated. Exit statuses
are trainers.errors's: 1 when the loss became NaN, 2 for a configuration or corpus error, 3
when another worker was lost.

--config takes a YAML file, or the name of one of the configs shipped in the package's
trainers/configs/ (demo, small, base_wmt14, big_wmt14), which an installed package has too:
their data paths are relative to the working directory (demo's are the checkout's
data/bible-en-es/), so --set data.train=... points one at a corpus of one's own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import typing
from pathlib import Path

from trainers import errors, flags, startup_logs
from trainers.errors import ConfigError
from trainers.provenance import provenance
from trainers.run_dir import RunDirectory
from trainers.runtime import STRATEGIES

if typing.TYPE_CHECKING:  # TensorFlow is imported once the arguments and paths are checked
    import tensorflow as tf

    from trainers import callbacks as cb


def parse_args(argv=None) -> argparse.Namespace:
    parser = flags.ArgumentParser(
        prog=flags.prog("trainers.train"),
        description=__doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[-1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        help="experiment YAML file, or a shipped config's name: "
        f"{', '.join(shipped_configs())} (default: the --model-dir's experiment.yaml, e.g. an "
        "imported model's)",
    )
    parser.add_argument("--model-dir", required=True, type=Path, help="where the run is written")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable), e.g. training.steps=2000",
    )
    parser.add_argument("--strategy", default="default", choices=STRATEGIES)
    parser.add_argument(
        "--cpu-devices",
        type=int,
        default=0,
        metavar="N",
        help="split the CPU into N logical devices (MirroredStrategy without GPUs)",
    )
    parser.add_argument(
        "--verbose",
        type=int,
        default=1,
        choices=(0, 1, 2),
        help="0 silent, 1 progress bar, 2 one line an epoch",
    )
    return parser.parse_args(argv)


# The configs shipped in the package (pyproject.toml's package data).
CONFIGS = Path(__file__).resolve().parent / "configs"


def shipped_configs() -> list[str]:
    """The names `--config` takes for the configs shipped in trainers/configs/."""
    return sorted(path.stem for path in CONFIGS.glob("*.yaml"))


def config_path(name: str) -> Path:
    """The experiment file that `--config name` means: the file `name`, or else the shipped
    config of that name (`demo`: trainers/configs/demo.yaml, wherever the package is
    installed). ConfigError when it is neither. Plain Python: checked before TensorFlow
    starts."""
    path = Path(name)
    if path.is_dir():
        raise ConfigError(f"--config {name} is a folder; name a YAML file")
    if path.exists():
        return path
    if path.name == name and not path.suffix and (CONFIGS / f"{name}.yaml").exists():
        return CONFIGS / f"{name}.yaml"
    raise ConfigError(
        f"--config {name}: no such file, nor a shipped config of that name "
        f"({', '.join(shipped_configs())})"
    )


@errors.program
def main(argv=None) -> int:
    args = parse_args(argv)
    try:  # the paths first: a mistyped one costs no TensorFlow start-up
        config = config_path(args.config) if args.config is not None else None
        if config is None:
            RunDirectory(args.model_dir).check_experiment()
    except ConfigError as error:
        return errors.fail(error)
    from trainers import runtime
    from trainers.experiment import load_experiment

    try:
        if args.cpu_devices:
            runtime.split_cpu(args.cpu_devices)  # before anything else touches TensorFlow
        if config is not None:
            experiment = load_experiment(config, args.set)
        else:
            experiment = RunDirectory(args.model_dir).existing_experiment(args.set)
        summary = train(experiment, args.model_dir, args.strategy, args.verbose)
    except errors.USER_ERRORS as error:
        return errors.fail(error)
    except errors.LOST_WORKER_ERRORS as error:
        return errors.fail(
            f"lost contact with another worker ({type(error).__name__}); start the same "
            "command again on every worker: training resumes from the last backup",
            errors.EXIT_LOST_WORKER,
        )
    if summary.get("stopped_early"):
        return errors.fail(summary["stopped_early"], errors.EXIT_STOPPED)
    return errors.EXIT_OK


def train(experiment, model_dir: Path, strategy_kind: str = "default", verbose: int = 1) -> dict:
    """Runs (or resumes) the experiment in `model_dir` and returns the training summary.

    Everything that can be refused is refused before anything is written: the directory's
    owner, the corpora, the disk space and the directory's permissions.
    """
    run = RunDirectory(model_dir)
    if not experiment.data.train:
        raise errors.ConfigError(
            "data.train is required (an imported model fine-tunes with --set data.train=FILE)"
        )
    resuming = run.check_owner(experiment)
    if resuming and (finished := run.finished_run(experiment.training.steps)):
        print(f"{run.root} already holds this run, trained for {experiment.training.steps} steps")
        return finished
    train_corpus, scan, dev_pairs = _read_corpora(experiment)
    _check_room(run, experiment)
    placement = _place(strategy_kind, experiment.training)
    vocabularies = _vocabularies(run, experiment, scan.sample, resuming, placement.is_chief)
    experiment = _resolve_experiment(run, experiment, vocabularies, resuming, placement.is_chief)
    model, progress = _model(run, experiment, placement)
    lengths = _length_report(experiment, train_corpus, vocabularies)
    datasets = _datasets(experiment, vocabularies, train_corpus, dev_pairs, placement, progress)
    monitors = _monitors(run, experiment, vocabularies, dev_pairs, placement.is_chief)
    callbacks = _callbacks(run, experiment.training, placement.is_chief, monitors, progress)
    history, seconds = _fit(model, experiment.training, datasets, progress, callbacks, verbose)
    summary = _summary(
        run, experiment.training, placement, model, history, seconds, lengths, monitors
    )
    _save(run, model, vocabularies, summary, placement.is_chief)
    print("summary: " + json.dumps(summary, sort_keys=True), flush=True)
    return summary


class Placement(typing.NamedTuple):
    """Where the run trains: the strategy, this worker's place in the cluster, and XLA."""

    kind: str  # "default", "mirrored" or "multi_worker"
    strategy: tf.distribute.Strategy
    workers: int
    worker_index: int
    is_chief: bool
    jit_compile: bool


def _read_corpora(experiment):
    """(training corpus, its scan, dev pairs or None), checked before anything is written.

    The training corpus is streamed: one pass checks it, counts it and keeps a bounded sample
    for the vocabulary; training reads it from the files again (`CorpusFiles.to_dataset`).
    """
    from trainers.experiment import open_split, read_split

    data = experiment.data
    train = open_split(data, "train")
    print(f"reading {train.origin}...", flush=True)
    # Sentences for the vocabulary: a shared one learns from both sides of each pair.
    sample_pairs = data.vocab_max_sentences // (2 if data.shared_vocab else 1)
    scan = train.scan(
        sample_size=sample_pairs, seed=experiment.training.seed, limit=data.train_limit
    )
    dev_pairs = read_split(data, "dev")
    print(
        f"training pairs: {scan.pairs} from {train.origin} "
        f"({scan.skipped_empty} empty pairs skipped)"
    )
    return train, scan, dev_pairs


def _check_room(run: RunDirectory, experiment) -> None:
    """Room on the disk for the run's files, then a writable directory (created here)."""
    run.check_disk_space(experiment)
    run.check_writable()


def _place(strategy_kind: str, training) -> Placement:
    """The strategy, the worker's role and XLA; then the seeds (before any tokenizer: see
    keras_transformer.text), the speed switch and, if asked, TensorFlow's op determinism."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt
    from trainers import runtime

    strategy = runtime.make_strategy(strategy_kind)
    if training.gradient_accumulation_steps > 1 and strategy.num_replicas_in_sync > 1:
        # Keras's accumulation applies the update inside a cond, where tf.distribute cannot
        # all-reduce: "`merge_call` called while defining a new graph" after the first step.
        raise errors.ConfigError(
            f"training.gradient_accumulation_steps={training.gradient_accumulation_steps} "
            f"needs one replica, and this run has {strategy.num_replicas_in_sync} (Keras "
            f"{keras.__version__} cannot accumulate gradients under tf.distribute): raise "
            "data.tokens_per_batch instead, since the replicas' batches already add up"
        )
    workers, worker_index, is_chief = runtime.worker_info(strategy)
    jit_compile = runtime.resolve_jit_compile(training.jit_compile, strategy)
    keras.utils.set_random_seed(training.seed)
    if training.fast:
        kt.fast.enable()
    if training.deterministic:
        tf.config.experimental.enable_op_determinism()
    return Placement(strategy_kind, strategy, workers, worker_index, is_chief, jit_compile)


def _vocabularies(run: RunDirectory, experiment, sample, resuming: bool, is_chief: bool):
    """The run's vocabularies: learned (from the scan's sample of the training pairs, at most
    `data.vocab_max_sentences`) and saved by the chief of a new run, loaded otherwise (other
    workers wait until the chief has written them)."""
    from keras_transformer import text

    if resuming or not is_chief:
        if not is_chief:
            run.wait_for_experiment()
        return run.load_vocabularies()
    config = experiment.data
    print(f"learning a {config.vocab_size}-piece SentencePiece vocabulary...", flush=True)
    with startup_logs.native_logs():
        vocabularies = text.Vocabularies.train(
            sample.sources,
            sample.targets,
            config.vocab_size,
            shared=config.shared_vocab,
            model_type=config.vocab_model_type,
            max_sentences=config.vocab_max_sentences,
            seed=experiment.training.seed,
        )
    run.save_vocabularies(vocabularies)
    return vocabularies


def _resolve_experiment(run: RunDirectory, experiment, vocabularies, resuming, is_chief):
    """The experiment with the vocabulary's sizes; a loaded vocabulary must be the one the run
    was made with. The chief of a new run writes experiment.yaml, which claims the directory."""
    saved = run.load_experiment() if resuming or not is_chief else None
    if saved is not None:
        run.check_vocabulary(saved.model, vocabularies)
    experiment = experiment.with_vocab_sizes(
        vocabularies.source.vocabulary_size(), vocabularies.target.vocabulary_size()
    )
    if is_chief and (saved is None or not saved.data.train or run.untrained_import()):
        run.save_experiment(experiment)  # a new run, or the first fine-tuning of an import
    return experiment


def _length_report(experiment, train_corpus, vocabularies) -> dict:
    """Counts the training pairs kept and those skipped as longer than max_length (one
    streamed pass over the corpus, tokenized in the graph)."""
    from keras_transformer import data

    max_length = experiment.model.max_length
    print("counting the training pairs' tokens...", flush=True)
    pairs = train_corpus.to_dataset(limit=experiment.data.train_limit)
    lengths = data.length_report(pairs, vocabularies, max_length=max_length)
    print(
        f"over-long pairs (> {max_length} tokens) skipped: {lengths['too_long']} of "
        f"{lengths['pairs']}; kept {lengths['target_tokens']} target tokens"
    )
    return lengths


def _model(run: RunDirectory, experiment, placement: Placement):
    """(compiled model, `checkpointing.Progress`): a new model, or the backup's state when
    there is one. Every worker resumes from the chief's backup: all hold the same state. A
    backup that the planned steps cannot continue is refused here, before any training."""
    from trainers import checkpointing, runtime

    # An imported model starts from its weights, unless a backup holds fine-tuned ones.
    pretrained = run.pretrained_weights() if run.pretrained.exists() else None
    with placement.strategy.scope():
        model = _compiled_model(experiment, placement.jit_compile, weights=pretrained)
        progress = checkpointing.restore_state(model, run.backup)
    if pretrained is not None and not progress.updates:
        print(f"starting from the pretrained weights of {pretrained}", flush=True)
    print(runtime.describe(placement.strategy), f"jit_compile={placement.jit_compile}", flush=True)
    if progress.updates:
        _check_plan(run, experiment.training, progress)
        print(
            f"resuming after update {progress.updates} ({progress.batches} batches "
            f"consumed) from {run.backup.path}",
            flush=True,
        )
    return model, progress


def _check_plan(run: RunDirectory, training, progress) -> None:
    """The planned steps must go on from the updates done, in whole epochs."""
    done = progress.updates
    if done > training.steps:
        raise errors.ConfigError(
            f"--model-dir {run.root} has done {done} updates, more than "
            f"training.steps={training.steps}; set training.steps to {done} or more"
        )
    if done % training.steps_per_epoch:
        raise errors.ConfigError(
            f"training.steps_per_epoch={training.steps_per_epoch} does not divide the {done} "
            f"updates that the backup in {run.backup.path} holds: epochs are counted from the "
            f"first update, so choose a steps_per_epoch that divides both {done} and "
            f"training.steps={training.steps}, or start a new --model-dir"
        )


def _compiled_model(experiment, jit_compile: bool, weights=None):
    """The model, compiled with the paper's optimizer, schedule and loss (section 5); with
    the weights of the .keras file `weights` (an imported model's) loaded before it is
    compiled: that file holds no optimizer state, and loaded into a compiled model it would
    be asked for Adam's (Keras warns "Skipping variable loading for optimizer 'adam'",
    which reads as a failure). Adam's moments start empty."""
    import keras

    import keras_transformer as kt

    training = experiment.training
    accumulation = training.gradient_accumulation_steps
    model = kt.build_transformer(experiment.model)
    if weights is not None:
        model.load_weights(weights)
    schedule = kt.WarmupSchedule(
        experiment.model.d_model,
        warmup_steps=training.warmup_steps,
        scale=training.learning_rate_scale,
        accumulation_steps=accumulation,
    )
    optimizer = keras.optimizers.Adam(
        schedule,
        beta_1=training.adam_beta_1,
        beta_2=training.adam_beta_2,
        epsilon=training.adam_epsilon,
        gradient_accumulation_steps=accumulation if accumulation > 1 else None,
    )
    model.compile(
        optimizer=optimizer,
        loss=kt.losses.LabelSmoothedCrossEntropy(training.label_smoothing),
        metrics=[kt.metrics.MaskedAccuracy(), kt.metrics.Perplexity(), kt.metrics.TokenCount()],
        jit_compile=jit_compile,
    )
    return model


def _datasets(experiment, vocabularies, train_corpus, dev_pairs, placement, progress):
    """(training batches, dev batches or None).

    Every worker reads the whole corpus into the same stream of global batches, whose order
    the seed fixes, and tf.distribute gives each replica its piece of each batch (sharding
    by data): the batches do not depend on the number of workers and replicas, and a resumed
    run skips exactly the `progress.batches` batches already consumed. (Each worker
    tokenizes every batch, a small cost next to a training step.)"""
    import tensorflow as tf

    from keras_transformer import data

    batches = dict(
        max_length=experiment.model.max_length,
        tokens_per_batch=experiment.data.tokens_per_batch,
        batch_multiple=placement.strategy.num_replicas_in_sync,
        seed=experiment.training.seed,
    )
    pairs = train_corpus.to_dataset(limit=experiment.data.train_limit)
    train_dataset = data.make_dataset(
        pairs, vocabularies, shuffle_buffer=experiment.data.shuffle_buffer, **batches
    )
    train_dataset = train_dataset.skip(progress.batches)
    # Each update the mean over its batches' tokens (after the skip: groups start there).
    train_dataset = data.accumulation_groups(
        train_dataset, experiment.training.gradient_accumulation_steps
    )
    workers = placement.workers
    if workers > 1:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        train_dataset = train_dataset.with_options(options)
    # Validation inside fit is skipped across workers: uneven shards of a finite dev set can
    # leave one worker waiting in a collective. The chief's dev BLEU still runs.
    if dev_pairs is None or workers > 1:
        return train_dataset, None
    dev_dataset = data.make_dataset(dev_pairs.to_dataset(), vocabularies, training=False, **batches)
    # Keras warns "Your input ran out of data; interrupting training" at the end of the first
    # pass over a dataset whose length it is not told: count the dev batches once.
    count = int(dev_dataset.reduce(0, lambda count, _: count + 1))
    return train_dataset, dev_dataset.apply(tf.data.experimental.assert_cardinality(count))


class Monitors(typing.NamedTuple):
    """The callbacks whose figures go into the summary."""

    throughput: cb.Throughput
    bleu: cb.BleuCallback | None  # the chief's dev BLEU; None elsewhere or without a dev split


def _monitors(run: RunDirectory, experiment, vocabularies, dev_pairs, is_chief: bool) -> Monitors:
    """Throughput on every worker; the dev BLEU on the chief, when there is a dev split,
    decoded with the experiment's settings (its languages) at `bleu_beam_size`."""
    from trainers import callbacks as cb

    training = experiment.training
    if not is_chief or dev_pairs is None:
        return Monitors(cb.Throughput(), None)
    limit = training.bleu_max_sentences or len(dev_pairs)
    bleu = cb.BleuCallback(
        vocabularies,
        dev_pairs.sources[:limit],
        dev_pairs.targets[:limit],
        every_steps=training.bleu_every_steps,
        beam_size=training.bleu_beam_size,
        log_dir=run.bleu_logs,
        decoding=experiment.decoding,
    )
    return Monitors(cb.Throughput(), bleu)


def _callbacks(run: RunDirectory, training, is_chief: bool, monitors: Monitors, progress) -> list:
    """TerminateOnNaN everywhere; the chief also writes the backup (counting on from
    `progress`), the checkpoints (keeping the last ones), TensorBoard logs and the dev
    BLEU."""
    import keras

    from trainers import checkpointing

    callbacks = [keras.callbacks.TerminateOnNaN(), monitors.throughput]
    if not is_chief:
        return callbacks
    callbacks += [
        checkpointing.Backup(run.backup, start=progress),
        checkpointing.Checkpoints(run.checkpoints, training.keep_checkpoints),
        keras.callbacks.TensorBoard(str(run.logs)),
    ]
    return callbacks + ([monitors.bleu] if monitors.bleu else [])


def _fit(model, training, datasets, progress, callbacks, verbose: int):
    """`model.fit` from the updates done (`progress`) up to the planned ones; returns
    (history, seconds). An epoch is `steps_per_epoch` updates, each of
    `gradient_accumulation_steps` batches (the steps Keras counts)."""
    train_dataset, dev_dataset = datasets
    started = time.perf_counter()
    history = model.fit(
        train_dataset,
        initial_epoch=progress.updates // training.steps_per_epoch,
        epochs=training.steps // training.steps_per_epoch,
        steps_per_epoch=training.steps_per_epoch * training.gradient_accumulation_steps,
        validation_data=dev_dataset,
        shuffle=False,  # the pipeline shuffles
        callbacks=callbacks,
        verbose=verbose,
    )
    return history, time.perf_counter() - started


def _summary(run, training, placement, model, history, seconds, lengths, monitors) -> dict:
    """What the run did: where, how many steps, losses, throughput, data, dev BLEU."""
    steps = int(model.optimizer.iterations.numpy())
    summary = {
        "strategy": placement.kind,
        "replicas": placement.strategy.num_replicas_in_sync,
        "workers": placement.workers,
        "jit_compile": placement.jit_compile,
        "steps": steps,
        "planned_steps": training.steps,
        "initial_loss": monitors.throughput.initial_loss,
        "final_loss": history.history.get("loss", [None])[-1],
        "final_dev_loss": history.history.get("val_loss", [None])[-1],
        "tokens_per_second": monitors.throughput.tokens_per_second(),
        "train_seconds": round(seconds, 1),
        "data": lengths,
        "dev": monitors.bleu.last if monitors.bleu else None,
        "weights_sha256": weights_fingerprint(model),
        "code": provenance(),
    }
    if model.stop_training and steps < training.steps:
        summary["stopped_early"] = (
            f"training stopped at step {steps} of {training.steps}: the loss became NaN or "
            f"infinite; the last good checkpoint is in {run.checkpoints.path}"
        )
    return summary


def _save(run: RunDirectory, model, vocabularies, summary: dict, is_chief: bool) -> None:
    """The chief writes the model, as model.keras and as a keras-hub preset (unless training
    stopped early), then the summary, which says the run is finished: a crash before it
    leaves a run that the same command finishes by writing both again."""
    if not is_chief:
        return
    if not summary.get("stopped_early"):
        run.save_trained(model, vocabularies)
    run.write_summary(summary)
    print(f"wrote {run.model()} (and the keras-hub preset beside it) and {run.summary}")


def weights_fingerprint(model) -> str:
    """sha256 of all weights' bytes, in order: equal fingerprints, equal models."""
    import numpy as np

    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    return digest.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
