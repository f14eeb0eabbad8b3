"""A site's translations, one request at a time, in the browser and out of it: the time of
`window.translate(text)` in headless Chromium (LiteRT.js, WASM on the CPU, one thread) and of
the same `model.tflite` under ai-edge-litert's stock `Interpreter` (one thread), and whether
the two give the same translations.

    python -m trainers.export --model-dir runs/demo --model model.averaged.keras \
        --format web --out site
    python -m benchmarks.web --site site --sentences 30 --repeats 3

The two engines alternate pass by pass over the first `--sentences` test verses, a warm-up
pass first; each: the median and 95th percentile of a request's milliseconds over every
request of every pass, and "fastest", the median over sentences of each sentence's fastest
pass. The browser's time is measured in the page (`performance.now()` around the awaited
call); the page loading (the model's download, LiteRT.js's WASM compiled) is timed apart.
Prints a Markdown table, then one JSON object as the last stdout line. Chromium as
tests/browser.py finds it (`make test` installs it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TEST = ROOT / "data" / "bible-en-es" / "test.tsv.xz"
TIMED = """async (texts) => {
  const out = [];
  for (const text of texts) {
    const start = performance.now();
    const translation = await window.translate(text);
    out.push([performance.now() - start, translation]);
  }
  return out;
}"""


def interpreter_runs(site: Path):
    """The site's file under ai-edge-litert's stock `Interpreter`, one thread: a function
    text -> (milliseconds, translation)."""
    from ai_edge_litert.interpreter import Interpreter

    from keras_transformer.serving.litert_bytes import decoded, encoded, input_bytes

    manifest = json.loads((site / "manifest.json").read_text())
    width = input_bytes(manifest)
    runner = Interpreter(model_path=str(site / "model.tflite"), num_threads=1)
    run = runner.get_signature_runner("serving_default")

    def timed(text: str):
        row = encoded(text.encode(), width)
        start = time.perf_counter()
        answer = run(text=row)["translations"][0]
        return (time.perf_counter() - start) * 1000, decoded(answer)

    return timed


def summary(milliseconds: np.ndarray) -> dict:
    """`[passes, sentences]` -> median, p95 and fastest (median of each sentence's best)."""
    return {
        "median_ms": float(np.median(milliseconds)),
        "p95_ms": float(np.percentile(milliseconds, 95)),
        "fastest_ms": float(np.median(milliseconds.min(axis=0))),
    }


def run(site: Path, sentences: list[str], repeats: int) -> dict:
    from tests import browser

    timed = interpreter_runs(site)
    browser_ms, python_ms = [], []
    with browser.served(site) as server:
        start = time.perf_counter()
        with browser.opened(server.url) as (page, foreign):
            page.wait_for_function(
                "window.translatorReady === true || window.translatorError !== undefined",
                timeout=300_000,
            )
            loading = time.perf_counter() - start
            if error := page.evaluate("window.translatorError"):
                raise RuntimeError(f"the page could not load its model: {error}")
            page.evaluate(TIMED, sentences)  # warm-up, both engines
            for text in sentences:
                timed(text)
            for _ in range(repeats):
                answers = page.evaluate(TIMED, sentences)
                browser_ms.append([ms for ms, _ in answers])
                ours = [timed(text) for text in sentences]
                python_ms.append([ms for ms, _ in ours])
        if foreign:
            raise RuntimeError(f"the page asked other hosts for {foreign}")
    same = sum(a[1] == b[1] for a, b in zip(answers, ours, strict=True))
    return {
        "site": str(site),
        "sentences": len(sentences),
        "repeats": repeats,
        "page_load_s": loading,
        "model_bytes": (site / "model.tflite").stat().st_size,
        "same_translations": same,
        "browser": summary(np.array(browser_ms)),
        "interpreter": summary(np.array(python_ms)),
    }


def table(result: dict) -> str:
    rows = [
        "| engine | median ms | p95 ms | fastest ms |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, label in (
        ("browser", "Chromium, LiteRT.js (WASM)"),
        ("interpreter", "ai-edge-litert"),
    ):
        figures = result[name]
        rows.append(
            f"| {label} | {figures['median_ms']:.1f} | {figures['p95_ms']:.1f} | "
            f"{figures['fastest_ms']:.1f} |"
        )
    rows.append(
        f"\n{result['same_translations']}/{result['sentences']} translations the same; the page "
        f"loaded in {result['page_load_s']:.1f} s ({result['model_bytes']} bytes of model)"
    )
    return "\n".join(rows)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", required=True, type=Path, help="a site of --format web")
    parser.add_argument("--sentences", type=int, default=30, help="the first N test verses")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from keras_transformer import corpus

    sentences = list(corpus.read_tsv(TEST, "en", "es").sources)[: args.sentences]
    result = run(args.site, sentences, args.repeats)
    print(table(result))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
