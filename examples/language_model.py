"""A decoder-only (GPT-like) language model made of the library's layers, trained on the
Spanish side of the bundled Bible corpus (Reina-Valera 1909), with cached sampling.

The layers are reused outside translation: `kt.layers.TransformerEmbedding` embeds the tokens
and, called with `reverse=True`, is the tied output projection (paper 3.4); `kt.layers.Decoder`
built without an encoder output is a stack of masked self-attention and feed-forward layers
only. `model.fit` minimises the next-token cross-entropy over real tokens (padding masked);
the script prints the perplexity on the dev split (whole books unseen in training) beside
that of a uniform guess over the vocabulary, and continues prompts of different lengths, in
one batch, with the library's generation (`kt.decoding.generate`: greedy, sampling with
temperature, top-k and top-p, or beam search, over the decoder's key/value cache).

    python -m examples.language_model --out runs/language_model
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
from keras_transformer.text import BOS_ID, EOS_ID, UNK_ID

DATA = Path(__file__).resolve().parent.parent / "data" / "bible-en-es"
# Of different lengths, generated in one batch.
DEFAULT_PROMPTS = ["Y dijo", "En el principio creó Dios", "Y respondiendo Jesús, les dijo"]


def read_verses(data: Path, split: str) -> list[str]:
    """The Spanish verses of a split."""
    with lzma.open(data / f"{split}.tsv.xz", "rt", encoding="utf-8", newline="") as file:
        return [row["es"] for row in csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE)]


def make_dataset(
    tokenizer, texts: list[str], max_length: int, batch_size: int, *, seed: int | None = None
) -> tf.data.Dataset:
    """Batches of (BOS + verse, verse + EOS): int32 `[batch, len]` inputs and next-token
    labels, cut at `max_length` tokens and 0-padded to the longest of the batch. With a
    `seed` (training) the verses are shuffled and repeated."""
    ids = [[BOS_ID, *tokens, EOS_ID][: max_length + 1] for tokens in tokenizer(texts)]
    dataset = tf.data.Dataset.from_tensor_slices(tf.ragged.constant(ids))
    if seed is not None:
        dataset = dataset.shuffle(len(ids), seed=seed).repeat()
    dataset = dataset.ragged_batch(batch_size)  # (batch, None)
    return dataset.map(lambda ids: (ids[:, :-1].to_tensor(), ids[:, 1:].to_tensor()))


def build_language_model(
    vocab_size: int,
    *,
    max_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    dropout: float,
) -> keras.Model:
    """Token ids int32 `[batch, len]` (0 = padding) to next-token logits float32
    `[batch, len, vocab_size]`. Its layers are named "embedding" and "decoder"."""
    ids = keras.Input((None,), dtype="int32", name="ids")
    embedding = kt.layers.TransformerEmbedding(
        vocab_size,
        d_model,
        max_length=max_length,
        positional="learned",
        dropout=dropout,
        name="embedding",
    )
    decoder = kt.layers.Decoder(
        num_layers,
        num_heads,
        d_ff,
        dropout=dropout,
        activation="gelu",
        norm_first=True,
        name="decoder",
    )
    hidden = decoder(embedding(ids), padding_mask=kt.ops.padding_mask(ids))  # no cross-attention
    logits = embedding(hidden, reverse=True)  # (batch, len, vocab): x E^T
    return keras.Model(ids, logits, name="language_model")


def continue_prompts(
    model: keras.Model,
    tokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int,
    method: str,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int,
) -> list[str]:
    """Each prompt continued until EOS or `max_new_tokens` tokens, all prompts in one batch
    whatever their lengths (`kt.decoding.generate`: left padding inside, the decoder's
    key/value cache, one compiled loop). Sampling draws from softmax(logits / temperature)
    over the `top_k` likeliest tokens (0: all) within the nucleus of mass `top_p`."""
    prompt_ids = [[BOS_ID, *np.asarray(tokens).tolist()] for tokens in tokenizer(prompts)]
    continuations, _ = kt.decoding.generate(
        model,
        prompt_ids,  # lists of different lengths
        max_new_tokens=max_new_tokens,
        method=method,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        never_ids=(UNK_ID, BOS_ID),
    )
    rows = [
        [*prompt, *(int(t) for t in row if t != 0)]
        for prompt, row in zip(prompt_ids, np.asarray(continuations), strict=True)
    ]
    return kt.text.detokenize(tokenizer, kt.decoding.language_model.prompt_tensor(rows))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the bible-en-es directory")
    parser.add_argument("--train-sentences", type=int, default=None, help="a random sample")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--max-length", type=int, default=128, help="tokens a sequence")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=3)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--prompt",
        action="append",
        help=f"a prompt to continue (repeatable); defaults to {DEFAULT_PROMPTS}",
    )
    parser.add_argument("--samples", type=int, default=1, help="continuations a prompt")
    parser.add_argument("--method", choices=kt.decoding.language_model.METHODS, default="sample")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="save model, vocabulary, figures")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(args.seed)  # before the tokenizer: it clears TF's kernel cache
    texts = read_verses(args.data, "train")
    if args.train_sentences is not None:
        keep = np.random.default_rng(args.seed).permutation(len(texts))[: args.train_sentences]
        texts = [texts[i] for i in keep]
    proto = kt.text.train_sentencepiece(texts, args.vocab_size, seed=args.seed)
    tokenizer = kt.text.make_tokenizer(proto)
    vocab_size = tokenizer.vocabulary_size()

    model = build_language_model(
        vocab_size,
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
        loss=kt.losses.LabelSmoothedCrossEntropy(label_smoothing=0.0),  # padding masked
        metrics=[kt.metrics.Perplexity()],
    )
    train = make_dataset(tokenizer, texts, args.max_length, args.batch_size, seed=args.seed)
    # Its variables now, not in fit's first trace, which TensorFlow would then trace twice.
    model.optimizer.build(model.trainable_variables)
    model.fit(train, steps_per_epoch=args.steps, verbose=2, shuffle=False)  # it shuffles itself
    dev = make_dataset(tokenizer, read_verses(args.data, "dev"), args.max_length, 64)
    perplexity = model.evaluate(dev, return_dict=True, verbose=0)["perplexity"]
    figures = {
        "train_verses": len(texts),
        "vocab_size": vocab_size,
        "dev_perplexity": float(perplexity),
        "uniform_perplexity": float(vocab_size),
        "samples": continue_prompts(
            model,
            tokenizer,
            [prompt for prompt in args.prompt or DEFAULT_PROMPTS for _ in range(args.samples)],
            max_new_tokens=min(args.max_new_tokens, args.max_length - 1),
            method=args.method,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
        ),
    }
    for name, value in figures.items():
        print(f"{name}: {value:.2f}" if isinstance(value, float) else f"{name}: {value}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        model.save(args.out / "language_model.keras")
        (args.out / "vocab.model").write_bytes(proto)
        (args.out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
