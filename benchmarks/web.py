"""A site's translations, one request at a time, in the browser and out of it: the time of
`window.translate(text)` in headless Chromium (LiteRT.js, WASM on the CPU, one thread) and of
the same `model.tflite` under ai-edge-litert's stock `Interpreter` (one thread), and whether
they give the same translations. With `--litertjs-package`, the page also runs on LiteRT.js's
relaxed-SIMD WASM build beside the build the site ships (the compat one, which needs neither
relaxed SIMD nor threads), so that the two can be weighed.

    python -m trainers.export --model-dir runs/demo --model model.averaged.keras \
        --format web --out site
    make litertjs-package   # the pinned @litertjs/core whole, in build/litertjs-core
    python -m benchmarks.web --site site --sentences 30 --repeats 3 \
        --litertjs-package build/litertjs-core

The engines take turns pass by pass over the first `--sentences` test verses (the order
rotated each pass), a warm-up pass first; each: the median and 95th percentile of a request's
milliseconds over every request of every pass, and "fastest", the median over sentences of
each sentence's fastest pass. The browser's time is measured in the page (`performance.now()`
around the awaited call); the page loading (the model's download, LiteRT.js's WASM compiled)
is timed apart. Each WASM build's page is a copy of the site in a folder of its own, served
from one loopback server (the relaxed-SIMD copy's app.js loads that build instead); the page
says which build it fetched. Prints a Markdown table, then one JSON object as the last stdout
line. Chromium as tests/browser.py finds it (`make test` installs it). Timings need a quiet
machine: nothing else running.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TEST = ROOT / "data" / "bible-en-es" / "test.tsv.xz"
# LiteRT.js's WASM builds the page may load: the one a site ships, and the relaxed-SIMD one.
BUILDS = {
    "compat": "litert_wasm_compat_internal",
    "relaxed_simd": "litert_wasm_internal",
}
LABELS = {
    "interpreter": "ai-edge-litert (1 thread)",
    "compat": "Chromium, LiteRT.js compat WASM (shipped)",
    "relaxed_simd": "Chromium, LiteRT.js relaxed-SIMD WASM",
}
TIMED = """async (texts) => {
  const out = [];
  for (const text of texts) {
    const start = performance.now();
    const translation = await window.translate(text);
    out.push([performance.now() - start, translation]);
  }
  return out;
}"""
LOADED = """() => performance.getEntriesByType('resource')
  .map((entry) => new URL(entry.name).pathname.split('/').pop())"""


def interpreter_runs(site: Path):
    """The site's file under ai-edge-litert's stock `Interpreter`, one thread: a function
    texts -> [(milliseconds, translation)]."""
    from ai_edge_litert.interpreter import Interpreter

    from keras_transformer.serving.litert_bytes import decoded, encoded, input_bytes

    manifest = json.loads((site / "manifest.json").read_text())
    width = input_bytes(manifest)
    runner = Interpreter(model_path=str(site / "model.tflite"), num_threads=1)
    run = runner.get_signature_runner("serving_default")

    def timed(texts: list[str]):
        out = []
        for text in texts:
            row = encoded(text.encode(), width)
            start = time.perf_counter()
            answer = run(text=row)["translations"][0]
            out.append(((time.perf_counter() - start) * 1000, decoded(answer)))
        return out

    return timed


def relaxed_build(package: Path) -> Path:
    """The relaxed-SIMD build's `.js` in `package` (the `@litertjs/core` folder that `make
    litertjs-package` keeps), after checking that it is the version the sites ship.

    Raises:
        SystemExit: no such build there, or another version than the lockfile's.
    """
    from keras_transformer.export.web import litertjs_version

    facts = package / "package.json"
    script = package / "wasm" / f"{BUILDS['relaxed_simd']}.js"
    if not facts.is_file() or not script.is_file() or not script.with_suffix(".wasm").is_file():
        raise SystemExit(
            f"--litertjs-package {package}: no @litertjs/core package with "
            f"wasm/{script.name} and its .wasm (make litertjs-package writes one)"
        )
    version, pinned = json.loads(facts.read_text())["version"], litertjs_version()["version"]
    if version != pinned:
        raise SystemExit(
            f"--litertjs-package {package}: @litertjs/core {version}, where the sites ship "
            f"{pinned} (make litertjs-package installs the lockfile's)"
        )
    return script


def pages(site: Path, root: Path, relaxed: Path | None) -> dict[str, str]:
    """The site copied into `root`, a folder a WASM build (`BUILDS`): the compat one as
    written, the relaxed-SIMD one (where `relaxed`, its `.js`, is given) with that build
    beside the other and app.js loading it. Returns each build's folder name."""
    folders = {"compat": "compat"}
    shutil.copytree(site, root / "compat")
    if relaxed is not None:
        copy = root / "relaxed_simd"
        shutil.copytree(site, copy)
        for path in (relaxed, relaxed.with_suffix(".wasm")):
            shutil.copyfile(path, copy / "litertjs" / path.name)
        app = (copy / "app.js").read_text()
        shipped = f"./litertjs/{BUILDS['compat']}.js"
        if app.count(shipped) != 1:
            raise SystemExit(f"{site / 'app.js'} does not load {shipped} once: cannot swap it")
        (copy / "app.js").write_text(app.replace(shipped, f"./litertjs/{relaxed.name}"))
        folders["relaxed_simd"] = "relaxed_simd"
    return folders


def summary(milliseconds: np.ndarray) -> dict:
    """`[passes, sentences]` -> median, p95 and fastest (median of each sentence's best)."""
    return {
        "median_ms": float(np.median(milliseconds)),
        "p95_ms": float(np.percentile(milliseconds, 95)),
        "fastest_ms": float(np.median(milliseconds.min(axis=0))),
    }


def _open_page(context, url: str, build: str) -> tuple:
    """A page of `url` loaded: `(page, seconds to load)`, checking that it fetched `build`."""
    start = time.perf_counter()
    page = context.new_page()
    page.goto(url)
    page.wait_for_function(
        "window.translatorReady === true || window.translatorError !== undefined",
        timeout=300_000,
    )
    seconds = time.perf_counter() - start
    if error := page.evaluate("window.translatorError"):
        raise RuntimeError(f"{url}: the page could not load its model: {error}")
    fetched = page.evaluate(LOADED)
    if f"{BUILDS[build]}.wasm" not in fetched:
        raise RuntimeError(f"{url}: the page did not fetch {BUILDS[build]}.wasm ({fetched})")
    return page, seconds


def run(site: Path, sentences: list[str], repeats: int, relaxed: Path | None = None) -> dict:
    from tests import browser

    interpreter = interpreter_runs(site)
    with tempfile.TemporaryDirectory() as folder, browser.served(folder) as server:
        folders = pages(site, Path(folder), relaxed)
        # The browser opens on the folder's listing; each build's page in its context.
        with browser.opened(server.url) as (page, foreign):
            loaded, engines = {}, {"interpreter": interpreter}
            for build in folders:
                opened, loaded[build] = _open_page(
                    page.context, server.url + folders[build] + "/", build
                )
                engines[build] = lambda texts, opened=opened: opened.evaluate(TIMED, texts)
            for engine in engines.values():  # warm-up
                engine(sentences)
            names = list(engines)
            times = {name: [] for name in names}
            answers = {}
            for i in range(repeats):
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    out = engines[name](sentences)
                    times[name].append([ms for ms, _ in out])
                    answers[name] = [text for _, text in out]
        if foreign:
            raise RuntimeError(f"the page asked other hosts for {foreign}")
    return {
        "site": str(site),
        "sentences": len(sentences),
        "repeats": repeats,
        "model_bytes": (site / "model.tflite").stat().st_size,
        "page_load_s": loaded,
        "same_as_interpreter": {
            name: sum(a == b for a, b in zip(answers[name], answers["interpreter"], strict=True))
            for name in names
            if name != "interpreter"
        },
        **{name: summary(np.array(times[name])) for name in names},
    }


def table(result: dict) -> str:
    rows = [
        "| engine | median ms | p95 ms | fastest ms | same as ai-edge-litert | page load s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, label in LABELS.items():
        if name not in result:
            continue
        figures = result[name]
        same = result["same_as_interpreter"].get(name)
        same = "" if same is None else f"{same}/{result['sentences']}"
        load = result["page_load_s"].get(name)
        load = "" if load is None else f"{load:.1f}"
        rows.append(
            f"| {label} | {figures['median_ms']:.1f} | {figures['p95_ms']:.1f} | "
            f"{figures['fastest_ms']:.1f} | {same} | {load} |"
        )
    rows.append(f"\n{result['model_bytes']} bytes of model, {result['repeats']} passes")
    return "\n".join(rows)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", required=True, type=Path, help="a site of --format web")
    parser.add_argument("--sentences", type=int, default=30, help="the first N test verses")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--litertjs-package",
        type=Path,
        help="the lockfile's @litertjs/core package folder (make litertjs-package writes "
        "build/litertjs-core): also time its relaxed-SIMD WASM build",
    )
    args = parser.parse_args(argv)
    relaxed = None if args.litertjs_package is None else relaxed_build(args.litertjs_package)
    from keras_transformer import corpus

    sentences = list(corpus.read_tsv(TEST, "en", "es").sources)[: args.sentences]
    result = run(args.site, sentences, args.repeats, relaxed)
    print(table(result))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
