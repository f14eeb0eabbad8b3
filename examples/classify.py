"""An encoder-only (BERT-like) classifier made of the library's layers: which testament, Old
or New, an English verse of the bundled Bible corpus comes from.

The layers are reused outside translation: `kt.layers.TransformerEmbedding` (learned
positions), `kt.layers.Encoder` (pre-norm, GELU), a mean over the real tokens (Keras's
`GlobalAveragePooling1D` with the padding mask) and a `keras.layers.Dense` head, trained with
`model.fit`. The corpus is split by whole books (dev: Esther and Galatians; test: Proverbs and
I John), so held-out accuracy is measured on books never seen in training. It is printed
beside the majority-class baseline (always answering the testament most frequent in the
training split) and beside the balanced accuracy (the mean of the two testaments' recalls,
which a constant answer cannot lift above one half). The subword vocabulary is a
SentencePiece model learned through `kt.text` on the training verses.

    python -m examples.classify --out runs/classify
"""

from __future__ import annotations

import argparse
import csv
import json
import lzma
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt

DATA = Path(__file__).resolve().parent.parent / "data" / "bible-en-es"
LABELS = ("Old Testament", "New Testament")
NEW_TESTAMENT = {
    "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "I Corinthians", "II Corinthians",
    "Galatians", "Ephesians", "Philippians", "Colossians", "I Thessalonians",
    "II Thessalonians", "I Timothy", "II Timothy", "Titus", "Philemon", "Hebrews", "James",
    "I Peter", "II Peter", "I John", "II John", "III John", "Jude", "Revelation of John",
}  # fmt: skip


def read_verses(data: Path, split: str) -> tuple[list[str], np.ndarray]:
    """The English verses of a split and their labels, int32 `[verses]` (1 = New Testament)."""
    with lzma.open(data / f"{split}.tsv.xz", "rt", encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE))
    labels = [row["book"] in NEW_TESTAMENT for row in rows]
    return [row["en"] for row in rows], np.array(labels, "int32")


def encode(tokenizer, texts: list[str], length: int) -> np.ndarray:
    """Token ids int32 `[len(texts), length]`, cut at `length` and 0-padded."""
    return keras.utils.pad_sequences(
        tokenizer(texts), length, "int32", padding="post", truncating="post"
    )


def build_classifier(
    vocab_size: int,
    *,
    max_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    dropout: float,
) -> keras.Model:
    """Token ids int32 `[batch, len]` (0 = padding) to class logits `[batch, len(LABELS)]`."""
    ids = keras.Input((None,), dtype="int32", name="ids")
    mask = kt.ops.padding_mask(ids)  # (batch, len), True at real tokens
    x = kt.layers.TransformerEmbedding(
        vocab_size, d_model, max_length=max_length, positional="learned", dropout=dropout
    )(ids)  # (batch, len, d_model)
    x = kt.layers.Encoder(
        num_layers, num_heads, d_ff, dropout=dropout, activation="gelu", norm_first=True
    )(x, padding_mask=mask)
    pooled = keras.layers.GlobalAveragePooling1D()(x, mask=mask)  # (batch, d_model)
    logits = keras.layers.Dense(len(LABELS), name="head")(pooled)
    return keras.Model(ids, logits, name="testament_classifier")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the bible-en-es directory")
    parser.add_argument("--train-sentences", type=int, default=None, help="a random sample")
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--max-length", type=int, default=64, help="tokens kept a verse")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="save model, vocabulary, figures")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(args.seed)  # before the tokenizer: it clears TF's kernel cache
    texts, labels = read_verses(args.data, "train")
    if args.train_sentences is not None:
        keep = np.random.default_rng(args.seed).permutation(len(texts))[: args.train_sentences]
        texts, labels = [texts[i] for i in keep], labels[keep]
    proto = kt.text.train_sentencepiece(texts, args.vocab_size, seed=args.seed)
    tokenizer = kt.text.make_tokenizer(proto)

    model = build_classifier(
        tokenizer.vocabulary_size(),
        max_length=args.max_length,
        d_model=args.d_model,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        d_ff=args.d_ff,
        dropout=args.dropout,
    )
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, args.steps, warmup_target=args.learning_rate, warmup_steps=args.steps // 10
    )
    model.compile(
        optimizer=keras.optimizers.Adam(schedule),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    train = tf.data.Dataset.from_tensor_slices((encode(tokenizer, texts, args.max_length), labels))
    train = train.shuffle(len(texts), seed=args.seed).repeat().batch(args.batch_size)
    # Its variables now, not in fit's first trace, which TensorFlow would then trace twice.
    model.optimizer.build(model.trainable_variables)
    model.fit(train, epochs=1, steps_per_epoch=args.steps, verbose=2, shuffle=False)  # it shuffles

    majority = int(np.bincount(labels).argmax())  # the baseline's answer, from training
    figures = {"train_verses": len(texts), "vocab_size": tokenizer.vocabulary_size()}
    for split in ("dev", "test"):
        split_texts, split_labels = read_verses(args.data, split)
        logits = model.predict(encode(tokenizer, split_texts, args.max_length), verbose=0)
        correct = logits.argmax(-1) == split_labels  # (verses,)
        figures[f"{split}_accuracy"] = float(np.mean(correct))
        figures[f"{split}_baseline"] = float(np.mean(split_labels == majority))
        # The mean of the two testaments' recalls: a constant answer scores one half.
        recalls = [np.mean(correct[split_labels == label]) for label in range(len(LABELS))]
        figures[f"{split}_balanced_accuracy"] = float(np.mean(recalls))
    for name, value in figures.items():
        print(f"{name}: {value:.4f}" if isinstance(value, float) else f"{name}: {value}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        model.save(args.out / "classifier.keras")
        (args.out / "vocab.model").write_bytes(proto)
        (args.out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
