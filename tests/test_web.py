"""The web site (`kt.export.web`): its files (the page, the builtin-ops LiteRT file, LiteRT.js
shipped inside the package); served from loopback and opened in headless Chromium, it
translates as the SavedModel does and asks no other host for anything; its service worker
keeps it for offline use; a model that cannot be fetched is said on the page."""

import json
import math
import re
import shutil
import urllib.error
import urllib.request

import pytest

from keras_transformer import decoding as kt_decoding
from keras_transformer import export, serving
from keras_transformer.serving import formats
from tests import bible, browser
from tests.test_litert import NLLB, NLLB_LINES
from tests.test_litert_builtin import MAX_LENGTH, SEARCHES, alike, verses

TRANSLATE = """async (texts) => {
  const out = [];
  for (const t of texts) out.push(await window.translate(t));
  return out;
}"""
# The site's files that its service worker stored, by the URL's path (each store of the origin).
STORED = """async () => {
  const paths = [];
  for (const name of await caches.keys()) {
    for (const request of await (await caches.open(name)).keys()) {
      paths.push(new URL(request.url).pathname);
    }
  }
  return paths.sort();
}"""


def loaded(page) -> None:
    """Waits until the page has loaded its model (or failed to); fails naming its error."""
    page.wait_for_function(
        "window.translatorReady === true || window.translatorError !== undefined",
        timeout=180_000,
    )
    assert page.evaluate("window.translatorError") is None


def typed_and_shown(page, text: str) -> str:
    """Types `text` in the page's box, presses its button, and returns the translation the
    page shows once it says Ready."""
    page.fill("#text", text)
    page.click("#go")
    page.wait_for_function(
        "document.getElementById('status').textContent === 'Ready.' && "
        "document.getElementById('translation').textContent !== ''",
        timeout=60_000,
    )
    return page.locator("#translation").text_content()


def worker_files(site) -> list[str]:
    """The files that the site's service worker stores at install (its `FILES`)."""
    text = (site / export.web.SERVICE_WORKER).read_text()
    [files] = re.findall(r"^const FILES = (\[.*\]);$", text, re.MULTILINE)
    return json.loads(files)


@pytest.fixture(scope="module")
def tiny():
    """An untrained tiny model (the bundled vocabulary, max_length 24, one layer a side)."""
    return bible.tiny_model(max_length=MAX_LENGTH)


@pytest.fixture(scope="module")
def site(tiny, tmp_path_factory):
    """The tiny model's site (beam search), and its SavedModel beside it."""
    model, vocabularies = tiny
    root = tmp_path_factory.mktemp("web")
    settings = SEARCHES["beam"]
    written = export.export(
        model, root / "site", format="web", vocabularies=vocabularies, decoding=settings
    )
    saved = export.export(model, root / "saved", vocabularies=vocabularies, decoding=settings)
    return written, saved


def test_the_site_s_files(site):
    written, _ = site
    assert sorted(p.name for p in written.iterdir()) == [
        "app.js",
        "index.html",
        "litertjs",
        "manifest.json",
        "model.tflite",
        "service-worker.js",
    ]
    assert sorted(p.name for p in (written / "litertjs").iterdir()) == [
        "litert_wasm_compat_internal.js",
        "litert_wasm_compat_internal.wasm",
        "litertjs-core.js",
        "litertjs-wasm-utils.js",
    ]
    facts = json.loads((written / "manifest.json").read_text())
    assert facts["format"] == "web" and facts["ops"] == "builtin"
    assert facts["litertjs"]["package"] == "@litertjs/core"
    assert facts["litertjs"]["license"] == "Apache-2.0"
    assert facts["litertjs"]["version"] == export.web.litertjs_version()["version"]
    assert formats.find(written).name == "web"
    # Its service worker stores every other file of the site, under a name of their contents.
    others = sorted(
        p.relative_to(written).as_posix()
        for p in written.rglob("*")
        if p.is_file() and p.name != "service-worker.js"
    )
    assert worker_files(written) == ["./", *others]
    [cache] = re.findall(
        r"^const CACHE = '(.*)';$", (written / "service-worker.js").read_text(), re.M
    )
    assert re.fullmatch("kt-web-[0-9a-f]{16}", cache), cache
    # The page names nothing of another host.
    for name in ("index.html", "app.js", "service-worker.js"):
        assert not re.search(r"https?://", (written / name).read_text()), name
    # Its icon is inline: a browser asks for no /favicon.ico, which the site lacks (a 404 in
    # the console; headless Chromium asks for no icon at all, so the page's own line is read).
    assert re.search(r'<link rel="icon" href="data:[^"]*">', (written / "index.html").read_text())


@pytest.mark.slow  # a browser, LiteRT.js's WASM compiled, 30 verses translated in it
@pytest.mark.exact
def test_the_page_translates_as_the_saved_model_in_a_browser(tiny, site):
    """Headless Chromium, the site served from loopback: the page loads the model (a
    progress bar following the download), a typed sentence's translation appears, and
    `window.translate` gives the SavedModel's translation of 30 verses: at least 98% alike,
    each other one parting at a tie (tests/ties.py, beam). No request leaves for another
    host, and the server refuses none (a file the site lacks: an error in the console)."""
    model, vocabularies = tiny
    written, saved = site
    texts = verses(30)
    expected = [h[0].text for h in serving.open(saved).translate([texts[0], *texts])]
    with browser.served(written) as server, browser.opened(server.url) as (page, foreign):
        loaded(page)
        # A model without language codes: no language pickers.
        assert page.evaluate("document.getElementById('languages').hidden") is True
        # The progress bar followed the model's download, and is hidden once it is loaded.
        progress = "(bar => [bar.value, bar.hidden])(document.getElementById('progress'))"
        assert page.evaluate(progress) == [1, True]
        shown = typed_and_shown(page, texts[0])
        translations = page.evaluate(TRANSLATE, texts)
        assert page.evaluate("window.translate('')") == ""
        # Language codes for a model without languages: refused, as kt.serving refuses them.
        refused = "window.translate('God', {target: 'fra_Latn'}).then(() => 'none', e => e.message)"
        assert "takes no language codes" in page.evaluate(refused)
    assert foreign == [] and server.errors() == []
    assert shown == expected[0]
    settings = SEARCHES["beam"]
    same = alike(model, vocabularies, settings, texts, expected[1:], translations)
    assert same >= math.ceil(0.98 * len(texts)), (same, len(texts))


@pytest.mark.slow  # a browser, LiteRT.js's WASM compiled twice
def test_the_page_translates_offline_once_its_service_worker_holds_the_site(site):
    """Headless Chromium with the page's service worker allowed: once the worker controls the
    page, its store holds every file of the site; the server stopped (no server at the
    site's address), the page reloads from the store alone and translates as it did online
    (one engine, one computation: equal). No request, the worker's included, leaves for
    another host."""
    written, _ = site
    texts = [*verses(3), ""]
    with (
        browser.served(written) as server,
        browser.opened(server.url, service_workers=True) as (page, foreign),
    ):
        loaded(page)
        online = page.evaluate(TRANSLATE, texts)
        page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=60_000)
        # The worker controls the page once installed, which stored FILES.
        stored = sorted("/" + name.removeprefix("./") for name in worker_files(written))
        assert page.evaluate(STORED) == stored
        assert server.errors() == []  # the page's and the worker's requests all answered
        server.stop()
        with pytest.raises(urllib.error.URLError):  # offline: nothing answers there
            urllib.request.urlopen(server.url, timeout=5)
        responses = []
        page.on("response", lambda response: responses.append(response))
        page.reload()
        loaded(page)
        offline = page.evaluate(TRANSLATE, texts)
        page.fill("#text", texts[0])
        page.click("#go")
        page.wait_for_function(
            "document.getElementById('translation').textContent !== ''", timeout=60_000
        )
        shown = page.locator("#translation").text_content()
    assert foreign == []
    # Every file of the page came from the worker, none from a server.
    paths = {response.url.removeprefix(server.url) for response in responses}
    assert {"", "app.js", "model.tflite", "manifest.json"} <= paths
    assert all(response.from_service_worker and response.ok for response in responses)
    assert offline == online and offline[-1] == "" and shown == online[0]


@pytest.mark.slow  # a browser, twice
def test_a_model_that_cannot_be_fetched_is_said_on_the_page(site, tmp_path):
    """The page's first load with its model missing (404) or its request failed: the page
    says "The model could not be loaded" with the reason, the button stays disabled, and
    `window.translate` rejects with the same reason. The model is the one request refused."""
    written, _ = site
    missing = tmp_path / "missing"
    shutil.copytree(written, missing, ignore=shutil.ignore_patterns("model.tflite"))
    failed = "document.getElementById('status').textContent"
    reject = "window.translate('Amen.').then(() => 'answered', (error) => error.message)"
    with browser.served(missing) as server, browser.opened(server.url) as (page, foreign):
        page.wait_for_function("window.translatorError !== undefined", timeout=60_000)
        assert page.evaluate(failed) == "The model could not be loaded: ./model.tflite: 404"
        assert page.locator("#go").is_disabled()
        assert page.evaluate(reject) == "./model.tflite: 404"
    assert foreign == [] and server.errors() == [("/model.tflite", 404)]
    with browser.served(written) as server, browser.opened(server.url) as (page, foreign):
        page.route("**/model.tflite", lambda route: route.abort())  # then a fresh load
        page.reload()
        page.wait_for_function("window.translatorError !== undefined", timeout=60_000)
        assert page.evaluate(failed) == "The model could not be loaded: Failed to fetch"
        assert page.locator("#go").is_disabled()
    assert foreign == []


NLLB_SETTINGS = kt_decoding.DecodingSettings(
    beam_size=1, max_extra_length=8, source_prefix="eng_Latn", target_prefix="spa_Latn"
)


@pytest.fixture(scope="module")
def nllb_site(tmp_path_factory):
    """The NLLB fixture's site (greedy; English and Spanish the export's languages, as
    `trainers.import_pretrained --source-language eng_Latn --target-language spa_Latn`
    sets them)."""
    from keras_transformer.pretrained import m2m100

    model, _ = m2m100.load_m2m100(NLLB)
    vocabularies = m2m100.load_vocabularies(NLLB)
    root = tmp_path_factory.mktemp("web_nllb")
    return export.export(
        model, root / "site", format="web", vocabularies=vocabularies, decoding=NLLB_SETTINGS
    )


@pytest.mark.slow  # a browser, LiteRT.js's WASM compiled, the fixture's lines translated
@pytest.mark.exact
def test_the_nllb_page_picks_languages_and_translates_as_ai_edge_litert(nllb_site):
    """The NLLB fixture's site in headless Chromium: the page shows the manifest's codes in
    two selects, the export's languages chosen; French picked, a typed line's translation
    is French; `window.translate(text, {source, target})` gives what LiteRT's stock
    interpreter gives on the same file with those languages, on the fixture's lines (one
    program on the same file: equal, up to the last bits of two builds of LiteRT's kernels,
    so at least all but one line alike, each other one parting at a tie, tests/ties.py). No
    request leaves for another host, and none is refused."""
    from keras_transformer.pretrained import m2m100
    from tests.test_litert_bpe_bytes import translate_builtin

    lines = [line for line in NLLB_LINES if not line.startswith("fra_Latn")]
    requests = [("eng_Latn", "spa_Latn"), ("eng_Latn", "fra_Latn"), ("fra_Latn", "deu_Latn")]
    expected = {request: translate_builtin(nllb_site, lines, *request) for request in requests}
    with browser.served(nllb_site) as server, browser.opened(server.url) as (page, foreign):
        page.wait_for_function(
            "window.translatorReady === true || window.translatorError !== undefined",
            timeout=180_000,
        )
        assert page.evaluate("window.translatorError") is None
        assert page.evaluate("document.getElementById('languages').hidden") is False
        codes = "id => [...document.getElementById(id).options].map(o => o.value)"
        facts = json.loads((nllb_site / "manifest.json").read_text())
        assert page.evaluate(codes, "source") == facts["languages"]["source"]
        assert page.evaluate(codes, "target") == facts["languages"]["target"]
        assert page.input_value("#source") == "eng_Latn"
        assert page.input_value("#target") == "spa_Latn"
        page.select_option("#target", "fra_Latn")
        shown = typed_and_shown(page, lines[0])
        got = {
            request: page.evaluate(
                "async ([texts, source, target]) => { const out = []; for (const t of texts) "
                "out.push(await window.translate(t, {source, target})); return out; }",
                [lines, *request],
            )
            for request in requests
        }
        refused = page.evaluate(
            "window.translate('Hello', {target: 'xxx_Zzzz'}).then(() => '', e => e.message)"
        )
    assert foreign == [] and server.errors() == []
    assert shown == expected["eng_Latn", "fra_Latn"][0]
    assert "xxx_Zzzz" in refused
    model, _ = m2m100.load_m2m100(NLLB)
    vocabularies = m2m100.load_vocabularies(NLLB)
    same = total = 0
    for (source, target), ours in got.items():
        settings = NLLB_SETTINGS.replace(source_prefix=source, target_prefix=target)
        same += alike(model, vocabularies, settings, lines, expected[source, target], ours)
        total += len(lines)
    assert same >= total - 1, (same, total)
    assert got["eng_Latn", "spa_Latn"] != got["eng_Latn", "fra_Latn"]
