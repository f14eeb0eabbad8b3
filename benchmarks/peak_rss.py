"""The peak resident memory of a serving process: one artifact loaded alone in a new process,
translating sentences as `benchmarks.serve` sends them, and nothing else imported.

    python -m benchmarks.peak_rss KIND PATH [--beam N] [--threads N] < sentences.json

KIND is `saved_model` (a version folder, its `serving_xla` signature, with `tensorflow` and
`tensorflow_text` imported as TF Serving would load it), `ctranslate2` (a directory of
`trainers.export --format ctranslate2`) or `litert` (a directory of `--format litert`): the
last two through `keras_transformer.serving`'s translators, loaded without Keras or
TensorFlow as `trainers.translate` loads them. Reads a JSON list of sentences from stdin,
translates them in batches of 32, then one at a time, and prints one JSON object:
`{"peak_rss_mb": ..., "kind": ..., "sentences": ...}`. `benchmarks.serve --rss` runs it for
each artifact it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from pathlib import Path

KINDS = ("saved_model", "ctranslate2", "litert")


def translator(kind: str, path: str, beam: int, threads: int):
    """sentences -> translations, for one artifact, importing only what its kind needs."""
    if kind == "saved_model":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (its ops, which the SavedModel uses)

        if threads:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        serve = tf.saved_model.load(path).signatures["serving_xla"]
        return lambda lines: serve(text=tf.constant(lines))["translation"].numpy()
    from keras_transformer import serving

    if kind == "litert":
        engine = serving.LiteRTTranslator(path, threads=threads)
        return lambda lines: engine.translate(lines)
    engine = serving.CTranslate2Translator(path, threads=threads or 1)
    return lambda lines: engine.translate(lines, beam_size=beam)


def peak_mib() -> float:
    """This process's peak resident memory in MiB: Linux's VmHWM, the high-water mark of its
    own memory since it started. Not `getrusage`'s `ru_maxrss`, which Linux carries over
    `execve` from the process that forked it (a large parent would show as this one)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("path")
    parser.add_argument(
        "--beam", type=int, default=1, help="CTranslate2's beam (the others: their export's)"
    )
    parser.add_argument("--threads", type=int, default=0, help="0: the engine's default")
    args = parser.parse_args(argv)
    sentences = json.load(sys.stdin)
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        parser.error("stdin must hold a JSON list of strings")
    translate = translator(args.kind, args.path, args.beam, args.threads)
    for start in range(0, len(sentences), 32):
        translate(sentences[start : start + 32])
    for sentence in sentences:
        translate([sentence])
    print(
        json.dumps(
            {"peak_rss_mb": round(peak_mib(), 1), "kind": args.kind, "sentences": len(sentences)}
        )
    )


if __name__ == "__main__":
    main()
