"""The table of export formats (`kt.serving.formats`) and its two doors: `kt.export.export`
writes each format as its former function did (the same manifest, the same translations),
`kt.serving.open` picks each format's runtime by what a path holds and refuses one that holds
none, naming each; the runtimes implement the `Translator` protocol and the three
writers the `Writer` call, and the former names, deprecated, warn and hand their arguments to
the writers."""

import inspect
import json
from pathlib import Path

import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import export, serving
from keras_transformer.export import formats as export_formats
from keras_transformer.serving import formats
from tests import bible
from tests.deprecation import warns

SENTENCES = ["In the beginning God created the heavens.", "Amen.", "", "And God said"]
NOT_AN_EXPORT = (
    "not an exported model: no SavedModel (no saved_model.pb, no version folder), no "
    "CTranslate2 model (model.bin and manifest.json), no LiteRT file (model.tflite) and no web "
    "site (index.html beside model.tflite) in it"
)


def test_the_table_names_each_format_s_writer_runtime_and_signs():
    assert list(formats.FORMATS) == ["savedmodel", "ctranslate2", "litert", "web"]
    assert formats.DEFAULT == "savedmodel"
    runtimes = [entry.runtime for entry in formats.FORMATS.values()]
    assert runtimes == [
        serving.SavedModelTranslator,
        serving.CTranslate2Translator,
        serving.LiteRTTranslator,
        serving.LiteRTTranslator,  # a site's builtin-ops file, outside a browser
    ]
    for name, entry in formats.FORMATS.items():
        written_by = export_formats.writer(name)
        assert written_by is getattr(export, name).write, name
        assert set(entry.options) <= set(inspect.signature(written_by).parameters), name
        assert "manifest" in entry.options, name
    with pytest.raises(ValueError, match="^format='onnx' is not one of 'savedmodel', 'ctr"):
        formats.get("onnx")


@pytest.mark.parametrize("entry", formats.FORMATS.values(), ids=list(formats.FORMATS))
def test_each_runtime_and_writer_take_the_protocols_calls(entry):
    """The calls of `Translator`, `Runtime` and `Writer`, bound to each implementation's
    signature (`isinstance` on an open translator: the slow test below)."""
    runtime = entry.runtime
    inspect.signature(runtime).bind(
        "path", source_prefix=None, target_prefix=None, threads=0, prefix_names=("-s", "-t")
    )
    inspect.signature(runtime.translate).bind(
        None, ["x"], n_best=1, source_prefix=None, target_prefix=None
    )
    inspect.signature(runtime.n_best_problem).bind(None, 2)
    for member in ("translate", "n_best_problem"):
        assert callable(getattr(runtime, member)), member
    writer = export_formats.writer(entry.name)
    options = {name: None for name in entry.options}
    inspect.signature(writer).bind(
        "model", "path", vocabularies=None, decoding=None, quantize=None, **options
    )


def test_a_path_is_recognised_by_what_it_holds(tmp_path):
    model_folder = tmp_path / "saved"
    (model_folder / "3").mkdir(parents=True)
    (model_folder / "12").mkdir()
    (model_folder / "12" / "saved_model.pb").write_bytes(b"")
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "model.bin").write_bytes(b"")
    (ct2 / "manifest.json").write_text(json.dumps({"format": "keras-transformer/ctranslate2"}))
    device = tmp_path / "device"
    device.mkdir()
    (device / "model.tflite").write_bytes(b"")
    (tmp_path / "alone.tflite").write_bytes(b"")
    site = tmp_path / "site"
    site.mkdir()
    for name in ("index.html", "model.tflite", "manifest.json"):
        (site / name).write_bytes(b"")
    found = {
        model_folder: "savedmodel",
        model_folder / "12": "savedmodel",
        ct2: "ctranslate2",
        device: "litert",
        device / "model.tflite": "litert",
        tmp_path / "alone.tflite": "litert",
        site: "web",  # a site holds a LiteRT file too
        site / "model.tflite": "litert",
    }
    for path, name in found.items():
        assert formats.find(path).name == name, path
    assert formats.FORMATS["savedmodel"].locate(model_folder) == model_folder / "12"


def test_open_refuses_a_path_without_an_export_naming_the_three_formats(tmp_path):
    (tmp_path / "model.keras").write_bytes(b"")
    for path in (tmp_path, tmp_path / "missing", tmp_path / "model.keras"):
        with pytest.raises(FileNotFoundError) as refused:
            serving.open(path)
        assert str(refused.value) == f"{path}: {NOT_AN_EXPORT}"


def test_export_refuses_an_unknown_format_or_another_format_s_option_first(tmp_path):
    """Before anything is loaded: the model directory here does not exist."""
    missing = tmp_path / "no-model"
    with pytest.raises(ValueError, match="^format='tflite' is not one of 'savedmodel'"):
        export.export(missing, tmp_path / "out", format="tflite")
    with pytest.raises(TypeError, match=r"^version=2: format='litert' takes no option ver"):
        export.export(missing, tmp_path / "out", format="litert", version=2)
    with pytest.raises(TypeError, match=r"^beam_size=1: format='savedmodel' takes no option"):
        export.export(missing, tmp_path / "out", beam_size=1)  # decoding=settings.replace(...)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def tiny():
    """An untrained tiny model (the bundled vocabulary, max_length 24, one layer a side)."""
    return bible.tiny_model()


BEAM_2 = kt.decoding.DecodingSettings(beam_size=2)
# Each former exporter's replacement, as its DeprecationWarning names it.
REPLACEMENTS = {
    name: f"keras_transformer.export.export(model, path, format='{name}', ...)"
    for name in ("savedmodel", "litert")
}
REPLACEMENTS["ctranslate2"] = (
    "keras_transformer.export.export(model, path, format='ctranslate2', quantize=..., ...)"
)


@pytest.mark.parametrize(
    "former, arguments, handed",
    [
        (
            "savedmodel.export_saved_model",
            {"version": 3, "beam_size": 2, "stopping": "exact", "prefix_signature": True},
            {"version": 3, "prefix_signature": True, "quantize": None, "manifest": None},
        ),
        (
            "ctranslate2.export_ctranslate2",
            {"quantization": "int8", "beam_size": 2, "manifest": {"a": 1}},
            {"quantize": "int8", "manifest": {"a": 1}},
        ),
        (
            "litert.export_litert",
            {"quantize": "int8", "int8_table": "twice", "decoding": BEAM_2},
            {"quantize": "int8", "int8_table": "twice", "manifest": None, "ops": "text"},
        ),
    ],
    ids=["savedmodel", "ctranslate2", "litert"],
)
def test_the_former_names_hand_their_arguments_to_the_writer(
    tiny, tmp_path, monkeypatch, former, arguments, handed
):
    """Each former function, deprecated, warns once under its own name, naming
    `kt.export.export`, and is its format's writer with the former arguments: settings
    overrides folded into `decoding`, CTranslate2's `quantization` as `quantize`."""
    model, vocabularies = tiny
    module_name, function = former.split(".")
    module = getattr(export, module_name)
    calls = []
    monkeypatch.setattr(module, "write", lambda *args, **kwargs: calls.append((args, kwargs)))
    with warns(REPLACEMENTS[module_name], old=f"keras_transformer.export.{former}"):
        if module_name == "litert":  # its former signature: (model, path, *, vocabularies...)
            getattr(module, function)(model, tmp_path, vocabularies=vocabularies, **arguments)
        else:  # (model, vocabularies, directory, *, ...)
            getattr(module, function)(model, vocabularies, tmp_path, **arguments)
    [(args, kwargs)] = calls
    assert args[0] is model and Path(args[1]) == tmp_path
    assert kwargs.pop("vocabularies") is vocabularies
    settings = kwargs.pop("decoding")
    assert settings.beam_size == 2
    assert settings.stopping == arguments.get("stopping", "early")
    assert kwargs == handed


@pytest.mark.parametrize(
    "name, module_name", [("export_saved_model", "savedmodel"), ("export_litert", "litert")]
)
def test_the_package_s_former_names_warn_under_their_own_names(
    tiny, tmp_path, monkeypatch, name, module_name
):
    """`kt.export.export_saved_model` and `kt.export.export_litert`, the package's names of
    its modules' former exporters, each warn once under the name the caller used (the
    modules' own names warn under theirs, above) and hand their arguments to the same
    writer."""
    model, vocabularies = tiny
    module = getattr(export, module_name)
    calls = []
    monkeypatch.setattr(module, "write", lambda *args, **kwargs: calls.append((args, kwargs)))
    former = getattr(export, name)
    with warns(REPLACEMENTS[module_name], old=f"keras_transformer.export.{name}"):
        if module_name == "litert":
            former(model, tmp_path, vocabularies=vocabularies, quantize="int8")
        else:
            former(model, vocabularies, tmp_path, quantize="int8")
    [(args, kwargs)] = calls
    assert args[0] is model and Path(args[1]) == tmp_path
    assert kwargs["vocabularies"] is vocabularies and kwargs["quantize"] == "int8"


def test_litert_translate_text_warns_and_is_the_file_s_serving_default(tiny):
    """The former `kt.export.litert.translate_text`, deprecated, warns once, naming
    `litert_trace.signatures`, and gives its `serving_default`: the same translations (one
    computation, traced twice)."""
    from keras_transformer.export import litert_trace

    model, vocabularies = tiny
    settings = kt.decoding.DecodingSettings(beam_size=1, max_extra_length=4)
    with warns(
        "keras_transformer.export.litert_trace.signatures(model, vocabularies, settings)"
        "['serving_default']"
    ):
        former = export.litert.translate_text(model, vocabularies, settings)
    serving_default = litert_trace.signatures(model, vocabularies, settings)["serving_default"]
    text = tf.constant(SENTENCES)
    translations = former(text)["translations"].numpy().tolist()
    assert translations == serving_default(text)["translations"].numpy().tolist()
    assert len(translations) == len(SENTENCES) and translations[2] == b""


@pytest.mark.parametrize("one_table, table", [(True, "gather"), (False, "constant")])
def test_litert_signatures_one_table_warns_and_is_its_table_read(tiny, one_table, table):
    """The former keyword `one_table` of `kt.export.litert.signatures`, deprecated, warns
    once, naming its `table`, and traces what that `table` traces: the same translations."""
    model, vocabularies = tiny
    settings = kt.decoding.DecodingSettings(beam_size=1, max_extra_length=4)
    with warns(f"table={table!r}"):
        former = export.litert.signatures(model, vocabularies, settings, one_table=one_table)
    now = export.litert.signatures(model, vocabularies, settings, table=table)
    text = tf.constant(SENTENCES)
    translations = former["serving_default"](text)["translations"].numpy().tolist()
    assert translations == now["serving_default"](text)["translations"].numpy().tolist()


def exported_pair(model, vocabularies, root: Path, name: str) -> tuple[Path, Path]:
    """The model written by the format's former function (deprecated: it warns) and by
    `kt.export.export`."""
    if name == "ctranslate2":
        pytest.importorskip("ctranslate2")
    with warns(REPLACEMENTS[name]):
        if name == "savedmodel":
            before = export.export_saved_model(
                model, vocabularies, root / "before", manifest={"n": 1}
            )
        elif name == "ctranslate2":
            before = export.ctranslate2.export_ctranslate2(
                model, vocabularies, root / "before", manifest={"n": 1}
            )
        else:
            before = export.export_litert(
                model, root / "before", vocabularies=vocabularies, manifest={"n": 1}
            )
    after = export.export(
        model, root / "after", format=name, vocabularies=vocabularies, manifest={"n": 1}
    )
    return before, after


@pytest.mark.slow  # each format written twice (a SavedModel's tracing, a LiteRT conversion)
@pytest.mark.parametrize("name", ["savedmodel", "ctranslate2", "litert"])  # a former function each
def test_export_writes_what_the_former_function_wrote_and_open_runs_it(tiny, tmp_path, name):
    model, vocabularies = tiny
    entry = formats.FORMATS[name]
    before, after = exported_pair(model, vocabularies, tmp_path, name)
    manifests = []
    for written in (before, after):
        manifest = json.loads((written / entry.manifest_file).read_text())
        assert manifest.pop("created") and manifest["n"] == 1
        manifests.append(manifest)
    assert manifests[0] == manifests[1]
    # TensorFlow runs in this process already: a SavedModel takes no threads of its own.
    threads = 0 if name == "savedmodel" else 1
    translations = []
    for written in (before, after):
        # A SavedModel's model folder opens its highest version.
        translator = serving.open(written.parent if entry.versioned else written, threads=threads)
        assert type(translator) is entry.runtime
        assert isinstance(translator, serving.Translator)
        assert translator.threads == threads and translator.manifest["n"] == 1
        assert translator.languages == {"source": [], "target": []}
        assert translator.n_best_problem(1) is None
        hypotheses = translator.translate(SENTENCES)
        translations.append([[h.text for h in line] for line in hypotheses])
    assert translations[0] == translations[1]
    assert translations[0][2] == [""]  # an empty line, as every door answers it


# The files each format's export is recognised by (`kt.serving.formats`), as a stand-in
# writer writes them.
SIGNS = {
    "savedmodel": {"saved_model.pb": ""},
    "ctranslate2": {
        "model.bin": "",
        "manifest.json": '{"format": "keras-transformer/ctranslate2"}',
    },
    "litert": {"model.tflite": ""},
    "web": {"index.html": "", "model.tflite": "", "manifest.json": "{}"},
}


@pytest.mark.parametrize("name", list(formats.FORMATS))
def test_export_refuses_an_earlier_export_and_replaces_it_only_once_complete(
    tmp_path, monkeypatch, name
):
    """One rule for the three formats: an export at the destination (the directory, a
    SavedModel's version folder) is refused, naming it and `overwrite=True`; with it, the new
    export is written beside and swapped in, so a failed one leaves the earlier as it was. An
    empty folder is written into. (Each writer stands in by one that writes a file: the
    rule is `kt.export.export`'s, whatever the writer.)"""
    from keras_transformer._files import atomic_directory

    entry = formats.FORMATS[name]
    options = {"version": 1} if entry.versioned else {}

    def write(model, path, *, vocabularies, decoding, quantize, **options):
        written = entry.destination(path, options.get("version"))
        written.parent.mkdir(parents=True, exist_ok=True)  # a SavedModel's folder of versions
        with atomic_directory(written) as temporary:
            temporary.mkdir()
            (temporary / "export").write_text(model)
            for file, text in SIGNS[name].items():
                (temporary / file).write_text(text)
            if model == "fails":
                raise ValueError("the writer failed")
        return written

    monkeypatch.setattr(getattr(export, name), "write", write)
    out = tmp_path / "out"
    destination = entry.destination(out, options.get("version"))
    destination.mkdir(parents=True)
    assert export.export("into an empty folder", out, format=name, **options) == destination
    with pytest.raises(FileExistsError) as refused:
        export.export("new", out, format=name, **options)
    assert str(refused.value) == (
        f"{destination} exists (an earlier export): overwrite=True replaces it once the new "
        "export is complete"
    )
    with pytest.raises(ValueError, match="the writer failed"):
        export.export("fails", out, format=name, overwrite=True, **options)
    assert (destination / "export").read_text() == "into an empty folder"
    assert export.export("new", out, format=name, overwrite=True, **options) == destination
    assert (destination / "export").read_text() == "new"
    signs = {destination / file for file in SIGNS[name]}
    assert set(tmp_path.rglob("*")) == {out, destination, destination / "export", *signs}


@pytest.mark.parametrize(
    "name, there",
    [
        (name, there)
        for name in formats.FORMATS
        for there in (None, *formats.FORMATS)
        if there != name
    ],
)
def test_export_never_replaces_what_is_not_an_earlier_export_of_its_format(tmp_path, name, there):
    """`overwrite=True` replaces an earlier export of the format alone: a folder of one's
    own (None), or another format's export, at the destination is refused by name, before
    anything is loaded (the model here is a path that does not exist), and nothing in it is
    lost."""
    entry = formats.FORMATS[name]
    options = {"version": 1} if entry.versioned else {}
    out = tmp_path / "out"
    held = out / "1" if there == "savedmodel" else out
    for file, text in (SIGNS[there] if there else {"thesis.txt": "mine"}).items():
        (held / file).parent.mkdir(parents=True, exist_ok=True)
        (held / file).write_text(text)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(FileExistsError) as refused:
        export.export(tmp_path / "no-model", out, format=name, overwrite=True, **options)
    assert str(refused.value) == (
        f"{out} exists and holds no earlier {entry.title} export: an export never replaces "
        "it, overwrite=True or not; choose another path"
    )
    assert sorted(tmp_path.rglob("*")) == before


def test_export_refuses_decoding_that_is_not_settings_by_name(tmp_path):
    """`decoding="beam"` (a name, not the settings) is refused by name, before anything is
    loaded (the model here is a path that does not exist)."""
    with pytest.raises(TypeError, match=r"^decoding='beam' must be a kt.decoding.DecodingSettings"):
        export.export(tmp_path / "no-model", tmp_path / "out", decoding="beam")
    assert not (tmp_path / "out").exists()
