"""One request at a time through several exports, in alternating rounds: each export's p50 and
p95 milliseconds a request (NumPy's percentiles), milliseconds a sentence, and its outputs'
lengths in characters, printed so that a reader can see whether two exports ran the same
steps (nothing checks it: exports of different weights may well differ).

    python -m benchmarks.exports --sentences 8 --rounds 3 --threads 2 \\
        litert-int8=on_device/opus-int8 ctranslate2-int8=ct2/opus-int8
    python -m benchmarks.exports --sentences 64 --batch 32 ...   # requests of 32 verses

Each argument is NAME=PATH, or NAME=PATH=BEAM for an export whose beam size is a call's own
(CTranslate2; a LiteRT file's search is in the file). Every export opens with
`kt.serving.open(PATH, threads=THREADS)` and translates one warm-up sentence; then each round
sends the first --sentences test verses, one request each (or `--batch` verses a request),
to every export in turn, the order
reversed every other round, so that a drifting machine slows all alike. Run it with nothing
else running; figures of two machines are not compared.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from pathlib import Path

import numpy as np

TEST = Path(__file__).resolve().parent.parent / "data" / "bible-en-es" / "test.tsv.xz"


def measure(exports: dict, sources: list[str], rounds: int, batch: int = 1) -> dict:
    """`{name: (milliseconds of every request, output lengths in characters)}`, requests of
    `batch` sentences (the last of a round may hold fewer)."""
    times = {name: [] for name in exports}
    lengths = {name: [] for name in exports}
    requests = [sources[i : i + batch] for i in range(0, len(sources), batch)]
    for turn in range(rounds):
        for name in list(exports) if turn % 2 == 0 else list(exports)[::-1]:
            translator, options = exports[name]
            for request in requests:
                start = time.perf_counter()
                answers = translator.translate(request, **options)
                times[name].append(1000 * (time.perf_counter() - start))
                if turn == 0:
                    for found in answers:
                        best = found[0] if isinstance(found, list) else found
                        lengths[name].append(len(getattr(best, "text", str(best))))
    return {name: (times[name], lengths[name]) for name in exports}


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.exports",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
    )
    parser.add_argument("exports", nargs="+", help="NAME=PATH or NAME=PATH=BEAM")
    parser.add_argument("--sentences", type=int, default=8, help="test verses a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--batch", type=int, default=1, help="test verses a request (at most --sentences)"
    )
    parser.add_argument(
        "--threads", type=int, default=2, help="each runtime's threads (0: its default)"
    )
    args = parser.parse_args(argv)
    for flag in ("sentences", "rounds", "batch"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag}={getattr(args, flag)} must be >= 1")
    if args.batch > args.sentences:  # a request would hold fewer verses than the row says
        parser.error(
            f"--batch={args.batch} is more than --sentences={args.sentences}: a request holds "
            "at most the verses of a round"
        )
    if args.threads < 0:
        parser.error(f"--threads={args.threads} must be >= 0 (0: each runtime's default)")
    from keras_transformer import corpus, serving

    exports = {}
    for spec in args.exports:
        name, _, rest = spec.partition("=")
        path, _, beam = rest.partition("=")
        if not name or not path or (beam and not beam.isdigit()):
            parser.error(f"{spec!r}: give NAME=PATH or NAME=PATH=BEAM")
        if name in exports:
            parser.error(f"{spec!r}: the name {name!r} is given twice")
        try:
            translator = serving.open(path, threads=args.threads)
        except (FileNotFoundError, ValueError) as error:
            parser.error(f"{spec!r}: {error}")
        if beam and "beam_size" not in inspect.signature(translator.translate).parameters:
            parser.error(
                f"{spec!r}: a {type(translator).__name__}'s search is its file's own: no =BEAM"
            )
        exports[name] = (translator, {"beam_size": int(beam)} if beam else {})
    sources = list(corpus.read_tsv(TEST, "en", "es").sources)[: args.sentences]
    for translator, options in exports.values():
        translator.translate(sources[:1], **options)  # warm-up
    rows = []
    measured = measure(exports, sources, args.rounds, args.batch)
    for name, (times, lengths) in measured.items():
        p50, p95 = np.percentile(times, [50, 95])
        rows.append(
            dict(
                export=name,
                batch=args.batch,
                p50_ms=round(float(p50), 2),
                p95_ms=round(float(p95), 2),
                ms_a_sentence=round(sum(times) / (len(sources) * args.rounds), 3),
                output_chars=lengths,
            )
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()
