"""Reduced-precision exports (`quantize="int8"` or "bfloat16", `kt.export.precision`): a copy
of the model with int8 or bfloat16 weights, the caller's model left as it was; a SavedModel of
it that a process with only tensorflow and tensorflow_text serves through every signature, with
the float32 model's translations on most sentences of a trained model; bfloat16's fallback to
float32 on a CPU without it; and the flags of `trainers.export` and `trainers.evaluate`.

The trained model is the session's `reversal_model` (tests/reversal.py), given words for its
symbols: a vocabulary of 16 whole-word pieces of the bundled SentencePiece model, symbol
`FIRST_SYMBOL + i` the i-th word, so that its text signatures translate "the and for" into
"for and the".
"""

import json
import re
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import export
from keras_transformer.tokenizers.pieces import SPECIAL_PIECES, PieceVocabularyTokenizer
from tests import bible, programs
from tests.cli import run_main
from tests.reversal import FIRST_SYMBOL, SYMBOLS, held_out_data
from tests.test_keras_tools import quantize, young_generation_gc
from tests.test_run_dir import trained_directory

MODES = ("int8", "bfloat16")
SENTENCES = 32  # held-out reversal sentences each signature translates
# Reduced precision may change a few argmaxes, and with them a sentence's translation: at
# least this share of the sentences must come out as the float32 model's (int8 and bfloat16
# both gave every one of them on this model when the test was written).
AGREEMENT = 0.9
# The float32 model's beam search (the export's defaults: beam 4, length penalty 0.6) gives
# the exact reversal of most held-out sentences (its greedy search, of almost all:
# tests/reversal.py).
LEARNED = 0.75


def reversal_vocabularies() -> kt.text.Vocabularies:
    """The reversal task's vocabulary: its 16 symbols as the first 16 pieces of the bundled
    vocabulary that are whole words (a word the SentencePiece model cuts into that one
    piece), numbered `FIRST_SYMBOL`..."""
    shared = bible.vocabularies().source
    words = []
    for piece in shared.get_vocabulary():
        word = piece.removeprefix("\u2581")
        if re.fullmatch("\u2581[A-Za-z]{3,}", piece) and np.asarray(
            shared.tokenize(word)
        ).tolist() == [shared.token_to_id(piece)]:
            words.append(piece)
        if len(words) == SYMBOLS:
            break
    assert len(SPECIAL_PIECES) == FIRST_SYMBOL  # the words are ids FIRST_SYMBOL...
    tokenizer = PieceVocabularyTokenizer(shared.proto, [*SPECIAL_PIECES, *words])
    return kt.text.Vocabularies(tokenizer, tokenizer)


@pytest.fixture(scope="module")
def vocabularies():
    return reversal_vocabularies()


@pytest.fixture(scope="module")
def held_out(reversal_model, vocabularies):
    """`(sentences, source ids, float32 translations, float32 ids)` of the held-out
    reversal pairs: the library's beam search (the float32 export's, tests/test_export.py)."""
    source = held_out_data()[0][:SENTENCES]
    sentences = [detokenize(vocabularies, row) for row in source]
    source_ids = np.pad(source, [[0, 0], [0, 1]])
    source_ids[np.arange(len(source)), np.count_nonzero(source, axis=1)] = 3  # EOS
    ids, _ = kt.decoding.decode(reversal_model, source_ids, kt.decoding.DecodingSettings())
    ids = ids.numpy()
    return sentences, source_ids, [detokenize(vocabularies, row) for row in ids], ids


def detokenize(vocabularies, ids) -> str:
    """The text of a row of ids (0-padded; special ids left out)."""
    return vocabularies.target.detokenize(tf.constant([ids], tf.int32))[0].numpy().decode()


@pytest.fixture(scope="module")
def exports(reversal_model, vocabularies, tmp_path_factory):
    """`{mode: version folder}`: the reversal model exported with each of `MODES` (bfloat16
    as on a CPU that has it, whatever this one has), and the model's weights before."""
    before = [np.array(weight) for weight in reversal_model.get_weights()]
    written = {}
    with pytest.MonkeyPatch.context() as patch, young_generation_gc():
        patch.setattr(export.precision, "cpu_has_bfloat16", lambda: True)
        for mode in MODES:
            directory = tmp_path_factory.mktemp(mode) / "reversal"
            written[mode] = export.export(
                reversal_model, directory, vocabularies=vocabularies, quantize=mode
            )
    return written, before


def test_the_callers_model_is_left_as_it_was(exports, reversal_model):
    _, before = exports
    assert export.precision.weight_type(reversal_model) == "float32"
    for weight, value in zip(reversal_model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(weight, value)


@pytest.mark.parametrize("mode", MODES)
def test_the_manifest_and_the_variables_hold_the_weights_type(exports, mode):
    version = exports[0][mode]
    manifest = json.loads((version / "assets.extra" / export.MANIFEST).read_text())
    assert manifest["quantize"] == mode and "quantize_fallback" not in manifest
    loaded = tf.saved_model.load(str(version))
    dtypes = {variable.dtype.name for variable in loaded.variables}
    # int8: the projections' and the embedding table's kernels, with float32 scales (and
    # the layer norms); bfloat16: every weight.
    assert dtypes == ({"int8", "float32"} if mode == "int8" else {"bfloat16"})


SERVE_SCRIPT = """
import importlib.abc, json, sys

class Forbidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("keras_transformer", "keras_hub", "trainers"):
            raise ImportError(f"{name} must not be needed to serve")

sys.meta_path.insert(0, Forbidden())
sys.path = [p for p in sys.path if p not in ("", ".")]
import tensorflow as tf
import tensorflow_text  # noqa: F401

request = json.loads(sys.stdin.read())
results = {}
for mode, version in request["exports"].items():
    loaded = tf.saved_model.load(version)
    text = tf.constant(request["sentences"])
    answers = {}
    for name in ("serving_default", "serving_xla"):
        out = loaded.signatures[name](text=text)
        answers[name] = [t.decode("utf-8") for t in out["translation"].numpy()]
    out = loaded.signatures["n_best"](text=text)
    answers["n_best"] = [[t.decode("utf-8") for t in row] for row in out["translations"].numpy()]
    answers["n_best_scores"] = out["scores"].numpy().tolist()
    out = loaded.signatures["translate_ids"](source_ids=tf.constant(request["ids"], tf.int32))
    answers["translate_ids"] = out["ids"].numpy().tolist()
    results[mode] = answers
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("keras_transformer", "keras_hub"))
print(json.dumps({"results": results, "loaded": loaded}))
"""


def agreement(got, expected) -> float:
    return np.mean([a == b for a, b in zip(got, expected, strict=True)])


@pytest.mark.exact
def test_a_process_with_only_tensorflow_serves_the_reduced_exports_as_float32(
    exports, held_out, reversal_model, vocabularies, tmp_path
):
    """Every signature of each export, in a new process that cannot import this package:
    the float32 model's translations on at least `AGREEMENT` of the sentences, none empty;
    an untrained model's agree with them on few, so the comparison can fail."""
    sentences, source_ids, expected, expected_ids = held_out
    script = tmp_path / "serve.py"
    script.write_text(SERVE_SCRIPT)
    request = {
        "exports": {mode: str(version) for mode, version in exports[0].items()},
        "sentences": sentences,
        "ids": source_ids.tolist(),
    }
    result = programs.python(script, input=json.dumps(request), cwd=tmp_path)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert sorted(report["results"]) == sorted(MODES)
    for mode, answers in report["results"].items():
        for name in ("serving_default", "serving_xla"):
            assert agreement(answers[name], expected) >= AGREEMENT, (mode, name)
            assert all(answers[name]), (mode, name)  # none empty
        best = [row[0] for row in answers["n_best"]]
        assert agreement(best, expected) >= AGREEMENT, mode
        assert np.all(np.diff(answers["n_best_scores"], axis=1) <= 0), mode  # best first
        ids = [tuple(i for i in row if i) for row in answers["translate_ids"]]
        expected_rows = [tuple(i for i in row if i) for row in expected_ids.tolist()]
        assert agreement(ids, expected_rows) >= AGREEMENT, mode
    # The float32 model has learned the task (its translations are the reversed sentences),
    # and an untrained one of its config gives other translations: agreeing with it is not
    # what any model would do.
    reversed_words = [" ".join(sentence.split()[::-1]) for sentence in sentences]
    assert agreement(expected, reversed_words) >= LEARNED
    keras.utils.set_random_seed(0)
    untrained = kt.build_transformer(reversal_model.config)
    ids, _ = kt.decoding.decode(untrained, source_ids, kt.decoding.DecodingSettings())
    assert agreement([detokenize(vocabularies, row) for row in ids.numpy()], expected) < 0.1


def test_the_copy_keeps_the_tasks_preprocessor_and_settings_and_leaves_the_task(vocabularies):
    """`reduced_precision` of a task: a task with int8 (bfloat16) weights, the same
    preprocessor and decoding settings; the task itself unchanged. None: the task itself."""
    keras.utils.set_random_seed(5)
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=20, max_length=16, num_encoder_layers=1, num_decoder_layers=1
    )
    settings = kt.decoding.DecodingSettings(beam_size=2, length_penalty=1.0)
    task = kt.models.TransformerSeq2SeqLM.from_transformer(
        kt.build_transformer(config), vocabularies, decoding=settings
    )
    before = [np.array(weight) for weight in task.get_weights()]
    assert export.precision.reduced_precision(task, None) == (task, "float32", None)
    with pytest.MonkeyPatch.context() as patch, young_generation_gc():
        patch.setattr(export.precision, "cpu_has_bfloat16", lambda: True)
        copies = {mode: export.precision.reduced_precision(task, mode) for mode in MODES}
    for mode, (copy, weights, fallback) in copies.items():
        assert (type(copy), weights, fallback) == (type(task), mode, None)
        assert copy.preprocessor is task.preprocessor and copy.decoding == settings
        assert export.precision.weight_type(copy) == mode
    kernel = copies["int8"].model.backbone.encoder.encoder_layers[0].self_attention.query_dense
    assert kernel.quantization_mode == "int8"
    assert {w.dtype for w in copies["bfloat16"].model.weights} == {"bfloat16"}
    assert export.precision.weight_type(task) == "float32"
    for weight, value in zip(task.get_weights(), before, strict=True):
        np.testing.assert_array_equal(weight, value)


@pytest.mark.parametrize("change", ["int8", "lora"])
def test_a_quantized_or_lora_model_is_refused_before_anything_is_written(change, tmp_path):
    model = kt.build_transformer(
        kt.TransformerConfig.preset(
            "tiny", vocab_size=bible.vocabularies().target.vocabulary_size(), max_length=16,
            num_encoder_layers=1, num_decoder_layers=1,
        )
    )  # fmt: skip
    embedding = model.target_embedding.token_embedding
    if change == "int8":
        embedding.quantize("int8")
    else:
        embedding.enable_lora(2)
    with pytest.raises(ValueError, match=f"{embedding.path} is already quantized or has LoRA"):
        export.export(
            model, tmp_path / "out", vocabularies=bible.vocabularies(), quantize="bfloat16"
        )
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"quantize='int4' must be None or one of \('int8'"):
        export.precision.reduced_precision(model, "int4")


def test_bfloat16_falls_back_to_float32_on_a_cpu_without_it(monkeypatch, tmp_path):
    """Where the CPU has no bfloat16 arithmetic, the export writes the float32 model, with a
    warning, and its manifest says so. (The SavedModel's writing is stubbed: it is the
    float32 one that tests/test_export.py checks.)"""
    written = []

    def write(path, endpoints, model, tokenizers):
        written.append(model)
        Path(path).mkdir()

    monkeypatch.setattr(export.precision, "cpu_has_bfloat16", lambda: False)
    monkeypatch.setattr(export.savedmodel, "write_saved_model", write)
    vocabularies = bible.vocabularies()
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=vocabularies.target.vocabulary_size(), max_length=16,
        num_encoder_layers=1, num_decoder_layers=1,
    )  # fmt: skip
    model = kt.build_transformer(config)
    with pytest.warns(UserWarning, match="no native bfloat16 arithmetic"):
        version = export.export(
            model, tmp_path / "out", vocabularies=vocabularies, quantize="bfloat16"
        )
    assert written == [model]
    manifest = json.loads((version / "assets.extra" / export.MANIFEST).read_text())
    assert manifest["quantize"] == "float32"
    assert "AVX512_BF16" in manifest["quantize_fallback"]


@pytest.mark.parametrize(
    "cpuinfo, native",
    [
        ("flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile\n", True),  # Cooper Lake on
        ("flags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n", True),  # Sapphire Rapids
        ("flags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n", False),  # Cascade Lake
        ("Features\t: fp asimd sve bf16 i8mm\n", True),  # Arm with BF16 (Graviton 3)
        ("Features\t: fp asimd crc32 atomics\n", False),  # Arm without (Graviton 2)
        (None, False),  # no /proc/cpuinfo (macOS, Windows)
    ],
)
def test_the_cpu_probe_reads_the_bfloat16_flags(cpuinfo, native, tmp_path):
    path = tmp_path / "cpuinfo"
    if cpuinfo is not None:
        path.write_text("processor\t: 0\n" + cpuinfo)
    assert export.precision.cpu_has_bfloat16(path) is native


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A trained directory (an untrained tiny model, written as trainers.train writes one)."""
    path = tmp_path_factory.mktemp("model")
    run, model = trained_directory(path)
    run.save_trained(model, run.load_vocabularies())
    return path


def test_export_cli_writes_an_int8_saved_model(model_dir, tmp_path):
    result = run_main(
        "trainers.export", "--model-dir", model_dir, "--out", tmp_path / "sm", "--quantize", "int8"
    )
    assert "(SavedModel for TF Serving, int8 weights)" in result.stdout
    manifest = json.loads((tmp_path / "sm" / "1" / "assets.extra" / export.MANIFEST).read_text())
    assert manifest["quantize"] == "int8"
    keras_manifest = json.loads((tmp_path / "sm" / "keras" / export.MANIFEST).read_text())
    assert "quantize" not in keras_manifest  # the Keras model stays float32, for fine-tuning
    # Again, over the earlier export: keras/ replaced (--overwrite), a version added beside,
    # with the signatures that take prefixes (--prefix-signature).
    (tmp_path / "sm" / "keras" / "earlier").write_text("")
    result = run_main("trainers.export", "--model-dir", model_dir, "--out", tmp_path / "sm",
                      "--overwrite", "--prefix-signature")  # fmt: skip
    assert result.stdout.startswith(f"wrote {tmp_path / 'sm' / '2'} (SavedModel for TF Serving")
    manifest = json.loads((tmp_path / "sm" / "2" / "assets.extra" / export.MANIFEST).read_text())
    assert {"serving_prefix", "serving_languages"} <= set(manifest["signatures"])
    assert sorted(p.name for p in (tmp_path / "sm").iterdir()) == ["1", "2", "keras"]
    assert sorted(p.name for p in (tmp_path / "sm" / "keras").iterdir()) == [
        export.MANIFEST, "model.keras", "vocab"
    ]  # fmt: skip


def test_the_programs_refuse_to_quantize_a_quantized_model_before_writing(model_dir, tmp_path):
    """A directory whose preset was saved quantized: `--quantize` is refused in one line by
    trainers.export and trainers.evaluate, and nothing is written."""
    quantized = tmp_path / "model"
    shutil.copytree(model_dir, quantized)
    task = kt.models.TransformerSeq2SeqLM.from_preset(model_dir)
    quantize(task)
    task.save_to_preset(quantized)
    out = tmp_path / "out"
    result = run_main(
        "trainers.export", "--model-dir", quantized, "--out", out, "--quantize", "int8",
        check=False,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is already quantized or has LoRA adapters" in lines[0], lines
    assert not out.exists()
    (tmp_path / "src.txt").write_text("God said.\n")
    own = ("--source", tmp_path / "src.txt", "--reference", tmp_path / "src.txt")
    result = run_main(
        "trainers.evaluate", "--model-dir", quantized, *own, "--quantize", "int8",
        "--output", out, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "is already quantized" in result.stderr
    assert not out.exists()


def test_export_cli_passes_quantize_to_ctranslate2_and_keeps_quantization(
    model_dir, monkeypatch, tmp_path
):
    """`--quantize` is CTranslate2's weight type too (its writer's `quantize`, which
    `kt.export.export` hands it); `--quantization`, its former name, still works, with a
    warning."""
    asked = []

    def write(task, out, *, quantize=None, manifest=None, **_):
        asked.append(quantize)
        out.mkdir()
        (out / "manifest.json").write_text(json.dumps({"quantize": quantize}))
        return out

    monkeypatch.setattr(export.ctranslate2, "write", write)
    common = ("trainers.export", "--model-dir", model_dir, "--format", "ctranslate2")
    result = run_main(*common, "--out", tmp_path / "a", "--quantize", "int8_float16")
    assert "int8_float16 weights" in result.stdout and "deprecated" not in result.stderr
    result = run_main(*common, "--out", tmp_path / "b", "--quantization", "int8")
    assert result.stderr.startswith("warning: --quantization is deprecated; use --quantize")
    assert asked == ["int8_float16", "int8"]


@pytest.mark.parametrize(
    "options, message",
    [
        (["--quantize", "int2"], "argument --quantize: invalid choice: 'int2'"),
        (
            ["--quantize", "int4"],
            "--quantize int4: --format savedmodel takes int8 or bfloat16 (--quantize int4 "
            "applies to --format litert only)",
        ),
        (
            ["--quantize", "int8", "--quantization", "bfloat16"],
            "--quantization bfloat16 and --quantize int8 disagree",
        ),
    ],
)
def test_export_cli_refuses_bad_quantize_flags_before_loading(tmp_path, options, message):
    result = run_main(
        "trainers.export", "--model-dir", tmp_path, "--out", tmp_path / "out", *options,
        check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


def test_evaluate_runs_the_copy_export_writes(model_dir, tmp_path, monkeypatch):
    """`trainers.evaluate --quantize bfloat16` translates with the weights the export
    would write: float32 on a CPU without bfloat16, as its scores say, with the warning."""
    monkeypatch.setattr(export.precision, "cpu_has_bfloat16", lambda: False)
    (tmp_path / "src.txt").write_text("God said.\n")
    (tmp_path / "ref.txt").write_text("Dijo Dios.\n")
    own = ("--source", tmp_path / "src.txt", "--reference", tmp_path / "ref.txt")
    result = run_main(
        "trainers.evaluate", "--model-dir", model_dir, *own, "--quantize", "bfloat16",
        "--output", tmp_path / "out.hyp",
    )  # fmt: skip
    summary = json.loads(result.stdout)
    assert summary["quantize"] == "float32" and "AVX512_BF16" in summary["quantize_fallback"]
    assert "warning: quantize='bfloat16': bfloat16 asked" in result.stderr
