"""A static web site that translates in the browser: `kt.export.export(task, path,
format="web")`, `trainers.export --format web --out SITE`.

The site holds `index.html` and `app.js` (the page: a text box, a button, the translation, a
progress indicator while the model loads; for an imported NLLB-200 model, two selects of
the manifest's language codes, the export's chosen first; `window.translate(text)`, or
`window.translate(text, {source, target})` with language codes, returns a Promise of the
translation), `model.tflite` (the builtin-ops LiteRT file of `kt.export.litert_builtin`:
UTF-8 bytes in and out, no custom op), `manifest.json` (the file's, "format": "web"),
`service-worker.js` (the site's files kept for offline use, where the browser allows a
service worker: https or localhost; `service_worker` names them), and `litertjs/`:
LiteRT.js (`@litertjs/core`, its version in `manifest.json`'s "litertjs", Apache-2.0), its
WASM build that needs no relaxed SIMD nor threads, so any browser with WebAssembly runs it.
The LiteRT.js files ship inside this package (`web_assets/`, pinned by
`web_assets/npm/package-lock.json`; `make litertjs` refreshes them): nothing is loaded from
another host, and writing a site needs no npm. Any static server serves it (`python -m
http.server -d SITE`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from keras_transformer._files import atomic_directory
from keras_transformer.decoding.settings import DecodingSettings
from keras_transformer.serving.web import FORMAT, PAGE

ASSETS = Path(__file__).parent / "web_assets"
SERVICE_WORKER = "service-worker.js"
PAGE_FILES = (PAGE, "app.js", SERVICE_WORKER)
LITERTJS = "litertjs"  # the folder of LiteRT.js's files, in the package and in a site


def litertjs_version() -> dict:
    """The shipped LiteRT.js: its package, version, license and integrity, from the lockfile."""
    lock = json.loads((ASSETS / "npm" / "package-lock.json").read_text())
    core = lock["packages"]["node_modules/@litertjs/core"]
    return {
        "package": "@litertjs/core",
        "version": core["version"],
        "license": core["license"],
        "integrity": core["integrity"],
    }


def write(
    model,
    path,
    *,
    vocabularies=None,
    decoding: DecodingSettings | None = None,
    quantize: str | None = None,
    manifest: dict | None = None,
) -> Path:
    """Writes the site at `path` (see the module doc): the web format's writer.

    Args:
        model: a `TransformerSeq2SeqLM`, a directory it loads from, or a trained
            `keras_transformer.Transformer` (with `vocabularies`).
        path: str or path. The site's directory; must not exist yet (written atomically).
        vocabularies: its `keras_transformer.text.Vocabularies`; None takes the task's.
        decoding: `kt.decoding.DecodingSettings` or None: the search written into the file.
        quantize: str or None. "int8" or "float16" weights (`kt.export.litert.write`'s;
            int8 stores the tied embedding table once, the smaller download); None keeps
            float32. Defaults to None.
        manifest: dict or None. Extra facts for `manifest.json`.

    Returns:
        The directory written.

    Raises:
        ValueError: what the builtin-ops LiteRT file cannot hold, before anything is
            written.
        FileExistsError: the directory exists.

    Examples:
        Skipped by the doctests: a conversion takes a while (`docs/` runs one).

        >>> import keras_transformer as kt  # doctest: +SKIP
        >>> kt.export.export("runs/demo", "site", format="web")  # doctest: +SKIP
    """
    from keras_transformer.export import litert

    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; choose a new directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(path) as temporary:
        written = litert.write(
            model,
            temporary,
            vocabularies=vocabularies,
            decoding=decoding,
            quantize=quantize,
            manifest=manifest,
            # A page's download decides: int8 stores the tied table once (as `--int8-table
            # once` writes a LiteRT file).
            int8_table="once" if quantize == "int8" else None,
            ops="builtin",
        )
        for name in PAGE_FILES:
            shutil.copyfile(ASSETS / name, written / name)
        shutil.copytree(ASSETS / LITERTJS, written / LITERTJS)
        facts = json.loads((written / litert.MANIFEST).read_text())
        facts |= {"format": FORMAT, "litertjs": litertjs_version()}
        (written / litert.MANIFEST).write_text(json.dumps(facts, indent=2) + "\n")
        service_worker(written)
    return path


def service_worker(site: Path) -> None:
    """Writes the site's files into its `service-worker.js` (the package's, copied there),
    for it to store them at install: `FILES`, the site's folder ("./") and every file but the
    worker itself, and `CACHE`, its store's name, "kt-web-" and a digest of their contents
    (a site written again with other files installs anew)."""
    files = sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("*")
        if p.is_file() and p.name != SERVICE_WORKER
    )
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (site / name).read_bytes())
    lines = {
        "const CACHE = 'kt-web';": f"const CACHE = 'kt-web-{digest.hexdigest()[:16]}';",
        "const FILES = ['./'];": f"const FILES = {json.dumps(['./', *files])};",
    }
    text = (site / SERVICE_WORKER).read_text()
    for line, written in lines.items():
        if text.count(line) != 1:  # the package's worker changed without this function
            raise RuntimeError(f"{SERVICE_WORKER} of the package lacks the line {line!r}")
        text = text.replace(line, written)
    (site / SERVICE_WORKER).write_text(text)


__all__ = [
    "ASSETS",
    "LITERTJS",
    "PAGE_FILES",
    "SERVICE_WORKER",
    "litertjs_version",
    "service_worker",
    "write",
]
