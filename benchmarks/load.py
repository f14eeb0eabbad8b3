"""Serving under concurrent load: one loaded SavedModel (its three text signatures) and one
CTranslate2 translator, each shared by 1, 2, 4 and 8 threads.

    python -m benchmarks.load --saved-model saved_models/demo --ctranslate2 /tmp/ct2-demo \
        [--threads 1 2 4 8] [--requests 200] [--seed 0]

A seeded pool of --requests requests is drawn from the bundled test split: batches of 1 to
--max-batch inputs, each input a verse (mixed lengths), empty, blank (whitespace only),
over-long (more words, so more pieces, than the model's max_length) or a verse with
invalid UTF-8 bytes in it; the first requests are batches of one kind, so that every kind
reaches every signature. Requests go round-robin to `serving_default`, `serving_xla` and
`n_best` (the SavedModel), or to `CTranslate2Translator.translate` with one hypothesis and
with the beam's n-best (inputs decoded with errors="replace", as `trainers.translate` does).
Each request is a fixed batch sent as it is, so its answer must not depend on what else
runs: the pool is answered once, serially (which also compiles `serving_xla`'s shape
buckets), then every thread sends the whole pool in its own seeded order, and every answer
is checked against the serial one: the same texts (and ids, for CTranslate2), scores equal
to 1e-5 relative (and counted when not bit-identical). Reported for each engine and thread
count: requests/s and sentences/s, p50/p95 request latency, errors, mismatches, threads
still running after --timeout (a deadlock), and the resident memory before the run, after
its first --rss-every answers and after its last. Exits 1 on any error, mismatch or hang.
TensorFlow runs with its default threads (all cores); the translator runs
--ct2-inter-threads batches at a time (CTranslate2's inter_threads, 1 by default: concurrent
requests then queue for it), each on --ct2-threads OpenMP threads. Prints a Markdown table,
then one JSON object (the benchmarks' schema) as the last stdout line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from trainers import startup_logs  # noqa: E402

startup_logs.install()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEST = ROOT / "data" / "bible-en-es" / "test.tsv.xz"
SAVED_MODEL_SIGNATURES = ("serving_default", "serving_xla", "n_best")
CTRANSLATE2_ENGINES = ("ctranslate2", "ctranslate2 n_best")
KINDS = ("verse", "empty", "blank", "over-long", "invalid UTF-8")
KIND_WEIGHTS = (0.6, 0.1, 0.1, 0.1, 0.1)  # of an input in a mixed batch
BLANKS = (" ", "   ", "\t", " \t ", "\n", "\u00a0", "\u3000 ")
INVALID = (b"\xff", b"\xfe\xfe", b"\xc3", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80")


class Request(NamedTuple):
    """One request: the engine (signature) it goes to, its inputs and their kinds."""

    engine: str
    inputs: tuple[bytes, ...]
    kinds: tuple[str, ...]


class Answer(NamedTuple):
    """One request's answer: each input's hypotheses, best first (CTranslate2's n-best may
    hold fewer than asked for some inputs)."""

    texts: tuple[tuple[str, ...], ...]  # [batch][hypotheses]
    scores: tuple[np.ndarray, ...]  # [batch] float32 [hypotheses]
    ids: tuple | None = None  # [batch][hypotheses][ids], CTranslate2 only


Engine = Callable[[list[bytes]], Answer]


def _input(kind: str, verses: Sequence[str], rng, max_length: int) -> bytes:
    if kind == "empty":
        return b""
    if kind == "blank":
        return str(rng.choice(BLANKS)).encode()
    verse = verses[rng.integers(len(verses))]
    if kind == "verse":
        return verse.encode()
    if kind == "over-long":  # a word is one piece or more: more words than max_length
        words, target = verse.split(), max_length + int(rng.integers(1, max_length + 1))
        while len(words) < target:
            words += verses[rng.integers(len(verses))].split()
        return " ".join(words[:target]).encode()
    at = int(rng.integers(len(verse) + 1))  # invalid UTF-8 at a character boundary
    return verse[:at].encode() + INVALID[rng.integers(len(INVALID))] + verse[at:].encode()


def request_mix(
    verses: Sequence[str],
    engines: Sequence[str],
    *,
    requests: int,
    max_length: int,
    max_batch: int = 32,
    seed: int = 0,
) -> list[Request]:
    """`requests` seeded requests of 1 to `max_batch` inputs, round-robin over `engines`.

    The first `len(engines) * len(KINDS)` requests are batches of one kind, one for each
    (engine, kind) pair; the rest mix kinds (`KIND_WEIGHTS`). Engines do not draw from the
    random generator: the same seed gives the same inputs to any set of engines.
    """
    rng = np.random.default_rng(seed)
    mix = []
    for index in range(requests):
        batch = int(rng.integers(1, max_batch + 1))
        if index < len(engines) * len(KINDS):
            kinds = [KINDS[index // len(engines)]] * batch
        else:
            kinds = [str(k) for k in rng.choice(KINDS, size=batch, p=KIND_WEIGHTS)]
        inputs = tuple(_input(kind, verses, rng, max_length) for kind in kinds)
        mix.append(Request(engines[index % len(engines)], inputs, tuple(kinds)))
    return mix


def saved_model_engines(
    loaded, signatures: Sequence[str] = SAVED_MODEL_SIGNATURES
) -> dict[str, Engine]:
    """name -> Engine for the text signatures of a loaded SavedModel (`tf.saved_model.load`)."""
    import tensorflow as tf

    def engine(signature):
        def answer(inputs: list[bytes]) -> Answer:
            out = signature(text=tf.constant(inputs, tf.string, shape=[len(inputs)]))
            if "translations" in out:  # n_best: [batch, beam]
                texts, scores = out["translations"].numpy(), out["scores"].numpy()
            else:  # [batch] -> [batch, 1]
                texts, scores = out["translation"].numpy()[:, None], out["score"].numpy()[:, None]
            decoded = tuple(tuple(t.decode("utf-8") for t in row) for row in texts)
            return Answer(decoded, tuple(scores))

        return answer

    return {name: engine(loaded.signatures[name]) for name in signatures}


def ctranslate2_engines(translator) -> dict[str, Engine]:
    """name -> Engine for a `kt.serving.CTranslate2Translator`: its best hypothesis, and its
    n-best (the beam's size), inputs decoded as `trainers.translate` decodes them."""

    def engine(n_best):
        def answer(inputs: list[bytes]) -> Answer:
            text = [raw.decode("utf-8", "replace") for raw in inputs]
            found = translator.translate(text, n_best=n_best)
            return Answer(
                tuple(tuple(h.text for h in hypotheses) for hypotheses in found),
                tuple(np.array([h.score for h in hyps], np.float32) for hyps in found),
                tuple(tuple(tuple(h.ids) for h in hypotheses) for hypotheses in found),
            )

        return answer

    return dict(zip(CTRANSLATE2_ENGINES, (engine(1), engine(translator.beam_size)), strict=True))


def difference(expected: Answer, got: Answer, rtol: float = 1e-5) -> str | None:
    """What differs between two answers to one request (None: equal, scores to `rtol`)."""
    if len(got.texts) != len(expected.texts):
        return f"{len(got.texts)} answers to {len(expected.texts)} inputs"
    if got.texts != expected.texts:
        pairs = zip(expected.texts, got.texts, strict=True)
        row = next(i for i, (a, b) in enumerate(pairs) if a != b)
        return f"input {row}: {got.texts[row]!r} != serial {expected.texts[row]!r}"
    if got.ids != expected.ids:
        return "ids differ from the serial answer's"
    for row, (want, have) in enumerate(zip(expected.scores, got.scores, strict=True)):
        if not np.allclose(have, want, rtol=rtol, atol=0.0):
            return f"input {row}: scores {have} != serial {want}"
    return None


def bit_identical(expected: Answer, got: Answer) -> bool:
    """Whether the scores of two equal answers are equal to the last bit."""
    return all(map(np.array_equal, expected.scores, got.scores))


def resident_mb() -> float:
    """The process's resident memory now (/proc/self/statm; elsewhere its peak)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def serial_answers(engines: dict[str, Engine], requests: Sequence[Request]) -> list:
    """Each request answered alone, one after another: its Answer, or the error it raised."""
    answers = []
    for request in requests:
        try:
            answers.append(engines[request.engine](list(request.inputs)))
        except Exception as error:  # reported, never raised: the pool goes on
            answers.append(error)
    return answers


@dataclass
class LoadResult:
    """What one run of `run_load` saw."""

    threads: int
    requests: int = 0  # answered, all threads together
    sentences: int = 0
    seconds: float = 0.0
    latencies_ms: list = field(default_factory=list)
    errors: list = field(default_factory=list)  # "thread t, request i (engine): error"
    mismatches: list = field(default_factory=list)  # likewise, with the difference
    not_bit_identical: int = 0  # answers equal to rtol whose scores differ in some bit
    hung: int = 0  # threads still running after the timeout
    rss_mb: list = field(default_factory=list)  # (requests answered, resident MB), from 0

    @property
    def ok(self) -> bool:
        return not (self.errors or self.mismatches or self.hung)


def run_load(
    engines: dict[str, Engine],
    requests: Sequence[Request],
    expected: Sequence,
    *,
    threads: int,
    seed: int = 0,
    timeout: float = 600.0,
    rss_every: int = 100,
) -> LoadResult:
    """`threads` threads each send every request of `requests` once, in its own seeded
    order, all at once, and check each answer against `expected` (`serial_answers`).

    Threads that have not finished `timeout` seconds after the start are counted in `hung`
    and left running (daemons). The resident memory is sampled before the start, each
    `rss_every` answers and after the last one.
    """
    result, lock = LoadResult(threads), threading.Lock()
    start = threading.Barrier(threads + 1)

    def answered(latency_ms, sentences, problem=None, error=None):
        with lock:
            result.requests += 1
            result.sentences += sentences
            if error is None:
                result.latencies_ms.append(latency_ms)
            else:
                result.errors.append(error)
            if problem is not None:
                result.mismatches.append(problem)
            if result.requests % rss_every == 0:
                result.rss_mb.append((result.requests, resident_mb()))

    def work(thread):
        order = np.random.default_rng([seed, thread]).permutation(len(requests))
        start.wait()
        for index in order:
            request, name = requests[index], f"thread {thread}, request {index}"
            name += f" ({request.engine})"
            began = time.perf_counter()
            try:
                got = engines[request.engine](list(request.inputs))
                latency = 1e3 * (time.perf_counter() - began)
                problem = difference(expected[index], got)
                identical = problem is None and bit_identical(expected[index], got)
            except Exception as error:
                answered(None, 0, error=f"{name}: {type(error).__name__}: {error}"[:500])
                continue
            if problem is None and not identical:
                with lock:
                    result.not_bit_identical += 1
            answered(latency, len(request.inputs), f"{name}: {problem}" if problem else None)

    workers = [
        threading.Thread(target=work, args=(t,), name=f"load-{t}", daemon=True)
        for t in range(threads)
    ]
    for worker in workers:
        worker.start()
    result.rss_mb.append((0, resident_mb()))
    start.wait(timeout=timeout)
    began = time.perf_counter()
    deadline = began + timeout
    for worker in workers:
        worker.join(timeout=max(deadline - time.perf_counter(), 0.0))
    result.seconds = time.perf_counter() - began
    result.hung = sum(worker.is_alive() for worker in workers)
    with lock:
        if len(result.rss_mb) == 1 or result.rss_mb[-1][0] != result.requests:
            result.rss_mb.append((result.requests, resident_mb()))
    return result


def _row(engine: str, run: LoadResult) -> dict:
    latencies = run.latencies_ms or [float("nan")]
    return dict(
        engine=engine,
        threads=run.threads,
        requests=run.requests,
        sentences=run.sentences,
        seconds=round(run.seconds, 2),
        requests_per_s=round(run.requests / run.seconds, 2),
        sentences_per_s=round(run.sentences / run.seconds, 1),
        latency_p50_ms=round(float(np.percentile(latencies, 50)), 1),
        latency_p95_ms=round(float(np.percentile(latencies, 95)), 1),
        rss_before_mb=round(run.rss_mb[0][1], 1),
        rss_after_first_mb=round(run.rss_mb[1][1], 1),
        rss_after_last_mb=round(run.rss_mb[-1][1], 1),
        rss_first_at=run.rss_mb[1][0],
        rss_trace_mb=[(n, round(mb, 1)) for n, mb in run.rss_mb],
        errors=len(run.errors),
        mismatches=len(run.mismatches),
        not_bit_identical=run.not_bit_identical,
        hung_threads=run.hung,
        problems=(run.errors + run.mismatches)[:20],
    )


def _pool(engines, verses, max_length, args, label):
    requests = request_mix(
        verses,
        list(engines),
        requests=args.requests,
        max_length=max_length,
        max_batch=args.max_batch,
        seed=args.seed,
    )
    began = time.perf_counter()
    expected = serial_answers(engines, requests)
    seconds = time.perf_counter() - began
    failed = [
        f"serial request {i} ({requests[i].engine}): {e!r}"
        for i, e in enumerate(expected)
        if not isinstance(e, Answer)
    ]
    rows = []
    if not failed:
        for threads in args.threads:
            run = run_load(
                engines,
                requests,
                expected,
                threads=threads,
                seed=args.seed,
                timeout=args.timeout,
                rss_every=args.rss_every,
            )
            rows.append(_row(label, run))
            print(f"{label}, {threads} thread(s): {'ok' if run.ok else 'FAILED'}", file=sys.stderr)
            if run.hung:
                break  # hung threads still hold the engine: later runs would measure them
    return dict(engine=label, serial_seconds=round(seconds, 2), serial_errors=failed, rows=rows)


def run(args) -> dict:
    from keras_transformer import corpus

    verses = list(corpus.read_tsv(TEST, "en", "es").sources)
    pools, config = [], None
    if args.saved_model:
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

        from keras_transformer.serving import resolve_version

        version = resolve_version(args.saved_model)
        manifest = json.loads((version / "assets.extra" / "manifest.json").read_text())
        config = manifest["model_config"]
        loaded = tf.saved_model.load(str(version))
        engines = saved_model_engines(loaded)
        pools.append(_pool(engines, verses, config["max_length"], args, "SavedModel"))
    if args.ctranslate2:
        from keras_transformer.serving import CTranslate2Translator

        translator = CTranslate2Translator(
            args.ctranslate2, threads=args.ct2_threads, inter_threads=args.ct2_inter_threads
        )
        config = config or translator.manifest["model_config"]
        engines = ctranslate2_engines(translator)
        pools.append(_pool(engines, verses, translator.max_length, args, "CTranslate2"))
    rows = [row for pool in pools for row in pool["rows"]]
    ok = all(
        not pool["serial_errors"] and len(pool["rows"]) == len(args.threads) for pool in pools
    ) and all(not (r["errors"] or r["mismatches"] or r["hung_threads"]) for r in rows)
    headline = max(rows, key=lambda r: (r["engine"] == "SavedModel", r["threads"]), default={})
    return dict(
        impl="keras_transformer",
        preset=config,
        mode="load",
        params=None,
        batch_size=None,  # 1 to max_batch, mixed
        max_batch=args.max_batch,
        src_len=None,
        tgt_len=None,
        jit_compile=None,  # serving_xla is one of the three signatures
        cache=True,
        step_ms_median=headline.get("latency_p50_ms"),
        step_ms_min=None,
        tokens_per_s=None,
        sentences_per_s=headline.get("sentences_per_s"),
        requests_per_thread=args.requests,
        threads=args.threads,
        seed=args.seed,
        ct2_threads=args.ct2_threads,
        ct2_inter_threads=args.ct2_inter_threads,
        saved_model=str(args.saved_model) if args.saved_model else None,
        ctranslate2=str(args.ctranslate2) if args.ctranslate2 else None,
        pools=[{k: v for k, v in pool.items() if k != "rows"} for pool in pools],
        rows=rows,
        ok=ok,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def table(result: dict) -> str:
    lines = [
        "| engine | threads | requests | sentences | requests/s | sentences/s "
        "| p50 / p95 ms | RSS MB before / after first N / after last | errors | mismatches "
        "| hung |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['engine']} | {r['threads']} | {r['requests']} | {r['sentences']} | "
            f"{r['requests_per_s']} | {r['sentences_per_s']} | "
            f"{r['latency_p50_ms']} / {r['latency_p95_ms']} | "
            f"{r['rss_before_mb']} / {r['rss_after_first_mb']} / {r['rss_after_last_mb']} | "
            f"{r['errors']} | "
            f"{r['mismatches']} | {r['hung_threads']} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--saved-model", type=Path, help="a SavedModel (model or version folder)")
    parser.add_argument("--ctranslate2", type=Path, help="a CTranslate2 directory")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--requests", type=int, default=200, help="requests each thread sends")
    parser.add_argument("--max-batch", type=int, default=32, help="inputs a request, at most")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a thread count")
    parser.add_argument("--rss-every", type=int, default=100, help="answers between samples")
    parser.add_argument(
        "--ct2-threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="CTranslate2's intra_threads (default: the usable cores; 0: its own default, 4)",
    )
    parser.add_argument(
        "--ct2-inter-threads",
        type=int,
        default=1,
        help="CTranslate2's inter_threads: batches translated at once, each on --ct2-threads",
    )
    args = parser.parse_args(argv)
    if not (args.saved_model or args.ctranslate2):
        parser.error("give --saved-model, --ctranslate2 or both")
    for name in ("requests", "max_batch", "rss_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if min(args.threads) < 1:
        parser.error(f"--threads {args.threads}: each must be >= 1")
    result = run(args)
    print(table(result))
    for pool in result["pools"]:
        for line in pool["serial_errors"]:
            print(line, file=sys.stderr)
    for row in result["rows"]:
        for line in row["problems"]:
            print(f"{row['engine']}, {row['threads']} thread(s): {line}", file=sys.stderr)
    print(json.dumps(result))
    sys.stdout.flush()
    if any(row["hung_threads"] for row in result["rows"]):
        os._exit(1)  # hung daemon threads inside TensorFlow could hold up the exit
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
