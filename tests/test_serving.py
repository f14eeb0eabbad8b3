"""`kt.serving`, the translators of the exported directories: the source prefix is put in
front by the decoding settings' own rule (one file, whether the package is imported or not),
prefixes are checked against an export's vocabulary by the names a caller gives, the package
runs without `keras_transformer/__init__` (as `trainers.translate` loads it) and is the
package's own afterwards, and the translators' former home, `trainers.translate`, still gives
them, with a DeprecationWarning. The translators themselves: tests/test_ctranslate2.py,
tests/test_export.py, tests/test_import_pretrained.py."""

import json
import re
from pathlib import Path

import pytest

from keras_transformer import serving
from keras_transformer.decoding.settings import with_source_prefix
from keras_transformer.serving import common
from tests import programs
from tests.test_source_prefix import SOURCES

ROOT = Path(__file__).resolve().parent.parent
TRANSLATE = "python -m trainers.translate"  # the program's name in its refusals
TRICKY = [
    *SOURCES,
    ">>spa<<Hola",  # not a word of its own
    ">>SPA<< x",
    "__en__",
    "eng_Latn\u3000x",
    "\ufeffeng_Latn x",  # a byte order mark is no space
    "eng_Latn\udcff x",  # an undecodable byte, as trainers.translate reads it
    "x eng_Latn",
]


def test_the_runtime_puts_the_prefix_by_the_settings_rule():
    assert common.with_source_prefix is with_source_prefix  # the package's own module
    for text in TRICKY:
        assert common.prefixed(text, "spa_Latn") == with_source_prefix(text, "spa_Latn"), text
    assert common.prefixed(b"Hola \xff mundo", ">>fra<<") == b">>fra<< Hola \xff mundo"
    assert common.prefixed(b"eng_Latn \xff", "spa_Latn") == b"eng_Latn \xff"
    assert common.prefixed(b" \t", "spa_Latn") == b" \t"
    assert common.prefixed(b"Hola", None) == b"Hola"


NLLB = serving.ExportedVocabulary(
    ["<pad>", "<unk>", "<s>", "</s>", "eng_Latn", "spa_Latn", "\u2581Hola"],
    ["eng_Latn", "spa_Latn"],
)
OPUS = serving.ExportedVocabulary(["<pad>", "<unk>", "<s>", "</s>", ">>spa<<", ">>fra<<", "a"])


def test_prefixes_are_checked_against_the_vocabulary_by_the_callers_names():
    serving.check_prefixes(NLLB, NLLB, "eng_Latn", "spa_Latn")
    serving.check_prefixes(OPUS, OPUS, ">>spa<<")
    serving.check_prefixes(OPUS, OPUS, "Dear sir:", "Y dijo")  # text, no language code
    flags = ("--source-prefix", "--target-prefix")
    with pytest.raises(ValueError, match=r"^--source-prefix='eng_latn': .*mean 'eng_Latn'\?$"):
        serving.check_prefixes(NLLB, NLLB, "eng_latn", names=flags)
    with pytest.raises(ValueError, match=r"^--target-prefix='xxx_Zzzz': 'xxx_Zzzz' is not one"):
        serving.check_prefixes(NLLB, NLLB, None, "xxx_Zzzz", names=flags)
    with pytest.raises(ValueError, match=r"'>>deu<<' is not one of .* codes \(>>spa<<, >>fra<<\)"):
        serving.check_prefixes(OPUS, OPUS, ">>deu<<")
    with pytest.raises(ValueError, match=r"^target_prefix='>>spa<<': .* start of the source"):
        serving.check_prefixes(OPUS, OPUS, None, ">>spa<<")
    with pytest.raises(ValueError, match=r"^source_prefix='  ' must be None or a non-blank"):
        serving.check_prefixes(OPUS, OPUS, "  ")
    assert (OPUS.token_to_id(">>fra<<"), OPUS.token_to_id(">>deu<<")) == (5, 1)


ALONE = """
import json, sys
from keras_transformer import serving
from keras_transformer.core import rules

print(json.dumps({
    "heavy": [m for m in ("tensorflow", "keras", "keras_hub") if m in sys.modules],
    "rules": rules.__file__,
    "prefixed": [serving.common.prefixed(t, "spa_Latn") for t in json.loads(sys.argv[1])],
}))
import keras_transformer as kt

print(json.dumps({
    "same": kt.serving is serving and kt.serving.ctranslate2 is serving.ctranslate2,
    "one rule": kt.decoding.settings.with_source_prefix is rules.with_source_prefix
    and kt.serving.common.with_source_prefix is rules.with_source_prefix,
    "rule": kt.serving.common.with_source_prefix.__code__.co_filename,
}))
"""


@pytest.mark.slow  # the process imports TensorFlow, at the end
def test_the_runtimes_import_light_and_share_the_librarys_rules():
    result = programs.snippet(ALONE, json.dumps(TRICKY), timeout=300)
    alone, imported = map(json.loads, result.stdout.splitlines()[-2:])
    rules = ROOT / "keras_transformer" / "core" / "rules.py"
    assert alone["heavy"] == []
    assert Path(alone["rules"]) == rules  # the one rule, from its one file
    assert alone["prefixed"] == [with_source_prefix(text, "spa_Latn") for text in TRICKY]
    assert imported == {"same": True, "one rule": True, "rule": str(rules)}


def test_the_former_names_in_trainers_translate_warn_and_are_the_librarys():
    import trainers.translate as translate

    moved = {
        "CTranslate2Translator": serving.CTranslate2Translator,
        "Hypothesis": serving.Hypothesis,
        "PieceRules": serving.PieceRules,
        "SavedModelTranslator": serving.SavedModelTranslator,
        "is_ctranslate2": serving.is_ctranslate2,
        "resolve_version": serving.resolve_version,
        "CTRANSLATE2_FORMAT": serving.ctranslate2.FORMAT,
        "WORD_BOUNDARY": serving.pieces.WORD_BOUNDARY,
    }
    for name, new in moved.items():
        with pytest.warns(DeprecationWarning, match=rf"trainers\.translate\.{name} moved to kera"):
            assert getattr(translate, name) is new
    with pytest.warns(DeprecationWarning, match="will be removed in the next release"):
        from trainers.translate import CTranslate2Translator
    assert CTranslate2Translator is serving.CTranslate2Translator
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        translate.nothing  # noqa: B018


def test_translate_help_names_every_translator(capsys):
    """`kt-translate --help` names each of the library's translators, one a format it reads
    (the table's runtimes)."""
    from trainers import translate

    with pytest.raises(SystemExit):
        translate.main(["--help"])
    usage = capsys.readouterr().out
    translators = [entry.runtime.__name__ for entry in serving.FORMATS.values()]
    assert {"SavedModelTranslator", "CTranslate2Translator", "LiteRTTranslator"} <= set(translators)
    assert [name for name in translators if f"`{name}`" not in usage] == []


@pytest.mark.parametrize(
    "kind, files",
    [("litert", ["model.tflite"]), ("ctranslate2", ["model.bin", "shared.model"])],
)
def test_a_damaged_manifest_is_named_by_the_translators_and_the_program(tmp_path, kind, files):
    """An export whose manifest.json is not valid JSON (a LiteRT file's, a CTranslate2
    directory's): the translator and `trainers.translate` (in a process of its own) name the
    file and what is wrong with it, in one line (issue 66), before the model loads."""
    directory = tmp_path / kind
    directory.mkdir()
    for name in files:
        (directory / name).write_bytes(b"not read")
    manifest = directory / "manifest.json"
    manifest.write_text('{"format": "keras-transformer/ctranslate2",}')
    expected = f"{manifest}: not valid JSON (Expecting property name enclosed in double quotes"
    translator = serving.LiteRTTranslator if kind == "litert" else serving.CTranslate2Translator
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}"):
        translator(directory)
    result = programs.program("trainers.translate", "--model", directory, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"{TRANSLATE}: error: {expected}"), result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("without", ["manifest", "decoding"])
@pytest.mark.parametrize(
    "kind, files",
    [("litert", ["model.tflite"]), ("ctranslate2", ["model.bin", "shared.model"])],
)
def test_an_export_without_its_manifest_or_its_decoding_is_refused(tmp_path, kind, files, without):
    """A LiteRT file or a CTranslate2 directory without its manifest.json, or beside one
    without its `decoding` entry: one rule, the export's settings are never guessed. The
    translator, `kt.serving.open` and `trainers.translate` (in a process of its own) refuse
    it in one line naming the file and what is missing, before the model loads."""
    directory = tmp_path / kind
    directory.mkdir()
    for name in files:
        (directory / name).write_bytes(b"not read")
    model = directory / files[0]
    export = model if kind == "litert" else directory  # the path each door takes
    if without == "manifest":
        message = {
            "litert": f"{model}: no manifest.json beside it (the export's decoding settings "
            "and languages): keep the manifest.json that trainers.export wrote beside the file",
            "ctranslate2": f"{directory}: no manifest.json beside model.bin (the export's "
            "vocabulary and decoding settings): keep the manifest.json that trainers.export "
            "wrote in it",
        }[kind]
    else:
        facts = {"format": "keras-transformer/ctranslate2", "vocabulary": {}}
        (directory / "manifest.json").write_text(json.dumps(facts))
        message = (
            f"{directory / 'manifest.json'}: no 'decoding' entry in it; export the model "
            "again, or restore the file from the export"
        )
    translator = serving.LiteRTTranslator if kind == "litert" else serving.CTranslate2Translator
    for door in (translator, serving.open):
        with pytest.raises((FileNotFoundError, ValueError)) as refused:
            door(export)
        assert str(refused.value) == message
    result = programs.program("trainers.translate", "--model", export, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"{TRANSLATE}: error: {message}\n"


def test_a_ctranslate2_translator_names_a_path_that_is_no_ctranslate2_directory(tmp_path):
    """A missing folder, a folder without CTranslate2's model, and a CTranslate2 folder whose
    manifest says no format: one error naming the path or the manifest, where a 16-line
    traceback through pathlib or "no CTranslate2 model" came (a new user's trial, issue 66);
    `trainers.translate` names the manifest too, in a process of its own."""
    (tmp_path / "run").mkdir()
    for path, problem in ((tmp_path / "missing", "no such folder"), (tmp_path / "run", None)):
        problem = problem or "no CTranslate2 model in it"
        expected = f"{path}: {problem}; CTranslate2Translator takes the directory that"
        with pytest.raises(FileNotFoundError, match=f"^{re.escape(expected)}"):
            serving.CTranslate2Translator(path)
    directory = tmp_path / "ctranslate2"
    directory.mkdir()
    (directory / "model.bin").write_bytes(b"not read")
    (directory / "manifest.json").write_text('{"decoding": 3}')
    expected = f"{directory / 'manifest.json'}: no 'format' entry in it"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}"):
        serving.CTranslate2Translator(directory)
    result = programs.program("trainers.translate", "--model", directory, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith(f"{TRANSLATE}: error: {expected}"), result.stderr


def test_translate_refuses_negative_threads_naming_the_flag(tmp_path):
    """`--threads -1`: argparse's refusal naming the flag, before any work (the library's
    message named its parameter, `threads=-1`)."""
    result = programs.program(
        "trainers.translate", "--model", tmp_path, "--threads", "-1", check=False
    )
    assert result.returncode == 2
    assert "argument --threads: -1 must be >= 0" in result.stderr.splitlines()[-1]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """An untrained tiny task (seed 3, greedy search) and a translator of each of its three
    exports: `(task, {format: translator})`."""

    import keras_transformer as kt
    from keras_transformer import export
    from tests import bible

    pytest.importorskip("ctranslate2", reason="CTranslate2 (requirements.txt)")
    pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
    model, vocabularies = bible.tiny_model()
    task = kt.models.TransformerSeq2SeqLM.from_transformer(
        model,
        vocabularies,
        decoding=kt.decoding.DecodingSettings(beam_size=1),
    )
    root = tmp_path_factory.mktemp("exports")
    translators = {
        name: serving.open(export.export(task, root / name, format=name))
        for name in ("savedmodel", "ctranslate2", "litert")
    }
    return task, translators


# Not text, and what each door answers: ARGUMENT stands for the door's argument's name.
NOT_TEXT = [
    (None, "ARGUMENT=None: expected TAKES, got NoneType"),
    ([None], "ARGUMENT[0]=None: expected text (str), got NoneType"),
    ([1, 2], "ARGUMENT[0]=1: expected text (str), got int"),
    ([["a", "b"], ["c", "d"]], "ARGUMENT[0]=['a', 'b']: expected text (str), got list"),
]


@pytest.mark.parametrize("inputs, message", NOT_TEXT)
def test_every_translator_refuses_what_is_not_text_as_generate_does(exports, inputs, message):
    """`generate` and the three translators check their sentences with one function
    (`common.lines_of`): the same message, naming each door's argument, where a translator
    raised the runtime's own error (AttributeError, TypeError) or translated a 2-D batch
    (issue 66)."""
    from keras_transformer.models.seq2seq_lm import TAKES

    task, translators = exports
    with pytest.raises(ValueError) as refused:
        task.generate(inputs)
    assert str(refused.value) == message.replace("ARGUMENT", "inputs").replace("TAKES", TAKES)
    for kind, translator in translators.items():
        name = "sentences" if kind == "ctranslate2" else "lines"
        with pytest.raises(ValueError) as refused:
            translator.translate(inputs)
        expected = message.replace("ARGUMENT", name).replace("TAKES", "a list of str")
        assert str(refused.value) == expected, kind
    # Text still translates, one hypothesis a line.
    assert [len(found) for found in translators["litert"].translate(["Amen.", b"x"])] == [1, 1]


def test_a_saved_model_translator_names_a_path_that_is_no_version_folder(tmp_path):
    """A missing path, a model folder (its versions inside) or a file: FileNotFoundError
    naming it, before TensorFlow's own OSError (issue 66)."""
    missing = tmp_path / "on_device" / "demo"
    (tmp_path / "models" / "1").mkdir(parents=True)
    (tmp_path / "file").write_text("")
    cases = [
        (missing, "no such folder"),
        (tmp_path / "models", "no saved_model.pb in it"),
        (tmp_path / "file", "a file, not a folder"),
    ]
    for path, problem in cases:
        expected = f"{path}: {problem}; SavedModelTranslator takes a SavedModel's version folder"
        with pytest.raises(FileNotFoundError, match=f"^{re.escape(expected)}"):
            serving.SavedModelTranslator(path)
