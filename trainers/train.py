"""Train a Transformer: `python -m trainers.train --config CONFIG.yaml --model-dir DIR`.

    python -m trainers.train --config trainers/configs/demo.yaml --model-dir runs/demo
    python -m trainers.train --config trainers/configs/small.yaml --model-dir runs/small \\
        --strategy mirrored --set training.steps=20000
    TF_CONFIG='{"cluster": ...}' python -m trainers.train ... --strategy multi_worker

Everything that can be checked is checked before any work starts: the configuration, the
model directory (writable, not another experiment's) and the corpora. Running the same
command again resumes from the last backup; a finished run is not repeated.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trainers import checkpointing, runtime
from trainers.experiment import ConfigError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trainers.train", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--config", required=True, help="experiment YAML file")
    parser.add_argument("--model-dir", required=True, type=Path, help="where the run is written")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable), e.g. training.steps=2000",
    )
    parser.add_argument("--strategy", default="default", choices=runtime.STRATEGIES)
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


def main(argv=None) -> int:
    args = parse_args(argv)
    import tensorflow as tf  # importing TF starts no device yet

    from keras_transformer.corpus import CorpusError
    from trainers.experiment import load_experiment

    try:
        if args.cpu_devices:
            runtime.split_cpu(args.cpu_devices)  # before anything else touches TensorFlow
        experiment = load_experiment(args.config, args.set)
        summary = train(experiment, args.model_dir, args.strategy, args.verbose)
    except (ConfigError, CorpusError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (tf.errors.UnavailableError, tf.errors.CancelledError) as error:
        print(
            f"error: lost contact with another worker ({type(error).__name__}); start the "
            "same command again on every worker: training resumes from the last backup",
            file=sys.stderr,
        )
        return 3
    if summary.get("stopped_early"):
        print(f"error: {summary['stopped_early']}", file=sys.stderr)
        return 1
    return 0


def train(experiment, model_dir: Path, strategy_kind: str = "default", verbose: int = 1) -> dict:
    """Runs (or resumes) the experiment in `model_dir` and returns the training summary."""
    import keras
    import tensorflow as tf

    from keras_transformer import data
    from trainers import callbacks as cb
    from trainers import model_dir as md
    from trainers.experiment import load_experiment, read_split

    model_dir, training = Path(model_dir), experiment.training
    resuming = md.check_owner(model_dir, experiment)
    if resuming and (finished := _finished_run(model_dir, training.steps)):
        print(f"{model_dir} already holds this run, trained for {training.steps} steps")
        return finished
    # Every corpus is read and checked before anything is written.
    train_pairs, dev_pairs = (
        read_split(experiment.data, "train"),
        read_split(experiment.data, "dev"),
    )
    print(
        f"training pairs: {len(train_pairs)} from {train_pairs.origin} "
        f"({train_pairs.skipped_empty} empty pairs skipped)"
    )
    md.check_disk_space(model_dir, experiment)
    md.check_writable(model_dir)

    strategy = runtime.make_strategy(strategy_kind)
    workers, worker_index, is_chief = runtime.worker_info(strategy)
    jit_compile = runtime.resolve_jit_compile(training.jit_compile, strategy)
    keras.utils.set_random_seed(training.seed)  # before any tokenizer (see keras_transformer.text)
    if training.deterministic:
        tf.config.experimental.enable_op_determinism()

    vocabularies = _vocabularies(experiment, train_pairs, model_dir, resuming, is_chief)
    if resuming or not is_chief:  # the vocabulary must be the one the run was made with
        saved = load_experiment(model_dir / md.EXPERIMENT, resolved=True)
        md.check_vocabulary(saved.model, vocabularies, model_dir)
    experiment = experiment.with_vocab_sizes(
        vocabularies.source.vocabulary_size(), vocabularies.target.vocabulary_size()
    )
    if is_chief and not resuming:
        md.save_experiment(model_dir, experiment)
    max_length = experiment.model.max_length
    lengths = data.length_report(train_pairs.to_dataset(), vocabularies, max_length=max_length)
    print(
        f"over-long pairs (> {max_length} tokens) skipped: {lengths['too_long']} of "
        f"{lengths['pairs']}; kept {lengths['target_tokens']} target tokens"
    )
    with strategy.scope():
        model = _compiled_model(experiment, jit_compile)
        # Every worker resumes from the chief's backup: all hold the same state.
        initial_epoch = checkpointing.restore_state(model, model_dir / "backup")
    print(runtime.describe(strategy), f"jit_compile={jit_compile}", flush=True)
    batches_per_epoch = training.steps_per_epoch * training.gradient_accumulation_steps
    if initial_epoch:
        print(
            f"resuming after epoch {initial_epoch} (step "
            f"{int(model.optimizer.iterations.numpy())}) from {model_dir / 'backup'}",
            flush=True,
        )
    train_dataset, dev_dataset = _datasets(
        experiment, vocabularies, train_pairs, dev_pairs, strategy, workers, worker_index
    )
    # The input order is fixed by the seed: skipping what was consumed resumes it exactly.
    train_dataset = train_dataset.skip(initial_epoch * batches_per_epoch)

    throughput = cb.Throughput()
    bleu = None
    if is_chief and dev_pairs is not None:
        limit = training.bleu_max_sentences or len(dev_pairs)
        bleu = cb.BleuCallback(
            vocabularies,
            dev_pairs.sources[:limit],
            dev_pairs.targets[:limit],
            every_steps=training.bleu_every_steps,
            beam_size=training.bleu_beam_size,
            log_dir=model_dir / "logs" / "bleu",
        )
    started = time.perf_counter()
    history = model.fit(
        train_dataset,
        initial_epoch=initial_epoch,
        epochs=training.steps // training.steps_per_epoch,
        steps_per_epoch=batches_per_epoch,
        validation_data=dev_dataset,
        shuffle=False,  # the pipeline shuffles
        callbacks=_callbacks(model_dir, training, is_chief, throughput, bleu),
        verbose=verbose,
    )
    steps = int(model.optimizer.iterations.numpy())
    summary = {
        "strategy": strategy_kind,
        "replicas": strategy.num_replicas_in_sync,
        "workers": workers,
        "jit_compile": jit_compile,
        "steps": steps,
        "planned_steps": training.steps,
        "initial_loss": throughput.initial_loss,
        "final_loss": history.history.get("loss", [None])[-1],
        "final_dev_loss": history.history.get("val_loss", [None])[-1],
        "tokens_per_second": throughput.tokens_per_second(),
        "train_seconds": round(time.perf_counter() - started, 1),
        "data": lengths,
        "dev": bleu.last if bleu else None,
        "weights_sha256": md.weights_fingerprint(model),
    }
    if model.stop_training and steps < training.steps:
        summary["stopped_early"] = (
            f"training stopped at step {steps} of {training.steps}: the loss became NaN or "
            f"infinite; the last good checkpoint is in {model_dir / 'checkpoints'}"
        )
    if is_chief:
        if not summary.get("stopped_early"):
            md.save_model(model, model_dir / md.MODEL)
        md.write_json(model_dir / md.SUMMARY, summary)
        print(f"wrote {model_dir / md.MODEL} and {model_dir / md.SUMMARY}")
    print("summary: " + json.dumps(summary, sort_keys=True), flush=True)
    return summary


def _finished_run(model_dir: Path, steps: int) -> dict | None:
    """The summary of a run that already trained for `steps` steps, or None."""
    from trainers import model_dir as md

    path = model_dir / md.SUMMARY
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    return summary if summary.get("steps") == steps and not summary.get("stopped_early") else None


def _vocabularies(experiment, train_pairs, model_dir: Path, resuming: bool, is_chief: bool):
    """The run's vocabularies: learned and saved by the chief of a new run, loaded otherwise
    (other workers wait until the chief has written them)."""
    from keras_transformer import text
    from trainers import model_dir as md

    if resuming or not is_chief:
        if not is_chief:
            md.wait_for(model_dir / md.EXPERIMENT)
        return md.load_vocabularies(model_dir)
    config = experiment.data
    print(f"learning a {config.vocab_size}-piece SentencePiece vocabulary...", flush=True)
    vocabularies = text.Vocabularies.train(
        train_pairs.sources,
        train_pairs.targets,
        config.vocab_size,
        shared=config.shared_vocab,
        model_type=config.vocab_model_type,
        max_sentences=config.vocab_max_sentences,
        seed=experiment.training.seed,
    )
    vocabularies.save(model_dir / "vocab")
    return vocabularies


def _datasets(experiment, vocabularies, train_pairs, dev_pairs, strategy, workers, index):
    """(training batches, dev batches or None). Each worker reads its shard of the corpus."""
    from keras_transformer import data

    batches = dict(
        max_length=experiment.model.max_length,
        tokens_per_batch=experiment.data.tokens_per_batch,
        batch_multiple=strategy.num_replicas_in_sync,
        seed=experiment.training.seed,
    )
    train_dataset = data.make_dataset(
        train_pairs.to_dataset(),
        vocabularies,
        shuffle_buffer=experiment.data.shuffle_buffer,
        shard=(workers, index) if workers > 1 else None,
        **batches,
    )
    # Validation inside fit is skipped across workers: uneven shards of a finite dev set can
    # leave one worker waiting in a collective. The chief's dev BLEU still runs.
    if dev_pairs is None or workers > 1:
        return train_dataset, None
    dev_dataset = data.make_dataset(
        dev_pairs.to_dataset(),
        vocabularies,
        shuffle_buffer=0,
        repeat=False,
        drop_remainder=False,
        **batches,
    )
    return train_dataset, dev_dataset


def _compiled_model(experiment, jit_compile: bool):
    """The model, compiled with the paper's optimizer, schedule and loss (section 5)."""
    import keras

    import keras_transformer as kt

    training = experiment.training
    accumulation = training.gradient_accumulation_steps
    model = kt.build_transformer(experiment.model)
    schedule = kt.schedule.warmup_schedule_for_accumulation(
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


def _callbacks(model_dir: Path, training, is_chief: bool, throughput, bleu):
    """TerminateOnNaN everywhere; the chief also writes the backup, the checkpoints (keeping
    the last ones), TensorBoard logs and the dev BLEU."""
    import keras

    callbacks = [keras.callbacks.TerminateOnNaN(), throughput]
    if not is_chief:
        return callbacks
    callbacks += [
        checkpointing.Backup(model_dir / "backup"),
        checkpointing.Checkpoints(model_dir / "checkpoints", training.keep_checkpoints),
        keras.callbacks.TensorBoard(str(model_dir / "logs")),
    ]
    return callbacks + ([bleu] if bleu else [])


if __name__ == "__main__":
    sys.exit(main())
