"""Translate lines with an exported SavedModel:
`python -m trainers.translate --saved-model saved_models/NAME [--input FILE]`.

Reads sentences one a line (stdin by default), writes one translation a line (stdout by
default), in batches. It needs nothing but tensorflow and tensorflow_text, like TF Serving:
the tokenizer and the beam search are inside the SavedModel. --saved-model is either a
version folder or the model folder, whose highest version is used.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trainers.translate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--saved-model", required=True, type=Path)
    parser.add_argument("--input", type=Path, help="one sentence a line (default: stdin)")
    parser.add_argument("--output", type=Path, help="default: stdout")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--with-scores", action="store_true", help="write SCORE<TAB>TRANSLATION lines"
    )
    return parser.parse_args(argv)


def resolve_version(path: Path) -> Path:
    """A version folder: `path` itself if it holds saved_model.pb, else its highest version."""
    if (path / "saved_model.pb").exists():
        return path
    versions = sorted((p for p in path.glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
    if not versions:
        raise FileNotFoundError(f"{path}: no saved_model.pb and no version folder in it")
    return versions[-1]


def batches(lines, size: int):
    batch = []
    for line in lines:
        batch.append(line.rstrip("\n"))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.batch_size < 1:
        print(f"error: --batch-size={args.batch_size} must be >= 1", file=sys.stderr)
        return 2
    try:
        version = resolve_version(args.saved_model)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    translate = tf.saved_model.load(str(version)).signatures["serving_default"]
    if args.input:
        source = open(args.input, encoding="utf-8", errors="surrogateescape")
    else:
        source = sys.stdin
        source.reconfigure(encoding="utf-8", errors="surrogateescape")
    sink = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    sentences, started = 0, time.perf_counter()
    with source, sink:
        for batch in batches(source, args.batch_size):
            # Bytes as read: undecodable input reaches the model, which replaces it with U+FFFD.
            text = tf.constant([line.encode("utf-8", "surrogateescape") for line in batch])
            result = translate(text=text)
            for score, translation in zip(
                result["score"].numpy(), result["translation"].numpy(), strict=True
            ):
                line = translation.decode("utf-8")
                sink.write(f"{score:.4f}\t{line}\n" if args.with_scores else line + "\n")
            sink.flush()
            sentences += len(batch)
    seconds = time.perf_counter() - started
    print(
        f"translated {sentences} sentence{'' if sentences == 1 else 's'} in {seconds:.1f} s "
        f"({sentences / max(seconds, 1e-9):.1f} sentences/s, after loading the model)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
