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

from trainers import runtime
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
    from keras_transformer.corpus import CorpusError  # importing TF starts no device yet
    from trainers.experiment import load_experiment

    try:
        if args.cpu_devices:
            runtime.split_cpu(args.cpu_devices)  # before anything else touches TensorFlow
        experiment = load_experiment(args.config, args.set)
        summary = train(experiment, args.model_dir, args.strategy, args.verbose)
    except (ConfigError, CorpusError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if summary.get("stopped_early"):
        print(f"error: {summary['stopped_early']}", file=sys.stderr)
        return 1
    return 0


def train(experiment, model_dir: Path, strategy_kind: str = "default", verbose: int = 1) -> dict:
    """Runs (or resumes) the experiment in `model_dir` and returns the training summary."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer import data, text
    from trainers import callbacks as cb
    from trainers import model_dir as md
    from trainers.experiment import read_split

    model_dir = Path(model_dir)
    config, training = experiment.data, experiment.training
    resuming = md.check_owner(model_dir, experiment)
    if resuming and (model_dir / md.SUMMARY).exists():
        summary = json.loads((model_dir / md.SUMMARY).read_text())
        if summary.get("steps") == training.steps and not summary.get("stopped_early"):
            print(f"{model_dir} already holds this run, trained for {training.steps} steps")
            return summary
    # Every corpus is read and checked before anything is written.
    train_pairs, dev_pairs = read_split(config, "train"), read_split(config, "dev")
    print(
        f"training pairs: {len(train_pairs)} from {train_pairs.origin} "
        f"({train_pairs.skipped_empty} empty pairs skipped)"
    )
    md.check_writable(model_dir)

    strategy = runtime.make_strategy(strategy_kind)
    workers, worker_index, is_chief = runtime.worker_info(strategy)
    replicas = strategy.num_replicas_in_sync
    jit_compile = runtime.resolve_jit_compile(training.jit_compile, strategy)
    keras.utils.set_random_seed(training.seed)
    if training.deterministic:
        tf.config.experimental.enable_op_determinism()

    vocab_dir = model_dir / "vocab"
    if resuming or not is_chief:
        if not is_chief:
            md.wait_for(model_dir / md.EXPERIMENT)
        vocabularies = text.Vocabularies.load(vocab_dir)
    else:
        print(f"learning a {config.vocab_size}-piece SentencePiece vocabulary...", flush=True)
        vocabularies = text.Vocabularies.train(
            train_pairs.sources,
            train_pairs.targets,
            config.vocab_size,
            shared=config.shared_vocab,
            model_type=config.vocab_model_type,
            max_sentences=config.vocab_max_sentences,
            seed=training.seed,
        )
        vocabularies.save(vocab_dir)
    experiment = experiment.with_vocab_sizes(
        vocabularies.source.vocabulary_size(), vocabularies.target.vocabulary_size()
    )
    md.check_vocabulary(experiment.model, vocabularies, model_dir)
    if is_chief and not resuming:
        md.save_experiment(model_dir, experiment)

    max_length = experiment.model.max_length
    lengths = data.length_report(train_pairs.to_dataset(), vocabularies, max_length=max_length)
    print(
        f"over-long pairs (> {max_length} tokens) skipped: {lengths['too_long']} of "
        f"{lengths['pairs']}; kept {lengths['target_tokens']} target tokens"
    )
    batches = dict(
        max_length=max_length,
        tokens_per_batch=config.tokens_per_batch,
        batch_multiple=replicas,
        seed=training.seed,
        deterministic=training.deterministic,
    )
    train_dataset = data.make_dataset(
        train_pairs.to_dataset(),
        vocabularies,
        shuffle_buffer=config.shuffle_buffer,
        shard=(workers, worker_index) if workers > 1 else None,
        **batches,
    )
    dev_dataset = None
    # Validation inside fit is skipped across workers: uneven shards of a finite dev set can
    # leave one worker waiting in a collective. The chief's dev BLEU still runs.
    if dev_pairs is not None and workers == 1:
        dev_dataset = data.make_dataset(
            dev_pairs.to_dataset(),
            vocabularies,
            shuffle_buffer=0,
            repeat=False,
            drop_remainder=False,
            **batches,
        )

    accumulation = training.gradient_accumulation_steps
    with strategy.scope():
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
    print(runtime.describe(strategy), f"jit_compile={jit_compile}", flush=True)

    throughput = cb.Throughput()
    # Each worker keeps its own backup (all restart together); only the chief's is the run's.
    backup_dir = model_dir / "backup"
    if not is_chief:
        backup_dir = model_dir / "workers" / f"worker-{worker_index}" / "backup"
    callbacks = [
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.BackupAndRestore(str(backup_dir), save_freq="epoch"),
        throughput,
    ]
    bleu = None
    if is_chief:
        checkpoints = model_dir / "checkpoints"
        checkpoints.mkdir(exist_ok=True)
        callbacks += [
            keras.callbacks.ModelCheckpoint(
                str(checkpoints / "ckpt-{epoch:05d}.weights.h5"), save_weights_only=True
            ),
            cb.KeepLastCheckpoints(checkpoints, md.CHECKPOINT_PATTERN, training.keep_checkpoints),
            keras.callbacks.TensorBoard(str(model_dir / "logs")),
        ]
        if dev_pairs is not None:
            limit = training.bleu_max_sentences or len(dev_pairs)
            bleu = cb.BleuCallback(
                vocabularies,
                dev_pairs.sources[:limit],
                dev_pairs.targets[:limit],
                every_steps=training.bleu_every_steps,
                beam_size=training.bleu_beam_size,
                log_dir=model_dir / "logs" / "bleu",
            )
            callbacks.append(bleu)

    started = time.perf_counter()
    history = model.fit(
        train_dataset,
        epochs=training.steps // training.steps_per_epoch,
        steps_per_epoch=training.steps_per_epoch * accumulation,
        validation_data=dev_dataset,
        shuffle=False,  # the pipeline shuffles
        callbacks=callbacks,
        verbose=verbose,
    )
    seconds = time.perf_counter() - started
    steps = int(model.optimizer.iterations.numpy())
    losses = history.history.get("loss", [])
    summary = {
        "strategy": strategy_kind,
        "replicas": replicas,
        "workers": workers,
        "jit_compile": jit_compile,
        "steps": steps,
        "planned_steps": training.steps,
        "initial_loss": throughput.initial_loss,
        "final_loss": losses[-1] if losses else None,
        "final_dev_loss": history.history.get("val_loss", [None])[-1],
        "tokens_per_second": throughput.tokens_per_second(),
        "train_seconds": round(seconds, 1),
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


if __name__ == "__main__":
    sys.exit(main())
