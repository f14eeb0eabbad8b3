"""One request, part by part: where a one-sentence request to the SavedModel's `serving_xla`
spends its time.

    python -m benchmarks.request --model-dir runs/demo --model model.averaged.keras \
        --length-penalty 1.0 --stopping early

For greedy search and beam 4 (`--beams`), it writes `serving_xla` alone into a temporary
SavedModel (traced with `keras_transformer.fast` as `trainers.export` does unless --fast off)
and times, one sentence a request, each part of a request alone as that signature runs it
(the same functions: `translation_endpoints`' preprocessor, `pad_to_bucket`,
`decode_sorted_in_chunks`, `kt.decoding.decode` compiled by XLA), each part a call of its
own:
- tokenization: the preprocessor's `generate_preprocess`, text to source ids;
- bucketing and padding: `pad_to_bucket`, the ids padded to their shape bucket;
- XLA launch: a compiled call that reads every variable of the model (as the search does)
  and computes next to nothing: what any call of the compiled search pays;
- the encoder: `model.encode` on the padded ids, compiled;
- the search stopped after two steps (`max_length=2`), compiled: launch, encoder, the
  decoder's caches and two steps;
- the search on the padded ids, compiled; less the two-step search, the decoding steps
  after the second, and that over those steps, ms a step (steps: the output's ids, EOS
  included; beam search may take a few more);
- the search in sorted chunks: `decode_sorted_in_chunks` around padding and the search
  (sorting, the chunk loop, the writes);
- detokenization: the preprocessor's `generate_postprocess` and the empty-input rule;
- an empty `tf.function`'s call: what each part above pays once, as a call of its own;
- the whole request: `serve_xla` traced here, and the written SavedModel loaded with
  `tf.saved_model.load`, called through its attribute `loaded.serving_xla` and through
  `loaded.signatures["serving_xla"]` (TF Serving's way in, and `benchmarks.serve`'s); the
  signature less tokenization, the search in sorted chunks and detokenization: the
  per-call overhead (each part's own call counted in the parts: it can be below 0);
- a least-squares line through the signature's requests, ms = fixed + a step x steps.
The parts alternate within each pass over the sentences, so a drifting machine is fair to
all; a warm-up pass compiles every shape bucket first, and the parts' translations are
checked to be the signature's. Each part: the median and 95th percentile over every request
of every pass (`--repeats` passes over the first `--sentences` test verses, or the `--text`
sentences), and "fastest": the median over sentences of each sentence's fastest pass (the
figure least moved by other work on the machine; the derived rows subtract those). Prints a
Markdown table, then one JSON object (`benchmarks.serve`'s conventions) as the last stdout
line.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from trainers import startup_logs  # noqa: E402

startup_logs.install()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.serve import latency_fit  # noqa: E402
from keras_transformer import corpus, decoding, fast  # noqa: E402
from keras_transformer.decoding import STOPPING, DecodingSettings  # noqa: E402
from keras_transformer.export import savedmodel  # noqa: E402
from keras_transformer.models import TransformerSeq2SeqLMPreprocessor  # noqa: E402
from trainers.run_dir import MODEL, RunDirectory  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEST = ROOT / "data" / "bible-en-es" / "test.tsv.xz"
SIGNATURE = "serving_xla"
# Each part, timed alone, with the argument it is called with (from `inputs_of`).
PARTS = {
    "tokenization": "text",
    "bucketing and padding": "ids",
    "XLA launch": "padded",
    "encoder": "padded",
    "search, two steps": "padded",
    "search": "padded",
    "search in sorted chunks": "ids",
    "detokenization": "outputs",
    "empty tf.function": "text",
    "serve_xla, traced here": "text",
    "attribute, loaded": "text",
    "signature, loaded": "text",
}
# Derived from the parts (on each sentence's fastest pass, and pass by pass).
AFTER_TWO = "decoding steps after the second"
PER_STEP = "  ms a step after the second"
OVERHEAD = "per-call overhead (signature less its parts)"
TEXT = tf.TensorSpec([None], tf.string)
IDS = tf.TensorSpec([None, None], tf.int32)


def request_parts(model, vocabularies, settings: DecodingSettings) -> dict:
    """name -> a `tf.function` for each part that `translation_endpoints`' `serving_xla`
    runs (its settings: `settings`), each taking what it gets in a request (`PARTS`), and
    "endpoint": the `serving_xla` endpoint itself (function, input signature)."""
    preprocessor = TransformerSeq2SeqLMPreprocessor.for_model(model, vocabularies)
    max_length = model.config.max_length
    names = ("beam_size", "length_penalty", "max_extra_length", "stopping", "finish_rule")
    endpoints = savedmodel.translation_endpoints(
        model, vocabularies, **{name: getattr(settings, name) for name in names}
    )
    serve_xla = endpoints[SIGNATURE][0]

    # translation_endpoints' XLA search, made of the same functions.
    search = tf.function(
        lambda ids: decoding.decode(model, ids, settings), input_signature=[IDS], autograph=False
    )
    compiled_search = tf.function(lambda ids: search(ids), jit_compile=True, autograph=False)
    buckets = [b for b in savedmodel.BATCH_BUCKETS if b >= (2 if settings.beam_size == 1 else 1)]

    def output_length(ids):
        return tf.minimum(tf.shape(ids)[1] + settings.max_extra_length, max_length)

    def bucketed_search(ids):
        out, score = compiled_search(savedmodel.pad_to_bucket(ids, buckets, max_length))
        return out[: tf.shape(ids)[0], : output_length(ids)], score[: tf.shape(ids)[0]]

    def in_chunks(ids):
        chunk = max(savedmodel.CHUNK_ROWS // settings.beam_size, 1)
        return savedmodel.decode_sorted_in_chunks(bucketed_search, ids, chunk, output_length(ids))

    def detokenize(source_ids, ids, score):
        translation = preprocessor.generate_postprocess(
            {"target_ids": ids, "source_ids": source_ids}
        )
        empty = tf.math.count_nonzero(source_ids, axis=1) <= 1
        return {"translation": translation, "score": tf.where(empty, 0.0, score)}

    def launch(ids):  # one element of each variable: every variable an argument
        first = [tf.cast(tf.reshape(v, [-1])[0], tf.float32) for v in model.variables]
        return ids + tf.cast(tf.add_n(first) * 0.0, tf.int32)

    graph = functools.partial(tf.function, autograph=False)

    def compiled(function):
        """`function` compiled by XLA, called from a graph as the signature calls its search
        (an eager call of a compiled function takes another way to XLA)."""
        return graph(
            tf.function(function, jit_compile=True, autograph=False), input_signature=[IDS]
        )

    return {
        "tokenization": graph(
            lambda text: preprocessor.generate_preprocess(text)["source_ids"],
            input_signature=[TEXT],
        ),
        "bucketing and padding": graph(
            lambda ids: savedmodel.pad_to_bucket(ids, buckets, max_length), input_signature=[IDS]
        ),
        "XLA launch": compiled(launch),
        "encoder": compiled(lambda ids: model.encode(ids)[0]),
        "search, two steps": compiled(
            lambda ids: decoding.decode(model, ids, settings, max_length=2)
        ),
        "search": compiled(lambda ids: search(ids)),
        "search in sorted chunks": graph(in_chunks, input_signature=[IDS]),
        "detokenization": graph(detokenize, input_signature=[IDS, IDS, tf.TensorSpec([None])]),
        "empty tf.function": graph(tf.identity, input_signature=[TEXT]),
        "serve_xla, traced here": graph(serve_xla, input_signature=[TEXT]),
        "endpoint": endpoints[SIGNATURE],
    }


def inputs_of(parts: dict, sentence: str) -> dict:
    """What each kind of part is called with in a request of `sentence` (`PARTS`' values),
    and "steps": the output's ids, EOS included."""
    text = tf.constant([sentence])
    ids = parts["tokenization"](text)
    out, score = parts["search in sorted chunks"](ids)
    return {
        "text": (text,),
        "ids": (ids,),
        "padded": (parts["bucketing and padding"](ids),),
        "outputs": (ids, out, score),
        "steps": int(np.count_nonzero(out.numpy()[0])),
    }


def time_parts(parts: dict, loaded, sentences, repeats: int) -> tuple[np.ndarray, list]:
    """`(milliseconds [repeats, sentences, len(PARTS)], steps of each sentence)`, after a
    warm-up pass; checks first that the parts translate as the loaded signature."""
    signature = loaded.signatures[SIGNATURE]
    calls = parts | {
        "signature, loaded": lambda text: signature(text=text),
        "attribute, loaded": getattr(loaded, SIGNATURE),
    }
    arguments = [inputs_of(parts, sentence) for sentence in sentences]
    for sentence, given in zip(sentences, arguments, strict=True):
        expected = calls["signature, loaded"](*given["text"])["translation"].numpy().tolist()
        if parts["detokenization"](*given["outputs"])["translation"].numpy().tolist() != expected:
            raise RuntimeError(f"the parts translate {sentence!r} unlike {SIGNATURE}")
    milliseconds = np.zeros([repeats, len(sentences), len(PARTS)])
    for repeat in range(-1, repeats):  # a warm-up pass, then the timed passes
        for i, given in enumerate(arguments):
            for j, (name, argument) in enumerate(PARTS.items()):
                started = time.perf_counter()
                calls[name](*given[argument])
                if repeat >= 0:
                    milliseconds[repeat, i, j] = 1e3 * (time.perf_counter() - started)
    return milliseconds, [given["steps"] for given in arguments]


def derived(ms: dict, steps) -> dict:
    """The derived rows from the parts' times (arrays of the same shape; `steps` broadcast
    against them)."""
    after_two = ms["search"] - ms["search, two steps"]
    return {
        AFTER_TWO: after_two,
        PER_STEP: after_two / np.maximum(np.asarray(steps) - 2, 1),
        OVERHEAD: ms["signature, loaded"]
        - ms["tokenization"]
        - ms["search in sorted chunks"]
        - ms["detokenization"],
    }


def summary(milliseconds: np.ndarray, steps: list) -> tuple[list[dict], dict | None]:
    """The rows of one search: for each part and derived row, p50 and p95 over every
    request, and "fastest" (the median over sentences of each sentence's fastest pass);
    then the signature's fitted line (None with fewer than two output lengths)."""
    every = {name: milliseconds[..., j] for j, name in enumerate(PARTS)}  # [repeats, n]
    fastest = {name: times.min(axis=0) for name, times in every.items()}  # [n]
    every |= derived(every, steps)
    fastest |= derived(fastest, steps)
    order = list(PARTS)
    order[order.index("search") + 1 : order.index("search") + 1] = [AFTER_TWO, PER_STEP]
    order.insert(order.index("empty tf.function"), OVERHEAD)
    rows = [
        dict(
            part=name,
            p50_ms=round(float(np.median(every[name])), 3),
            p95_ms=round(float(np.percentile(every[name], 95)), 3),
            fastest_ms=round(float(np.median(fastest[name])), 3),
        )
        for name in order
    ]
    fit = None
    if len(set(steps)) > 1:
        fixed, per_step = latency_fit(fastest["signature, loaded"], steps)
        fit = dict(fixed_ms=round(fixed, 3), ms_per_step=round(per_step, 4))
    return rows, fit


def run(model, vocabularies, sentences, args) -> dict:
    """Times every part for each of `args.beams` (see the module doc)."""
    rows, fits, steps = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for beam in args.beams:
            name = "greedy" if beam == 1 else f"beam {beam}"
            settings = DecodingSettings(
                beam_size=beam, length_penalty=args.length_penalty, stopping=args.stopping
            )
            # As trainers.export traces; the parts are traced at their first call, inside.
            with fast.switched(args.fast):
                parts = request_parts(model, vocabularies, settings)
                folder = Path(tmp) / f"beam{beam}"
                savedmodel.write_saved_model(
                    folder,
                    {SIGNATURE: parts.pop("endpoint")},
                    model,
                    savedmodel._tokenizers(vocabularies),
                )
                loaded = tf.saved_model.load(str(folder))
                milliseconds, steps[name] = time_parts(parts, loaded, sentences, args.repeats)
            part_rows, fits[name] = summary(milliseconds, steps[name])
            rows += [dict(decoding=name, **row) for row in part_rows]
    return dict(
        impl="keras_transformer",
        mode="request",
        signature=SIGNATURE,
        preset=model.config.to_dict(),
        sentences=len(sentences),
        requests=len(sentences) * args.repeats,
        repeats=args.repeats,
        length_penalty=args.length_penalty,
        stopping=args.stopping,
        fast=args.fast,
        threads=dict(
            intra_op=tf.config.threading.get_intra_op_parallelism_threads(),
            inter_op=tf.config.threading.get_inter_op_parallelism_threads(),
        ),
        median_steps={name: float(np.median(s)) for name, s in steps.items()},
        rows=rows,
        signature_fit=fits,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def table(result: dict) -> str:
    """A Markdown table: a row a part, a column (p50 / p95 / fastest ms) a search; then the
    steps and the signature's fitted line."""
    searches = list(dict.fromkeys(row["decoding"] for row in result["rows"]))
    cells = {(row["decoding"], row["part"]): row for row in result["rows"]}
    lines = [
        "| part | " + " | ".join(f"{s}: p50 / p95 / fastest, ms" for s in searches) + " |",
        "|---|" + "---|" * len(searches),
    ]
    for part in dict.fromkeys(row["part"] for row in result["rows"]):
        values = [cells[s, part] for s in searches]
        lines.append(
            f"| {part} | "
            + " | ".join(
                f"{v['p50_ms']:.2f} / {v['p95_ms']:.2f} / {v['fastest_ms']:.2f}" for v in values
            )
            + " |"
        )
    lines.append("")
    for search in searches:
        fit = result["signature_fit"][search]
        line = f"{search}: median steps {result['median_steps'][search]:g}"
        if fit:
            line += f"; signature = {fit['fixed_ms']} ms + {fit['ms_per_step']} ms a step"
        lines.append(line)
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True, type=Path)
    parser.add_argument("--model", default=MODEL, help="e.g. model.averaged.keras")
    parser.add_argument("--length-penalty", type=float, default=0.6)
    parser.add_argument("--stopping", choices=STOPPING, default="early")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4], help="1 is greedy")
    parser.add_argument("--sentences", type=int, default=30, help="the first N test verses")
    parser.add_argument("--text", nargs="+", help="sentences to send instead of test verses")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--fast",
        choices=["on", "off"],
        default="on",
        help="trace with keras_transformer.fast (trainers.export's default)",
    )
    parser.add_argument(
        "--intra-op-threads",
        type=int,
        default=0,
        help="TensorFlow's threads within an op, XLA's included (0: its default, all cores; "
        "TF Serving's --tensorflow_intra_op_parallelism)",
    )
    parser.add_argument(
        "--inter-op-threads",
        type=int,
        default=0,
        help="TensorFlow's threads running ops side by side (0: its default; TF Serving's "
        "--tensorflow_inter_op_parallelism)",
    )
    args = parser.parse_args(argv)
    args.fast = args.fast == "on"
    for flag in ("repeats", "sentences"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} {getattr(args, flag)}: must be >= 1")
    if args.intra_op_threads:  # before TensorFlow starts its threads
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    _, vocabularies, model = RunDirectory(args.model_dir).load_trained(args.model)
    sentences = args.text or list(corpus.read_tsv(TEST, "en", "es").sources)[: args.sentences]
    result = run(model, vocabularies, sentences, args)
    print(table(result))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
