"""The Python blocks of the site's pages (docs/getting-started.md, docs/guides/*.md) run as
written: each page's blocks in order, as one script in a fresh process (so a page reads as one
script: a block may use what an earlier one defined), from a temporary folder that has the
bundled corpus as `data` and the repository on PYTHONPATH.

The two walkthroughs of "Using the library" (docs/guides/task.md, and "The model from its
parts" in docs/guides/model.md) run in tests/test_readme.py, with the few documented edits
that make them quick; the page's other blocks do not depend on them and run here. What a page
reads that a user makes beforehand (`make demo`'s export, for docs/guides/serving.md) the
test makes first, small, where the page expects it.
"""

import doctest
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests import programs
from tests.test_readme import MODEL, TASK, walkthrough

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [DOCS / "getting-started.md", *sorted((DOCS / "guides").glob("*.md"))]
NOT_YET = {  # page -> why its blocks do not run here yet
    "guides/pretrained.md": "being rewritten: its blocks run here once the page settles",
}
RUN_IN_TEST_README = [walkthrough(*TASK), walkthrough(*MODEL)]
SLOW = {  # page -> what takes the time
    "guides/decoding.md": "three generations of 40 tokens, eagerly",
    "guides/serving.md": "a SavedModel and a CTranslate2 model exported first",
    "guides/litert.md": "a LiteRT conversion",
}


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks, in order, but those tests/test_readme.py runs."""
    text = page.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    return [block for block in blocks if block not in RUN_IN_TEST_README]


def page_cases():
    for page in PAGES:
        name = page.relative_to(DOCS).as_posix()
        if name in NOT_YET or not python_blocks(page):
            continue
        marks = [pytest.mark.slow] if name in SLOW else []
        yield pytest.param(name, marks=marks, id=name)


def demo_exports(folder: Path) -> None:
    """What `make demo` and the page's `trainers.export --format ctranslate2` command write,
    from an untrained tiny model on the bundled vocabulary: `saved_models/demo/1/` and
    `saved_models/demo-ct2/`. Room for 512 positions: untrained, the model seldom ends a
    translation before CTranslate2's default limit of 256 tokens."""
    import keras

    import keras_transformer as kt
    from keras_transformer import export
    from tests import bible

    vocabularies = bible.vocabularies()
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=vocabularies.target.vocabulary_size(),
        max_length=512,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    model = kt.build_transformer(config)
    export.export(model, folder / "saved_models" / "demo", vocabularies=vocabularies)
    export.export(
        model, folder / "saved_models" / "demo-ct2", format="ctranslate2", vocabularies=vocabularies
    )


PREPARE = {"guides/serving.md": demo_exports}
# page -> the lines its blocks may write to stderr, run as a user runs them (no
# TF_CPP_MIN_LOG_LEVEL): what the page says they write, and nothing of TensorFlow's own.
QUIET = {"guides/litert.md": ["INFO: Created TensorFlow Lite XNNPACK delegate for CPU."]}


@pytest.mark.parametrize("page", page_cases())
def test_the_pages_python_blocks_run(page, tmp_path):
    (tmp_path / "data").symlink_to(ROOT / "data")
    if page in PREPARE:
        PREPARE[page](tmp_path)
    code = "\n\n".join(python_blocks(DOCS / page))
    env = {"PYTHONPATH": ROOT}
    if page in QUIET:
        env["TF_CPP_MIN_LOG_LEVEL"] = None  # unset, as a user's shell leaves it
    result = programs.snippet(code, cwd=tmp_path, env=env, check=False)
    assert result.returncode == 0, f"{page}:\n{code}\n{result.stderr[-3000:]}"
    if page in QUIET:
        assert set(result.stderr.splitlines()) <= set(QUIET[page]), result.stderr[-3000:]


def test_the_pages_left_out_exist():
    for name in NOT_YET:
        assert (DOCS / name).exists(), name


class _Page(HTMLParser):
    """What the tests read of a built page: the text inside `<pre>` and outside it, the
    `<blockquote>`s, the ids of mkdocstrings' object headings, and the URLs of the scripts,
    stylesheets and images it loads."""

    def __init__(self, path: Path):
        super().__init__()
        self.in_pre = 0
        self.code, self.prose = [], []
        self.blockquotes = 0
        self.objects = []
        self.loads = []
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.in_pre += tag == "pre"
        self.blockquotes += tag == "blockquote"
        if "doc-heading" in (attrs.get("class") or "").split() and attrs.get("id"):
            self.objects.append(attrs["id"])
        if tag in ("script", "img") and attrs.get("src"):
            self.loads.append(attrs["src"])
        if tag == "link" and "stylesheet" in (attrs.get("rel") or "") and attrs.get("href"):
            self.loads.append(attrs["href"])

    def handle_endtag(self, tag):
        self.in_pre -= tag == "pre"

    def handle_data(self, data):
        (self.code if self.in_pre else self.prose).append(data)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as `make docs` builds it (--strict: a broken link or an unreadable docstring
    fails), in another process, into a temporary folder."""
    folder = tmp_path_factory.mktemp("site")
    programs.program("mkdocs", "build", "--strict", "--quiet", "--site-dir", folder, timeout=300)
    return folder


def _examples(docstring: str) -> list[str]:
    """The first line of each doctest example of `docstring`, as the site shows it: `>>> `
    and the source, without doctest's `# doctest:` flags (griffe trims them)."""
    return [
        ">>> " + re.sub(r"\s*#\s*doctest:.*$", "", example.source.splitlines()[0])
        for example in doctest.DocTestParser().get_examples(docstring)
    ]


def test_the_references_examples_render_as_code(site):
    """Each docstring example of an object the API reference documents is in a code block of
    its page (Pygments' `<div class="highlight"><pre>`), not in running text or the nested
    block quotes that Markdown makes of `>>>`."""
    import griffe

    package = griffe.load("keras_transformer", search_paths=[str(ROOT)])
    pages = sorted((site / "reference").glob("*/index.html"))
    assert pages, f"no reference page in {site}"
    checked = 0
    for path in pages:
        page = _Page(path)
        name = path.parent.relative_to(site).as_posix()
        assert page.blockquotes == 0, f"{name}: {page.blockquotes} <blockquote>s"
        code, prose = "".join(page.code), "".join(page.prose)
        for object_id in page.objects:
            docstring = package[object_id.removeprefix("keras_transformer.")].docstring
            for line in _examples(docstring.value if docstring else ""):
                assert line in code, f"{name}: {object_id}'s example {line!r} is not code"
                checked += 1
        assert ">>>" not in prose, f"{name}: a `>>>` outside a code block"
    assert checked >= 100, f"only {checked} examples in the reference pages"


def test_no_page_loads_anything_from_the_network(site):
    """The site reads offline: no page loads a script, a stylesheet or an image from another
    host (the readthedocs theme's highlight.js, from a CDN, is switched off in mkdocs.yml;
    Pygments highlights the code when the site is built)."""
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10, f"{len(pages)} pages in {site}"
    for path in pages:
        remote = [url for url in _Page(path).loads if re.match(r"([a-z]+:)?//", url)]
        assert not remote, f"{path.relative_to(site)} loads {remote}"


def test_the_guides_code_is_highlighted(site):
    """The guides' fenced Python blocks come out highlighted by Pygments, at build time."""
    html = (site / "guides" / "task" / "index.html").read_text(encoding="utf-8")
    assert '<div class="highlight"' in html and "<span style=" in html, "guides/task.md"


# config.json's model_type -> the name the docs give the checkpoints kt.pretrained reads.
FAMILIES = {"marian": "OPUS-MT", "m2m_100": "NLLB-200"}


def test_every_checkpoint_family_is_named_where_the_docs_list_them():
    """The pages that say which published checkpoints import, and `from_preset`'s docstring,
    name every family `kt.pretrained` reads; the pretrained guide refuses only the other
    `model_type`s."""
    from keras_transformer import pretrained
    from keras_transformer.models import TransformerSeq2SeqLM

    assert set(FAMILIES) == set(pretrained.LOADERS), "a new reader: name it in FAMILIES"
    places = {
        name: (ROOT / name).read_text(encoding="utf-8")
        for name in ("README.md", "docs/index.md", "docs/guides/task.md")
    }
    places["TransformerSeq2SeqLM.from_preset"] = TransformerSeq2SeqLM.from_preset.__doc__
    for place, text in places.items():
        for family in FAMILIES.values():
            assert family in text, f"{place} does not name {family}"
    guide = (DOCS / "guides" / "pretrained.md").read_text(encoding="utf-8")
    refused = re.search(r"\(`model_type` other than (.*?)[,;)]", guide, re.DOTALL)
    assert refused, "docs/guides/pretrained.md: no `model_type` other than ... clause"
    assert set(re.findall(r"`(\w+)`", refused.group(1))) == set(FAMILIES), refused.group()


# The Markdown that quotes the bundled corpus's sizes: the README, the site's pages, the
# benchmarks and the corpus's own README.
QUOTING_THE_CORPUS = [
    ROOT / "README.md",
    ROOT / "BENCHMARKS.md",
    ROOT / "data" / "bible-en-es" / "README.md",
    *sorted(DOCS.rglob("*.md")),
]
# A number and the split it counts, as the pages write them: "29,397 training pairs", "316
# dev and 1,020 test pairs", "Test split: 1,020 verses", "Dev BLEU (greedy, 316 verses)",
# the corpus README's table ("| dev | 316 |") and its example ('dev.tsv.xz", ...)  # 316').
SPLIT_COUNTS = [
    re.compile(r"(?P<n>\d[\d,]*) (?P<split>training|train|dev|test)\b", re.IGNORECASE),
    re.compile(
        r"\b(?P<split>training|train|dev|test)\b(?: split)?[^.;|]{0,25}?\b(?P<n>\d[\d,]*) "
        r"(?:pairs|verses|sentences)\b",
        re.IGNORECASE,
    ),
    re.compile(r"\| (?P<split>train|dev|test) \| (?P<n>\d[\d,]*) \|"),
    re.compile(r"\b(?P<split>train|dev|test)\.tsv\S* [^#]{0,40}# (?P<n>\d[\d,]*) pairs\b"),
]
SPLITS = {"train": "train", "training": "train", "dev": "dev", "test": "test"}  # word -> split


def corpus_sizes() -> dict[str, int]:
    """The pairs of each split of the corpus `make demo` reads (trainers/configs/demo.yaml's
    `data`), as the library's reader counts them."""
    import yaml

    from keras_transformer.corpus import read_tsv

    data = yaml.safe_load((ROOT / "trainers" / "configs" / "demo.yaml").read_text())["data"]
    languages = data["source_language"], data["target_language"]
    return {
        split: len(read_tsv(ROOT / data[split], *languages)) for split in ("train", "dev", "test")
    }


def test_every_count_of_the_corpus_quoted_is_the_corpus():
    """Each number the pages give with a split's name ("29,397 training pairs") that is
    within a tenth of the split's size names that size, and must be it; one far from it
    counts a part of the split ("the first 32 test verses") and is not checked here."""
    sizes = corpus_sizes()
    quoted, wrong = {split: 0 for split in sizes}, []
    for page in QUOTING_THE_CORPUS:
        text = " ".join(page.read_text(encoding="utf-8").split())
        for pattern in SPLIT_COUNTS:
            for match in pattern.finditer(text):
                split = SPLITS[match["split"].lower()]
                number = int(match["n"].replace(",", ""))
                if abs(number - sizes[split]) <= sizes[split] / 10:
                    quoted[split] += 1
                    if number != sizes[split]:
                        where = page.relative_to(ROOT).as_posix()
                        wrong.append(
                            f"{where}: {match[0]!r}: the {split} split has {sizes[split]:,}"
                        )
    assert not wrong, "\n".join(wrong)
    assert all(quoted.values()), quoted  # the patterns still find the pages' counts


def test_the_serving_guides_table_lists_every_signature_and_its_inputs():
    """docs/guides/serving.md's table of signatures has a row for each signature that the
    SavedModel export (`kt.export.export`) can write (`translation_endpoints`, with
    `serving_prefix` asked for), with its inputs by name, in order."""
    import keras_transformer as kt
    from keras_transformer import export
    from tests import bible

    vocabularies = bible.vocabularies()
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=vocabularies.target.vocabulary_size(),
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    model = kt.build_transformer(config)
    endpoints = export.translation_endpoints(model, vocabularies, prefix_signature=True)
    written = {name: [spec.name for spec in specs] for name, (_, specs) in endpoints.items()}
    text = (DOCS / "guides" / "serving.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \|", text, re.MULTILINE)
    assert {name: re.findall(r"`(\w+)`:", inputs) for name, inputs in rows} == written
