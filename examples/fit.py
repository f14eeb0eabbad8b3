"""Train a translation model with plain `model.fit` on a TSV file, through the library alone.

    python examples/fit.py                                   # the bundled English-Spanish Bible
    python examples/fit.py --train my.tsv --dev my_dev.tsv \\
        --source-column de --target-column en --steps 4000 --out runs/my-model

The path of a `model.fit` user: read the parallel text (`kt.corpus`), learn a SentencePiece
vocabulary (`kt.text`), build the `tf.data` pipeline (`kt.data`), build and compile the
`tiny` preset with the paper's loss and schedule (sections 5.3 and 5.4), `model.fit`, save a
`.keras` file, reload it with `keras.saving.load_model` (no `custom_objects`), check that it
gives the same logits, and translate with the reloaded model (`kt.evaluation.Translator`).
No `trainers/` module is used. `main` returns the figures it prints.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import keras
import numpy as np

import keras_transformer as kt

DATA = Path(__file__).resolve().parent.parent / "data" / "bible-en-es"
SENTENCES = ["In the beginning, God created the heavens and the earth.", "God is love."]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=Path, default=DATA / "train.tsv.xz", help="TSV file")
    parser.add_argument("--dev", type=Path, default=DATA / "dev.tsv.xz", help="TSV file")
    parser.add_argument("--source-column", default="en")
    parser.add_argument("--target-column", default="es")
    parser.add_argument("--train-pairs", type=int, help="use the first N pairs (default: all)")
    parser.add_argument("--vocab-size", type=int, default=2000, help="SentencePiece pieces")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps in all")
    parser.add_argument("--steps-per-epoch", type=int, default=200, help="steps between dev losses")
    parser.add_argument("--warmup-steps", type=int, default=200)
    parser.add_argument("--tokens-per-batch", type=int, default=2048)
    parser.add_argument("--max-length", type=int, default=128, help="longest sequence (tokens)")
    parser.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--beam-size", type=int, default=4, help="1 = greedy search")
    parser.add_argument("--out", type=Path, default=Path("runs/example-fit"), help="output folder")
    parser.add_argument("--sentence", action="append", help="to translate (repeatable)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    if args.steps % args.steps_per_epoch:
        parser.error(f"--steps={args.steps} is not a multiple of --steps-per-epoch")
    return args


def save_and_reload(model, path: Path, inputs) -> tuple[keras.Model, float]:
    """Saves `model` as a `.keras` file and loads it back with `keras.saving.load_model`,
    without `custom_objects` (importing `keras_transformer` registered its classes). Returns
    the reloaded model and the largest difference between the two models' logits on
    `inputs`; raises RuntimeError when they differ."""
    model.save(path)
    reloaded = keras.saving.load_model(path)
    difference = float(np.max(np.abs(model(inputs) - reloaded(inputs))))
    if difference > 1e-5:
        raise RuntimeError(
            f"the reloaded model's logits differ from the saved one's by {difference}"
        )
    return reloaded, difference


def main(argv=None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    # Seed first: seeding later would destroy the tokenizers' in-graph SentencePiece models.
    keras.utils.set_random_seed(args.seed)
    columns = (args.source_column, args.target_column)
    train = kt.corpus.read_tsv(args.train, *columns)
    if args.train_pairs:
        train = train.take(args.train_pairs)
    dev = kt.corpus.read_tsv(args.dev, *columns)
    vocabularies = kt.text.Vocabularies.train(
        train.sources, train.targets, args.vocab_size, seed=args.seed
    )
    vocabularies.save(args.out / "vocab")  # the model is useless without its vocabulary

    batching = dict(max_length=args.max_length, tokens_per_batch=args.tokens_per_batch)
    train_batches = kt.data.make_dataset(
        train.to_dataset(), vocabularies, seed=args.seed, **batching
    )
    # The dev set once, in order: no shuffling, no repeat, no partial batch dropped (pairs
    # longer than max_length still are, as in training).
    dev_batches = kt.data.make_dataset(dev.to_dataset(), vocabularies, training=False, **batching)

    # The learned vocabulary may be smaller than asked: the model takes its actual size.
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=vocabularies.target.vocabulary_size(),
        max_length=args.max_length,
        norm_first=True,  # pre-norm: stable without a long warmup
        dropout=0.0,  # a pass or two over the data: nothing to regularize yet
    )
    model = kt.build_transformer(config)
    model.compile(
        optimizer=keras.optimizers.Adam(
            kt.WarmupSchedule(config.d_model, warmup_steps=args.warmup_steps),
            beta_1=0.9,
            beta_2=0.98,
            epsilon=1e-9,
        ),
        loss=kt.losses.LabelSmoothedCrossEntropy(0.1),
        metrics=[kt.metrics.MaskedAccuracy()],
        jit_compile=args.jit_compile,
    )
    history = model.fit(
        train_batches,  # repeats forever: steps_per_epoch ends each epoch
        epochs=args.steps // args.steps_per_epoch,
        steps_per_epoch=args.steps_per_epoch,
        validation_data=dev_batches,
        verbose=2,
    ).history

    path = args.out / "model.keras"
    inputs, _ = next(iter(dev_batches))
    reloaded, difference = save_and_reload(model, path, inputs)

    sentences = args.sentence or SENTENCES
    translator = kt.evaluation.Translator(reloaded, vocabularies, beam_size=args.beam_size)
    figures = {
        "train_pairs": len(train),
        "dev_pairs": len(dev),
        "vocab_size": config.vocab_size,
        "parameters": model.count_params(),
        "steps": int(model.optimizer.iterations.numpy()),
        "first_epoch_loss": history["loss"][0],
        "final_loss": history["loss"][-1],
        "dev_loss": history["val_loss"][-1],
        "dev_accuracy": history["val_masked_accuracy"][-1],
        "reloaded_max_logit_difference": difference,
        "model": str(path),
        "translations": dict(zip(sentences, translator.translate(sentences), strict=True)),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(figures, indent=2, ensure_ascii=False))
    return figures


if __name__ == "__main__":
    main()
