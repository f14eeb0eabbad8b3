"""Draw encoder-decoder attention:
`python -m trainers.visualize --model-dir DIR --text "..." --out attention.png`.

Translates the text (beam search), then feeds the translation back through the decoder and
draws, for one decoder layer (the last by default), one heat map per head: which source
pieces each target piece attended to.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from trainers import errors, flags
from trainers.errors import ConfigError
from trainers.run_dir import MODEL, RunDirectory


def parse_args(argv=None) -> argparse.Namespace:
    parser = flags.ArgumentParser(
        prog=flags.prog("trainers.visualize"), description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model-dir", required=True, type=Path)
    parser.add_argument("--model", default=MODEL, help="model file in the directory")
    parser.add_argument("--text", required=True, help="the source sentence")
    parser.add_argument(
        "--out", required=True, type=Path, help="PNG file to write (.png added if it has none)"
    )
    parser.add_argument(
        "--layer",
        type=int,
        default=-1,
        help="decoder layer, 0-based; negative counts from the end (default -1)",
    )
    parser.add_argument(
        "--beam-size",
        type=flags.positive_int,
        help="hypotheses kept per sentence, 1 for greedy search (default: the directory's "
        "decoding.beam_size, as evaluate and export; its length penalty and stopping rule "
        "too)",
    )
    args = parser.parse_args(argv)
    if not args.text.strip():  # its source would be EOS alone, its translation nothing
        parser.error(f"--text {args.text!r}: nothing to translate; give a sentence")
    if args.out.suffix not in ("", ".png"):
        parser.error(f"--out {args.out}: the heat map is a PNG file (.png)")
    if not args.out.suffix:  # as matplotlib names a file without one: PNG, ".png" added
        args.out = args.out.with_name(args.out.name + ".png")
    return args


def cross_attention(model, text: str, layer: int):
    """(source pieces, target pieces, weights [heads, tgt_len, src_len]) for one sentence,
    translated by `model` (a `TransformerSeq2SeqLM`) with its decoding settings."""
    import numpy as np
    import tensorflow as tf

    from keras_transformer.decoding import DecodingPlan
    from keras_transformer.text import BOS_ID

    vocabularies = model.preprocessor.tokenizer.vocabularies
    source_ids = model.preprocessor.generate_preprocess(
        [text], source_prefix=model.decoding.source_prefix
    )["source_ids"]
    settings = model.decoding.replace(n_best=1)  # the best translation's attention
    ids, _ = DecodingPlan.make(settings, vocabularies.target).search(model, source_ids)
    ids = ids.numpy()[0]
    target = ids[: int(np.count_nonzero(ids))]  # the translation, EOS included
    decoder_input = tf.constant([[BOS_ID, *target[:-1]]], tf.int32)
    memory, source_mask = model.encode(source_ids)
    weights = model.decoder.forward(
        model.target_embedding(decoder_input),
        memory,
        encoder_padding_mask=source_mask,
        return_weights=True,
    ).weights
    chosen = np.asarray(weights[layer]["cross_attention"])[0]  # (heads, tgt_len, src_len)

    def pieces(tokenizer, token_ids):
        return [tokenizer.id_to_token(int(i)) for i in token_ids]

    return (
        pieces(vocabularies.source, source_ids.numpy()[0]),
        pieces(vocabularies.target, target),
        chosen,
    )


def draw(source, target, weights, path: Path, title: str) -> None:
    """One heat map per head in a grid, written to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from keras_transformer._files import atomic_write

    heads = len(weights)
    columns = math.ceil(math.sqrt(heads))  # 2 x 2 for 4 heads, 4 x 4 for 16
    rows = math.ceil(heads / columns)
    size = 0.28 * max(len(source), len(target)) + 2
    figure, axes = plt.subplots(rows, columns, figsize=(columns * size, rows * size), squeeze=False)
    for head, axis in enumerate(axes.flat):
        if head >= heads:
            axis.axis("off")
            continue
        axis.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axis.set_xticks(range(len(source)), source, rotation=90, fontsize=8)
        axis.set_yticks(range(len(target)), target, fontsize=8)
        axis.set_title(f"head {head}", fontsize=10)
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda temporary: figure.savefig(temporary, dpi=100))
    plt.close(figure)


@errors.program
def main(argv=None) -> int:
    args = parse_args(argv)
    try:  # the paths first: a mistyped one costs no TensorFlow start-up
        RunDirectory(args.model_dir).check_trained(args.model)
    except ConfigError as error:
        return errors.fail(error)
    try:  # decoding as evaluate and export decode: the directory's settings, the flag over them
        _, model = RunDirectory(args.model_dir).load_task(args.model, beam_size=args.beam_size)
        layers = model.config.num_decoder_layers
        if not -layers <= args.layer < layers:
            raise ConfigError(
                f"--layer={args.layer}: the decoder has {layers} layer{'s' * (layers != 1)}"
                f" (0 to {layers - 1}, or counted from the end: -1 to {-layers})"
            )
    except errors.USER_ERRORS as error:
        return errors.fail(error)
    source, target, weights = cross_attention(model, args.text, args.layer)
    layer = args.layer % model.config.num_decoder_layers
    draw(source, target, weights, args.out, f"encoder-decoder attention, decoder layer {layer}")
    print(
        f"wrote {args.out}: {len(weights)} heads, {len(target)} x {len(source)} pieces "
        f"(beam {model.decoding.beam_size}, length penalty {model.decoding.length_penalty}, "
        f"{model.decoding.stopping} stopping)"
    )
    return errors.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
