"""The peer: the same encoder-decoder Transformer made only of keras-hub's public layers, what
a Keras user would otherwise build. Same flags and JSON schema as `benchmarks.run`, so
`benchmarks.compare` runs both alternately and reports their ratio.

    python -m benchmarks.peer --preset small --mode train --batch-size 32
    python -m benchmarks.peer --preset small --mode decode --cache on --tgt-len 64

The model: `TokenAndPositionEmbedding` (learned positions, `mask_zero`) for each side,
`TransformerEncoder` and `TransformerDecoder` layers (dropout 0.1) and a `Dense` output
layer, at the presets' sizes with their vocabularies (`benchmarks.synthetic.PRESET_VOCAB`).
Training: `train_on_batch` with Adam and a masked cross-entropy on the synthetic batches.
Decoding: greedy, `--cache on` with the decoder layers' key/value caches (the loop unrolled
so the caches keep static shapes), `--cache off` recomputing the whole prefix every step as
the TensorFlow tutorial's translator does; `tgt_len` tokens a sentence. Train tokens_per_s
counts non-padding target tokens; decode counts generated tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.synthetic import (  # noqa: E402
    PRESET_VOCAB,
    add_peer_flags,
    peer_record,
    synthetic_batch,
    timed,
)

SIZES = {  # d_model, heads, d_ff, layers (encoder = decoder): the project's presets
    "tiny": (128, 4, 512, 2),
    "small": (256, 4, 1024, 3),
    "base": (512, 8, 2048, 6),
}


class Peer:
    """The peer's layers and its functional model `{"source_ids", "target_ids"} -> logits`."""

    def __init__(self, vocab: int, d_model: int, heads: int, d_ff: int, layers: int, length: int):
        import keras_hub

        def embedding():
            return keras_hub.layers.TokenAndPositionEmbedding(
                vocab, length, d_model, mask_zero=True
            )

        self.heads, self.d_model = heads, d_model
        self.source_embedding, self.target_embedding = embedding(), embedding()
        self.encoders = [
            keras_hub.layers.TransformerEncoder(d_ff, heads, dropout=0.1) for _ in range(layers)
        ]
        self.decoders = [
            keras_hub.layers.TransformerDecoder(d_ff, heads, dropout=0.1) for _ in range(layers)
        ]
        self.head = keras.layers.Dense(vocab)
        source = keras.Input((None,), dtype="int32", name="source_ids")
        target = keras.Input((None,), dtype="int32", name="target_ids")
        memory = self.encode(source)
        y = self.target_embedding(target)
        for decoder in self.decoders:
            y = decoder(y, memory)
        self.model = keras.Model(
            {"source_ids": source, "target_ids": target}, self.head(y), name="keras_hub_peer"
        )

    def encode(self, source):
        x = self.source_embedding(source)
        for encoder in self.encoders:
            x = encoder(x)
        return x

    @classmethod
    def preset(cls, name: str, src_len: int, tgt_len: int) -> Peer:
        """The peer at a preset's sizes, with position tables twice the longest length."""
        return cls(PRESET_VOCAB[name], *SIZES[name], length=max(src_len, tgt_len) * 2)


def masked_loss(y_true, y_pred):
    """Cross-entropy over the non-padding labels (id 0 is padding), backend-neutral."""
    loss = keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
    mask = keras.ops.cast(keras.ops.not_equal(y_true, 0), loss.dtype)
    return keras.ops.sum(loss * mask) / keras.ops.maximum(keras.ops.sum(mask), 1.0)


def greedy_decoder(peer: Peer, steps: int, cache: bool, jit_compile: bool):
    """`decode(source_ids) -> ids [batch, steps]`, greedy, from start id 1 (TensorFlow)."""
    import tensorflow as tf

    depth = peer.d_model // peer.heads

    def start(source):
        memory = peer.encode(source)
        return memory, source != 0, tf.ones([tf.shape(source)[0], 1], tf.int32)

    @tf.function(jit_compile=False)
    def without_cache(source):
        memory, mask, ids = start(source)
        for _ in tf.range(steps):  # the whole prefix again at every step
            tf.autograph.experimental.set_loop_options(
                shape_invariants=[(ids, tf.TensorShape([None, None]))]
            )
            y = peer.target_embedding(ids)
            for decoder in peer.decoders:
                y = decoder(y, memory, encoder_padding_mask=mask)
            token = tf.argmax(peer.head(y[:, -1]), -1, output_type=tf.int32)
            ids = tf.concat([ids, token[:, None]], 1)
        return ids[:, 1:]

    @tf.function(jit_compile=jit_compile)
    def with_cache(source):
        memory, mask, token = start(source)
        batch = tf.shape(source)[0]
        self_caches = [tf.zeros([batch, 2, steps, peer.heads, depth]) for _ in peer.decoders]
        cross_caches = [
            tf.zeros([batch, 2, tf.shape(source)[1], peer.heads, depth]) for _ in peer.decoders
        ]
        outputs = []
        for t in range(steps):  # unrolled: the caches keep static shapes
            embedded = peer.target_embedding.token_embedding(token)
            y = embedded + peer.target_embedding.position_embedding(embedded, start_index=t)
            for i, decoder in enumerate(peer.decoders):
                y, self_caches[i], cross_caches[i] = decoder(
                    y,
                    memory,
                    encoder_padding_mask=mask,
                    self_attention_cache=self_caches[i],
                    self_attention_cache_update_index=t,
                    cross_attention_cache=cross_caches[i],
                    cross_attention_cache_update_index=0 if t == 0 else None,
                )
            token = tf.argmax(peer.head(y[:, -1:]), -1, output_type=tf.int32)
            outputs.append(token)
        return tf.concat(outputs, 1)

    return with_cache if cache else without_cache


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_peer_flags(parser, SIZES, ["train", "decode"])
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    vocab = PRESET_VOCAB[args.preset]
    peer = Peer.preset(args.preset, args.src_len, args.tgt_len)
    jit_compile = args.jit_compile == "on"
    fields = dict(
        impl="keras_hub",
        preset=args.preset,
        mode=args.mode,
        params=int(peer.model.count_params()),
        batch_size=args.batch_size,
        src_len=args.src_len,
        tgt_len=args.tgt_len,
        jit_compile=jit_compile,
    )
    if args.mode == "train":
        optimizer = keras.optimizers.Adam(1e-4, beta_2=0.98, epsilon=1e-9)
        peer.model.compile(optimizer=optimizer, loss=masked_loss, jit_compile=jit_compile)
        batches = [
            synthetic_batch(rng, vocab, args.batch_size, args.src_len, args.tgt_len)
            for _ in range(8)
        ]
        counter = iter(range(10**9))

        def step():
            inputs, labels = batches[next(counter) % len(batches)]
            peer.model.train_on_batch(inputs, labels)

        times, _ = timed(step, args.warmup, args.steps)
        tokens = statistics.mean(float(np.count_nonzero(labels)) for _, labels in batches)
        record = peer_record(times, tokens, cache=None, **fields)
        record["sentences_per_s"] = None
    else:
        inputs, _ = synthetic_batch(rng, vocab, args.batch_size, args.src_len, args.tgt_len)
        decode = greedy_decoder(peer, args.tgt_len, args.cache == "on", jit_compile)
        source = inputs["source_ids"]
        times, _ = timed(lambda: np.asarray(decode(source)), 1, max(3, args.steps // 5))
        record = peer_record(
            times, args.batch_size * args.tgt_len, cache=args.cache == "on", **fields
        )
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main()
