"""The LiteRT export: one file, text in and translations out, whose translations equal the
library's (greedy and beam search) when LiteRT's interpreter runs it in a process that
imports neither Keras, TensorFlow nor this package; only builtin and tensorflow-text ops in
it; SentencePiece's detokenization; refusals before anything is written."""

import json
import os
import re
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import decoding, export
from keras_transformer.export import litert, litert_text
from keras_transformer.special_ids import EOS_ID, UNK_ID
from tests import bible, programs, ties
from tests.cli import run_main

ROOT = Path(__file__).resolve().parent.parent
MAX_LENGTH = 24
SENTENCES = [
    "In the beginning God created the heavens.",
    "Amen.",
    "",
    "   ",
    "And God said, Let there be",
    # Longer than MAX_LENGTH - 1 tokens: cut there, then EOS, as the preprocessor cuts it.
    "And the earth was without form, and void; and darkness was upon the face of the deep. "
    "And the Spirit of God moved upon the face of the waters.",
]

# A device's view of the file: LiteRT's interpreter and tensorflow-text's op registrar (its
# compiled library, loaded without importing tensorflow_text, which imports TensorFlow and
# Keras; the registrar needs TensorFlow's C++ framework library, loaded as a library).
RUN_FILE = """
import ctypes, importlib.util, json, os, sys
from pathlib import Path
import numpy as np
from ai_edge_litert.interpreter import InterpreterWithCustomOps, OpResolverType
# `make test-numerics`: the builtin kernels, as tests/conftest.py gives the test process.
capped = os.environ.get("KT_TEST_NUMERIC_PATH") == "capped"
kernels = {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}

def package(name):
    return Path(importlib.util.find_spec(name).origin).parent

ctypes.CDLL(str(package("tensorflow") / "libtensorflow_framework.so.2"), ctypes.RTLD_GLOBAL)
library = next((package("tensorflow_text") / "core" / "pybinds").glob("tflite_registrar*.so"))
spec = importlib.util.spec_from_file_location("tflite_registrar", library)
registrar = importlib.util.module_from_spec(spec)
spec.loader.exec_module(registrar)
ops = [registrar.AddFastSentencepieceTokenize, registrar.AddNgramsStringJoin,
       registrar.AddRaggedTensorToTensor]
answers = []
for path in sys.argv[2:]:
    interpreter = InterpreterWithCustomOps(
        custom_op_registerers=ops, model_path=path, **(kernels if capped else {}))
    run = interpreter.get_signature_runner()
    texts = np.array([text.encode() for text in json.loads(sys.argv[1])], dtype=object)
    answers.append([text.decode() for text in run(text=texts)["translations"]])
heavy = ("keras", "tensorflow", "tensorflow_text", "keras_transformer")
loaded = [name for name in heavy if name in sys.modules]
print(json.dumps({"translations": answers, "loaded": loaded}))
"""


@pytest.fixture(scope="module")
def model():
    """An untrained tiny model (seed 3, the bundled vocabulary, one layer each side)."""
    keras.utils.set_random_seed(3)
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=bible.vocabularies().target.vocabulary_size(),
        max_length=MAX_LENGTH,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    return kt.build_transformer(config)


SEARCHES = {"greedy": decoding.DecodingSettings(beam_size=1), "beam": decoding.DecodingSettings()}


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    """The model's LiteRT directories, one a search: name -> directory."""
    root = tmp_path_factory.mktemp("litert")
    return {
        name: export.export(
            model,
            root / name,
            format="litert",
            vocabularies=bible.vocabularies(),
            decoding=settings,
        )
        for name, settings in SEARCHES.items()
    }


def run_files(texts, *paths):
    """The translations of `texts` by the file of each directory, from a new process (see
    RUN_FILE)."""
    pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
    result = programs.snippet(
        RUN_FILE, json.dumps(texts), *(p / "model.tflite" for p in paths), timeout=300
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def alike(model, vocabularies, settings, sentences, ours, theirs) -> int:
    """How many of LiteRT's translations `theirs` equal the library's `ours`; each other
    one must part at a tie (`ties.translations_part_at_a_tie`: the same search in two
    engines whose logits differ in their last bits; greedy, where the texts, tokenized
    back, first part, the model's logits of the two tokens within TIE; beam, where the
    search, replayed with the settings' rules, meets a choice within LAST_BITS)."""
    tolerance = ties.TIE if settings.beam_size == 1 else ties.LAST_BITS
    same = 0
    for sentence, mine, other in zip(sentences, ours, theirs, strict=True):
        if mine == other:
            same += 1
            continue
        assert ties.translations_part_at_a_tie(
            model, vocabularies, settings, sentence, mine, other, tolerance=tolerance
        ), (
            sentence,
            mine,
            other,
        )
    return same


def test_layout_and_manifest(exported, model):
    directory = exported["beam"]
    assert sorted(p.name for p in directory.iterdir()) == ["manifest.json", "model.tflite"]
    facts = json.loads((directory / "manifest.json").read_text())
    assert facts["format"] == "litert"
    assert facts["quantize"] == "float32"
    assert facts["sizes"] == {"model.tflite": (directory / "model.tflite").stat().st_size}
    assert facts["model_config"] == model.config.to_dict()
    assert facts["decoding"]["beam_size"] == 4
    assert facts["decoding"]["max_input_tokens"] == MAX_LENGTH - 1
    assert facts["signatures"]["serving_default"]["outputs"] == {"translations": "string [batch]"}
    assert facts["custom_ops"] == [
        "RaggedTensorToTensor",
        "TFText>FastSentencepieceTokenize",
        "TFText>NgramsStringJoin",
    ]
    assert facts["languages"] == {"source": [], "target": []}
    assert list(facts["signatures"]) == ["serving_default"]


def test_only_builtin_and_text_ops(exported):
    ops = litert.op_names((exported["beam"] / "model.tflite").read_bytes())
    assert "WHILE" in ops and "TFText>FastSentencepieceTokenize" in ops
    assert not [op for op in ops if op.startswith("Flex")]
    assert {op for op in ops if op.upper() != op} <= set(litert.TEXT_OPS)  # the rest: builtins
    with pytest.raises(ValueError, match=r"\['FlexStridedSlice'\]"):
        litert.check_ops(["ADD", "FlexStridedSlice", "TFText>NgramsStringJoin"])


@pytest.mark.exact
def test_translations_equal_the_library_s_without_keras(exported, model):
    """The interpreter's translations equal `kt.evaluation.Translator`'s (the preprocessor's
    text, `kt.decoding.decode`, the same settings), greedy and beam; blank input gives "".
    The rule (tests/ties.py): a translation may differ only where the search parts at a tie
    (`alike`); all but one alike (all of them when written)."""
    answer = run_files(SENTENCES, exported["greedy"], exported["beam"])
    assert answer["loaded"] == []
    for (name, settings), translations in zip(
        SEARCHES.items(), answer["translations"], strict=True
    ):
        vocabularies = bible.vocabularies()
        expected = kt.evaluation.Translator(model, vocabularies, decoding=settings).translate(
            SENTENCES
        )
        same = alike(model, vocabularies, settings, SENTENCES, expected, translations)
        assert same >= len(SENTENCES) - 1, (name, same)
        assert translations[2] == translations[3] == ""
    assert answer["translations"][0] != answer["translations"][1]  # the searches differ


def test_an_empty_batch(exported):
    assert run_files([], exported["greedy"])["translations"] == [[]]


@pytest.mark.exact
def test_the_translator_s_threads(exported):
    """`threads` sets the interpreter's; any number of them translates alike, and a count
    that is not one is refused by name before the file is read. Exactly: the kernels share
    out output tiles among the threads, not the terms of a sum."""
    from keras_transformer.serving import LiteRTTranslator

    pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
    texts = {
        threads: [
            h[0].text
            for h in LiteRTTranslator(exported["beam"], threads=threads).translate(SENTENCES)
        ]
        for threads in (0, 1, 2)
    }
    assert texts[1] == texts[0] == texts[2] and texts[0][0]
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"threads=.*a number of threads"):
            LiteRTTranslator(exported["beam"], threads=bad)


def test_benchmarks_peak_rss_serves_the_file_alone(exported):
    """`benchmarks.peak_rss` (what `benchmarks.serve --rss` runs for each artifact) serves
    the file in a new process without TensorFlow and reports that process's peak RSS; stdin
    that is not a list of strings is refused."""
    pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
    command = ("benchmarks.peak_rss", "litert", exported["greedy"])
    done = programs.program(*command, input=json.dumps(SENTENCES[:2]), timeout=300)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["kind"] == "litert" and report["sentences"] == 2
    # LiteRT and the text ops alone (~110 MiB here); importing TensorFlow takes ~900 MiB.
    assert 10 < report["peak_rss_mb"] < 500
    done = programs.program(*command, input='{"not": "a list"}', timeout=300, check=False)
    assert done.returncode == 2 and "a JSON list of strings" in done.stderr


def test_a_file_without_language_codes_takes_no_prefix(exported):
    from keras_transformer.serving import LiteRTTranslator

    pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
    with pytest.raises(ValueError, match="target_prefix='spa_Latn': this LiteRT file takes no"):
        LiteRTTranslator(exported["greedy"], target_prefix="spa_Latn")
    with pytest.raises(ValueError, match="source_prefix='eng_Latn': this LiteRT file takes no"):
        LiteRTTranslator(exported["greedy"]).translate(["Amen."], source_prefix="eng_Latn")


def test_float16_and_the_stock_search(model, exported, tmp_path):
    """`quantize="float16"` halves the weights; the file is traced on the stock path, the
    speed switch's second copy of the embedding table left out, whatever the switch says."""
    with kt.fast.switched(True):
        half = export.export(
            model,
            tmp_path / "half",
            format="litert",
            vocabularies=bible.vocabularies(),
            quantize="float16",
        )
    facts = json.loads((half / "manifest.json").read_text())
    full = json.loads((exported["beam"] / "manifest.json").read_text())
    assert facts["quantize"] == "float16"
    assert facts["sizes"]["model.tflite"] < 0.6 * full["sizes"]["model.tflite"]
    assert len(run_files(SENTENCES, half)["translations"][0]) == len(SENTENCES)


OPEN_THEN_IMPORT = """
import sys
import keras_transformer as kt
translator = kt.serving.open(sys.argv[1])
light = "tensorflow" not in sys.modules and "keras" not in sys.modules
first = translator.translate(["Jesus wept."])[0][0].text
import hashlib, tensorflow, tensorflow_text, keras
hashlib.sha256(b"x").hexdigest()
print(light, bool(first), flush=True)
"""


def test_a_process_that_opened_a_file_imports_tensorflow_and_keras_after(exported):
    """`kt.serving.open` on a LiteRT file loads tensorflow-text's op library without
    TensorFlow; the same process then imports `hashlib` (OpenSSL), TensorFlow,
    tensorflow-text and Keras, and exits cleanly: the libraries loaded for the file keep
    their symbols to themselves and are not initialized twice (a new process, as a user's
    app would run: it crashed at the import, or at exit)."""
    result = programs.snippet(OPEN_THEN_IMPORT, exported["greedy"], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["True", "True"]


def loop_state(blob: bytes) -> list:
    """The shapes of the search loop's state in `blob` (a LiteRT file): the inputs of the
    WHILE ops of its first subgraph (the signature's), as tuples."""
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    file = schema.Model.GetRootAsModel(blob, 0)
    graph = file.Subgraphs(0)
    codes = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    found = []
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        code = file.OperatorCodes(op.OpcodeIndex())
        if codes.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode())) == "WHILE":
            tensors = (graph.Tensors(op.Inputs(j)) for j in range(op.InputsLength()))
            found += [tuple(t.ShapeAsNumpy()) if t.ShapeLength() else () for t in tensors]
    assert found, "no WHILE op in the file's first subgraph"
    return found


def constants(blob: bytes, shape) -> list:
    """The constants of `blob` (a LiteRT file) of tensors of `shape`: `[(buffer, type)]`,
    one a buffer (LiteRT's schema: type 0 float32, 9 int8, 17 int4), and the file's
    subgraphs. A buffer's bytes are inline (the converter's) or at an offset after the
    flatbuffer (ai-edge-quantizer's)."""
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    file = schema.Model.GetRootAsModel(blob, 0)
    found = set()
    for g in range(file.SubgraphsLength()):
        graph = file.Subgraphs(g)
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            if tensor.ShapeLength() and tuple(tensor.ShapeAsNumpy()) == tuple(shape):
                buffer = file.Buffers(tensor.Buffer())
                if buffer.DataLength() or buffer.Size():  # inline, or after the flatbuffer
                    found.add((tensor.Buffer(), tensor.Type()))
    return sorted(found), file.SubgraphsLength()


def test_int8_stores_the_table_twice_by_default_and_the_step_once(model, exported, tmp_path):
    """int8 is at most 40% of float32 (issue 68's bound): by default the tied embedding table
    is stored twice, a lookup copy and the output projection's own int8 weights (the
    projection in int8), and the manifest says so; the search is one loop: three subgraphs
    (the function, the loop's condition and body), the decoder step once, not once a phase.
    `int8_table="once"` stores one int8 table, which the lookups and the projection read (the
    quantizer would store an int8 copy for each use): a table's bytes less."""
    default = export.export(
        model,
        tmp_path / "int8",
        format="litert",
        vocabularies=bible.vocabularies(),
        quantize="int8",
    )
    blob = (default / "model.tflite").read_bytes()
    full = (exported["beam"] / "model.tflite").read_bytes()
    shape = (model.config.vocab_size, model.config.d_model)
    tables, subgraphs = constants(blob, shape)
    assert [kind for _, kind in tables] == [9, 9] and subgraphs == 3  # two int8 tables
    # The lookup copy's rows are gathered a step's at a time inside the loop: the loop does
    # not carry the table (the converter's own lookup copy would be dequantized whole).
    assert shape not in loop_state(blob)
    tables, subgraphs = constants(full, shape)
    assert [kind for _, kind in tables] == [0] and subgraphs == 3  # one float32 table
    assert len(blob) <= 0.4 * len(full), (len(blob), len(full))
    assert json.loads((default / "manifest.json").read_text())["int8_table"] == "twice"
    once = export.export(
        model,
        tmp_path / "once",
        format="litert",
        vocabularies=bible.vocabularies(),
        quantize="int8",
        int8_table="once",
    )
    blob_once = (once / "model.tflite").read_bytes()
    tables, subgraphs = constants(blob_once, shape)
    assert [kind for _, kind in tables] == [9] and subgraphs == 3  # one int8 table
    assert shape in loop_state(blob_once)  # dequantized whole, once a request
    less = (len(blob) - len(blob_once)) / (shape[0] * shape[1])
    assert 0.9 < less < 1.2, less
    assert json.loads((once / "manifest.json").read_text())["int8_table"] == "once"
    with pytest.raises(ValueError, match="int8_table='both' must be None or one of"):
        export.export(
            model,
            tmp_path / "x",
            format="litert",
            vocabularies=bible.vocabularies(),
            quantize="int8",
            int8_table="both",
        )


@pytest.mark.exact
def test_int4_stores_int4_projections_and_agrees_with_float32(model, exported, tmp_path):
    """`quantize="int4"` (ai-edge-quantizer: every projection's weights in int4, the embedding
    table in int8, read once through EMBEDDING_LOOKUP) is at most 25% of float32 (issue 68's
    goal; 20% when written), one int8 table and the step once, builtin and tensorflow-text
    ops only; LiteRT's interpreter runs it in a process without Keras or TensorFlow (on the
    capped path too: `make test-numerics`, LiteRT's builtin kernels). Reduced precision, so
    the rule is agreement, not equality: the greedy int4 file's translations equal the float32
    file's on at least 4 of the 6 sentences (all 6 when written: a margin of two), the blank
    ones "" in both."""
    pytest.importorskip(
        "ai_edge_quantizer", reason="the int4 export's quantizer (requirements.txt)"
    )
    small = export.export(
        model,
        tmp_path / "int4",
        format="litert",
        vocabularies=bible.vocabularies(),
        decoding=SEARCHES["greedy"],
        quantize="int4",
    )
    blob = (small / "model.tflite").read_bytes()
    full = (exported["greedy"] / "model.tflite").read_bytes()
    assert len(blob) <= 0.25 * len(full), (len(blob), len(full))
    shape = (model.config.vocab_size, model.config.d_model)
    tables, subgraphs = constants(blob, shape)
    assert [kind for _, kind in tables] == [9] and subgraphs == 3  # one int8 table
    width = model.config.d_model
    projections, _ = constants(blob, (width, width))  # the attention's: int4 (type 17)
    assert projections and {kind for _, kind in projections} == {17}
    ops = litert.op_names(blob)
    assert "EMBEDDING_LOOKUP" in ops and "FULLY_CONNECTED" in ops
    assert {op for op in ops if op.upper() != op} <= set(litert.TEXT_OPS)  # the rest: builtins
    facts = json.loads((small / "manifest.json").read_text())
    assert facts["quantize"] == "int4" and facts["int8_table"] is None
    answer = run_files(SENTENCES, exported["greedy"], small)
    assert answer["loaded"] == []
    float32, int4 = answer["translations"]
    assert int4[2] == int4[3] == "" and len(int4) == len(SENTENCES)
    same = sum(a == b for a, b in zip(float32, int4, strict=True))
    assert same >= len(SENTENCES) - 2, (same, float32, int4)


def test_without_ai_edge_quantizer_int4_says_what_to_install(monkeypatch):
    from keras_transformer.export import litert_convert

    monkeypatch.setitem(sys.modules, "ai_edge_quantizer", None)  # its import fails
    with pytest.raises(ImportError, match="needs ai-edge-quantizer: pip install ai-edge-quantizer"):
        litert_convert.quantized_int4(b"")


def test_the_int4_quantizer_s_progress_bar_is_held_back_and_its_other_lines_kept(capsys):
    """ai-edge-quantizer draws tqdm's bar however asked (`quantized_int4`): it is held
    back, what else is written to standard error comes back, and an error passes through."""
    import tqdm

    from keras_transformer.export import litert_convert

    with pytest.raises(ValueError, match="the quantizer's error"):
        with litert_convert._without_progress_bars():
            bar = tqdm.tqdm(total=3, desc="Applying Transformations to tensors:", disable=False)
            bar.update(3)
            bar.close()
            print("warning: a line of its own", file=sys.stderr)
            raise ValueError("the quantizer's error")
    assert capsys.readouterr() == ("", "warning: a line of its own\n")


def test_detokenization_is_sentencepiece_s():
    """The file's table-and-join detokenization gives SentencePiece's text: special ids
    left out, the first piece without its leading space, byte pieces joined into UTF-8."""
    vocabularies = bible.vocabularies()
    tokenizer = vocabularies.target
    rng = np.random.default_rng(0)
    vocab = tokenizer.vocabulary_size()
    words = rng.integers(260, vocab, size=(6, 10))  # pieces (ids 4-259 are bytes)
    words[0, :3] = [2, 0, 0]  # specials before the first piece
    words[1, 4:] = 0  # padding
    words[2, 2] = 3  # EOS inside
    texts = ["¿Qué dijo Dios? 漢字", "En el principio creó Dios los cielos y la tierra."]
    tokenized = [[int(i) for i in ids] for ids in tokenizer.tokenize(texts)]
    assert any(4 <= i < 260 for i in tokenized[0])  # byte fallback pieces
    width = max(10, *(len(ids) + 1 for ids in tokenized))
    rows = [list(row) + [0] * (width - 10) for row in words]
    rows += [ids + [3] + [0] * (width - len(ids) - 1) for ids in tokenized]
    ids = tf.constant(rows, tf.int32)
    surfaces = litert.surface_tables(*litert.piece_surfaces(tokenizer.get_vocabulary()))
    source_ids = tf.ones([len(rows), 2], tf.int32)  # not empty: every row is detokenized
    got = litert_text.translations(surfaces, ids, source_ids, width + 2).numpy().tolist()
    expected = kt.text.detokenize(tokenizer, np.asarray(rows))
    assert [text.decode() for text in got] == expected
    assert expected[-2:] == texts


def test_refusals_before_anything_is_written(model, tmp_path):
    vocabularies = bible.vocabularies()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="is under a file"):
        export.export(model, blocker / "out", format="litert", vocabularies=vocabularies)
    cases = [
        ({"quantize": "int2"}, r"quantize='int2' must be None or one of"),
        ({"decoding": decoding.DecodingSettings(n_best=2)}, "n_best=2"),
        ({"decoding": decoding.DecodingSettings(target_prefix="hola")}, "target_prefix="),
        # As trainers.export refuses --int8-table: it wrote a float32 file (issue 66).
        ({"int8_table": "twice"}, "int8_table='twice' applies to quantize='int8' only"),
        ({"int8_table": "once", "quantize": "float16"}, r"only \(quantize='float16'\)"),
    ]
    for arguments, message in cases:
        with pytest.raises(ValueError, match=message):
            export.export(
                model, tmp_path / "out", format="litert", vocabularies=vocabularies, **arguments
            )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    (tmp_path / "taken").mkdir()  # a folder of one's own: never replaced
    (tmp_path / "taken" / "notes.txt").write_text("")
    with pytest.raises(FileExistsError, match="taken exists and holds no earlier LiteRT file"):
        export.export(model, tmp_path / "taken", format="litert", vocabularies=vocabularies)


def test_a_task_with_a_sampler_is_refused(model, tmp_path):
    task = kt.models.TransformerSeq2SeqLM.from_transformer(model, bible.vocabularies())
    task.compile(sampler="top_k")
    with pytest.raises(ValueError, match="draws with a sampler"):
        export.export(task, tmp_path / "out", format="litert")
    assert not (tmp_path / "out").exists()


def weights(blob: bytes) -> list[str]:
    """The sha256 of every constant buffer of `blob` (a LiteRT file), sorted: its weights,
    whatever its tensors' names."""
    import hashlib

    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    file = schema.Model.GetRootAsModel(blob, 0)
    buffers = (file.Buffers(b) for b in range(file.BuffersLength()))
    return sorted(
        hashlib.sha256(buffer.DataAsNumpy().tobytes()).hexdigest()
        for buffer in buffers
        if buffer.DataLength()
    )


def test_convert_in_this_process_gives_the_written_file(model, exported):
    """`litert_convert.convert` (both stages in this process) gives the file that `write`
    writes, its conversion in a process of its own: the same ops and weights."""
    from keras_transformer.export import litert_convert, litert_trace

    functions = litert_trace.signatures(
        model, bible.vocabularies(), SEARCHES["greedy"], table="constant"
    )
    here = litert_convert.convert(functions)
    written = (exported["greedy"] / "model.tflite").read_bytes()
    assert litert.op_names(here) == litert.op_names(written)
    assert weights(here) == weights(written)


def test_a_failed_conversion_leaves_the_earlier_file_and_says_why_in_one_line(
    model, exported, tmp_path
):
    """The converter's process failing (its SavedModel asked for a signature it lacks)
    raises `ConversionError` in one line, the converter's error; an earlier export at the
    destination stays as it was, and nothing else is left beside it. The traced signatures
    (`trace_signatures`) convert, without the model, into the file `write` writes."""
    import shutil

    out = shutil.copytree(exported["greedy"], tmp_path / "out")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    settings = SEARCHES["greedy"]
    traced = litert.trace_signatures(
        model, tmp_path / "traced", vocabularies=bible.vocabularies(), decoding=settings
    )
    plan = traced.plan()
    assert plan["signature_keys"] == ["serving_default"] and plan["quantize"] is None
    broken = {**plan, "signature_keys": ["serving_missing"]}
    (traced.path / "plan.json").write_text(json.dumps(broken))
    with pytest.raises(litert.ConversionError) as failed:
        export.export(traced, out, format="litert", overwrite=True)
    message = str(failed.value)
    assert message.startswith(
        "LiteRT's converter failed: ValueError: Invalid signature key 'serving_missing'"
    )
    assert "\n" not in message
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "traced"]
    (traced.path / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(ValueError, match=r"quantize='int8': the signatures at .* quantize=None"):
        export.export(traced, tmp_path / "again", format="litert", quantize="int8")
    again = export.export(traced, tmp_path / "again", format="litert")
    file, earlier = ((d / "model.tflite").read_bytes() for d in (again, exported["greedy"]))
    assert litert.op_names(file) == litert.op_names(earlier) and weights(file) == weights(earlier)
    facts, earlier_facts = (json.loads((d / "manifest.json").read_text()) for d in (again, out))
    for kept in (facts, earlier_facts):
        kept.pop("created")
    assert facts == earlier_facts


def test_a_converter_killed_is_said_in_one_line(monkeypatch, tmp_path):
    """A conversion process killed (the kernel's out-of-memory killer sends SIGKILL) is one
    line that says so."""
    import signal
    import subprocess

    from keras_transformer.export import litert_child

    def killed(command, **kwargs):
        return subprocess.CompletedProcess(command, -signal.SIGKILL)

    monkeypatch.setattr(litert_child.subprocess, "run", killed)
    with pytest.raises(litert.ConversionError) as failed:
        litert_child.convert_in_child(tmp_path, ["serving_default"], "int8", tmp_path / "x")
    assert str(failed.value) == (
        "LiteRT's converter (a process of its own) was killed by SIGKILL (out of memory?)"
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, slice_run):
    """A model directory of `trainers.train`, briefly trained on the slice (20 updates):
    a copy of conftest's `slice_run`."""
    import shutil

    return shutil.copytree(slice_run, tmp_path_factory.mktemp("litert-run") / "model")


@pytest.mark.slow  # a directory trained first (trainers.train), and two conversions
@pytest.mark.exact
def test_export_and_translate_programs(run_dir, tmp_path):
    """`trainers.export --format litert` writes the file with the directory's settings over
    the flags, int8 smaller than float32; `trainers.translate --model OUT/model.tflite`
    serves it in a process of its own, with the translations of the library's translator
    (kt.serving.LiteRTTranslator) and without TensorFlow or Keras started."""
    from keras_transformer.serving import LiteRTTranslator

    pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
    common = ("trainers.export", "--model-dir", run_dir, "--format", "litert", "--beam-size", "2")
    run_main(*common, "--out", tmp_path / "float32")
    run_main(*common, "--out", tmp_path / "int8", "--quantize", "int8")
    facts = {
        name: json.loads((tmp_path / name / "manifest.json").read_text())
        for name in ("float32", "int8")
    }
    assert facts["int8"]["quantize"] == "int8" and facts["float32"]["quantize"] == "float32"
    assert facts["int8"]["decoding"]["beam_size"] == 2
    assert facts["int8"]["int8_table"] == "twice" and facts["float32"]["int8_table"] is None
    # The table twice (the default): issue 68's bound, as on the tiny model of
    # test_int8_stores_the_table_twice_by_default_and_the_step_once.
    sizes = {name: facts[name]["sizes"]["model.tflite"] for name in facts}
    assert sizes["int8"] <= 0.4 * sizes["float32"], sizes
    lines = ["In the beginning God created the heaven and the earth.", "Jesus wept.", ""]
    translated, imported = programs.program_imports(
        "trainers.translate", "--model", tmp_path / "float32" / "model.tflite",
        input="\n".join(lines) + "\n", timeout=300, check=True,
    )  # fmt: skip
    assert "keras" not in imported and "tensorflow" not in imported, imported
    expected = LiteRTTranslator(tmp_path / "float32").translate(lines)
    assert translated.stdout.splitlines() == [hypotheses[0].text for hypotheses in expected]
    # One file in two processes: alike on one machine. The 20-update model translates the
    # first line to something (no margin).
    assert translated.stdout.splitlines()[-1] == "" and translated.stdout.splitlines()[0]
    int8 = [
        hypotheses[0].text for hypotheses in LiteRTTranslator(tmp_path / "int8").translate(lines)
    ]
    assert len(int8) == 3 and int8[0] and int8[-1] == ""


@pytest.mark.slow  # the trained directory, and a conversion
def test_the_export_program_s_failed_conversion_is_one_line_and_loses_nothing(run_dir, tmp_path):
    """`trainers.export --format litert --overwrite` whose conversion fails in its process
    (int4 where ai-edge-quantizer cannot be imported: a package on PYTHONPATH that fails to
    import stands for it) says so in one line, exit status 2; the earlier export stays as
    it was, and neither the traced signatures nor a half-written file are left."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.tflite").write_bytes(b"the earlier file")
    (out / "manifest.json").write_text('{"format": "litert"}')
    broken = tmp_path / "path" / "ai_edge_quantizer"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('ai_edge_quantizer is broken')\n")
    paths = [str(broken.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    result = programs.program(
        "trainers.export", "--model-dir", run_dir, "--format", "litert", "--out", out,
        "--quantize", "int4", "--beam-size", "1", "--overwrite",
        env={"PYTHONPATH": os.pathsep.join(paths)}, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        "python -m trainers.export: error: quantize='int4' for a LiteRT file needs "
        "ai-edge-quantizer: pip install ai-edge-quantizer (requirements.txt names the version "
        "tested)"
    ]
    assert (out / "model.tflite").read_bytes() == b"the earlier file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "path"]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.tflite"]


@pytest.mark.slow  # the trained directory, and an export stopped partway
def test_a_sigterm_stops_the_export_program_and_leaves_nothing_beside_the_earlier_export(
    run_dir, tmp_path
):
    """SIGTERM while `trainers.export --format litert --overwrite` works (`kill PID`: the
    program handles it as Ctrl-C, `trainers.errors.program`): the process ends as SIGTERM
    ends it, the earlier export stays as it was, and neither the traced signatures' folder
    nor a half-written export is left beside it (the signal's default left the folder, the
    model's size, which no later export removed)."""
    import signal
    import subprocess

    out = tmp_path / "out"
    out.mkdir()
    (out / "model.tflite").write_bytes(b"the earlier file")
    (out / "manifest.json").write_text('{"format": "litert"}')
    process = programs.start(
        "-m", "trainers.export", "--model-dir", run_dir, "--format", "litert", "--out", out,
        "--quantize", "int8", "--beam-size", "1", "--overwrite",
        stdout=subprocess.DEVNULL, text=False,
    )  # fmt: skip
    try:
        # The traced signatures' folder beside --out, being written.
        written = lambda: list(tmp_path.glob(".tmp-*"))  # noqa: E731
        programs.wait_until(written, process, 300, "a folder beside --out")
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM, process.stderr.read().decode()[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.tflite"]
    assert (out / "model.tflite").read_bytes() == b"the earlier file"
    assert (out / "manifest.json").read_text() == '{"format": "litert"}'


@pytest.mark.slow  # the trained directory, and two conversions
def test_the_weights_benchmark_reports_each_file_s_size_and_bleu(run_dir, capsys):
    """`benchmarks.litert_weights` writes the directory's model at each weight type asked
    (float32 always: here with int4, greedy) and reports each file's bytes and test BLEU,
    and both against float32's, as its last line."""
    from benchmarks import litert_weights

    pytest.importorskip(
        "ai_edge_quantizer", reason="the int4 export's quantizer (requirements.txt)"
    )
    flags = ["--model-dir", str(run_dir), "--weights", "int4", "--searches", "greedy"]
    litert_weights.main([*flags, "--sentences", "4"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = {row["weights"]: row for row in result["rows"]}
    assert list(rows) == ["float32", "int4"] and result["sentences"] == 4
    assert rows["float32"]["of_float32"] == 1.0 and rows["float32"]["bleu_against_float32"] == 0
    assert rows["int4"]["bytes"] < rows["float32"]["bytes"]
    assert rows["int4"]["of_float32"] == round(rows["int4"]["bytes"] / rows["float32"]["bytes"], 3)
    assert {row["decoding"] for row in rows.values()} == {"greedy"}


@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--quantize", "bfloat16"],
            "--quantize bfloat16: --format litert takes int8 or int4 or float16",
        ),
        (
            ["--quantize", "int16"],
            "--quantize int16: --format litert takes int8 or int4 or float16",
        ),
        (
            ["--quantize", "float16", "--int8-table", "twice"],
            "--int8-table applies to --format litert --quantize int8 only",
        ),
    ],
)
def test_export_program_refuses_what_a_file_cannot_hold(tmp_path, options, message):
    result = run_main(
        "trainers.export",
        "--model-dir",
        tmp_path,
        "--out",
        tmp_path / "out",
        "--format",
        "litert",
        *options,
        check=False,
    )
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "out").exists()


FIXTURES = ROOT / "tests" / "fixtures"
PLAIN = [
    "In the beginning God created the heavens and the earth.",
    "a",
    ".",
    "",
    "   ",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
]


@pytest.mark.parametrize("name", ["shared", "separate"])
def test_an_opus_mt_vocabulary_s_ids_and_text(name):
    """An imported OPUS-MT vocabulary (SentencePiece's pieces numbered by vocab.json): the
    file's source ids are the preprocessor's (SentencePiece's ids mapped to the list's), and
    its text is the piece tokenizer's (`<unk>` left out, the ends stripped)."""
    import tensorflow_text

    from keras_transformer.models import TransformerSeq2SeqLMPreprocessor, TransformerTokenizer
    from keras_transformer.pretrained import marian

    vocabularies = marian.load_vocabularies(FIXTURES / "marian" / name)
    preprocessor = TransformerSeq2SeqLMPreprocessor(
        TransformerTokenizer(vocabularies), encoder_sequence_length=12, decoder_sequence_length=12
    )
    expected = preprocessor.generate_preprocess(PLAIN)["source_ids"].numpy()
    fast = tensorflow_text.FastSentencepieceTokenizer(vocabularies.source.proto)
    ours = tf.constant(litert_text.our_ids(vocabularies.source), tf.int32)
    got = litert_text.source_ids(fast, tf.constant(PLAIN), 12, ours).numpy()
    np.testing.assert_array_equal(got, expected)

    target = vocabularies.target
    rows = [[int(i) for i in ids] for ids in target.tokenize(PLAIN[:3] + PLAIN[5:])]
    rows[0][1:1] = [UNK_ID]  # left out, as MarianTokenizer's decode leaves it
    width = max(map(len, rows)) + 1
    ids = tf.constant([row + [EOS_ID] + [0] * (width - len(row) - 1) for row in rows])
    surfaces = litert.piece_surfaces(target.get_vocabulary(), unk="", byte_pieces=False)
    texts = litert_text.translations(
        litert.surface_tables(*surfaces), ids, tf.ones_like(ids), width
    )
    assert [t.decode() for t in texts.numpy()] == kt.text.detokenize(target, ids.numpy())


def test_what_a_file_cannot_hold_yet_is_refused(model, tmp_path):
    """A multilingual OPUS-MT vocabulary (>>xx<< tokens, which the file would cut as text),
    M2M100's (language codes, its own decoding), a BPE model with byte fallback (which the
    file's BPE cut does not make) and a prefix that is not an NLLB-200 language code are
    refused by name, before anything is written."""
    from keras_transformer.pretrained import m2m100, marian

    nllb = m2m100.load_vocabularies(FIXTURES / "m2m100" / "nllb-tiny")
    sample = bible.pairs("train", 3000)
    bpe = kt.text.Vocabularies.train(sample.sources, sample.targets, 1000, model_type="bpe")
    cases = [
        (bpe, None, "byte fallback"),
        (marian.load_vocabularies(FIXTURES / "marian" / "shared"), None, "multilingual OPUS-MT"),
        (m2m100.load_vocabularies(FIXTURES / "m2m100" / "m2m100-tiny"), None, "M2M100"),
        (nllb, decoding.DecodingSettings(target_prefix="Hola"), "takes a language code"),
    ]
    for vocabularies, settings, message in cases:
        with pytest.raises(ValueError, match=message):
            export.export(
                model,
                tmp_path / "out",
                format="litert",
                vocabularies=vocabularies,
                decoding=settings,
            )
    assert not (tmp_path / "out").exists()


@pytest.mark.exact
def test_an_imported_opus_mt_model_translates_as_the_library(tmp_path):
    """The OPUS-MT fixture with separate source and target vocabularies: the file's
    translations (greedy) are the library's, but where they first part at a tie of the
    model's logits (tests/ties.py); all but one alike (all when written)."""
    from keras_transformer.pretrained import marian

    model, _ = marian.load_marian(FIXTURES / "marian" / "separate")
    vocabularies = marian.load_vocabularies(FIXTURES / "marian" / "separate")
    greedy = decoding.DecodingSettings(beam_size=1, max_extra_length=8)
    directory = export.export(
        model, tmp_path / "opus", format="litert", vocabularies=vocabularies, decoding=greedy
    )
    translated = run_files(PLAIN, directory)["translations"][0]
    expected = kt.evaluation.Translator(model, vocabularies, decoding=greedy).translate(PLAIN)
    same = alike(model, vocabularies, greedy, PLAIN, expected, translated)
    assert same >= len(PLAIN) - 1, same
    assert translated[0] and translated[3] == translated[4] == ""


def test_without_tensorflow_text_the_error_says_how_to_register_its_ops(monkeypatch):
    from keras_transformer.serving import litert as runtime

    def missing(name):
        raise ImportError(name)

    monkeypatch.delitem(sys.modules, "tensorflow_text")
    monkeypatch.setattr(runtime, "_package", missing)
    with pytest.raises(ImportError, match=r"pip install tensorflow-text, .*SELECT_TFTEXT_OPS"):
        runtime.text_op_registrars()


def test_without_tensorflow_text_the_program_says_so_in_one_line(tmp_path):
    """`trainers.translate` on a LiteRT file where tensorflow-text cannot be imported (a
    package on PYTHONPATH that fails to import stands for it, in a process of its own): one
    line saying how to install its ops, no traceback (issue 66)."""
    from keras_transformer.serving.litert import HOW_TO_REGISTER

    pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
    broken = tmp_path / "path" / "tensorflow_text"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('tensorflow_text is broken')\n")
    model = tmp_path / "model.tflite"
    model.write_bytes(b"not read")  # the ops are looked for first
    decoding = {"beam_size": 1, "length_penalty": 0.6, "max_extra_length": 50}
    (tmp_path / "manifest.json").write_text(json.dumps({"decoding": decoding}))  # read first
    paths = [str(broken.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {"PYTHONPATH": os.pathsep.join(paths)}
    result = programs.program("trainers.translate", "--model", model, env=env, check=False)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"python -m trainers.translate: error: {HOW_TO_REGISTER}"]


NLLB = FIXTURES / "m2m100" / "nllb-tiny"
# Verses, a line that names its own source language, trailing whitespace (a piece of its
# own), characters the vocabulary lacks, blank lines, and one longer than the model's
# max_length (cut there, then EOS).
NLLB_LINES = [
    "In the beginning God created the heavens and the earth.",
    "fra_Latn Au commencement, Dieu créa les cieux et la terre.",
    "Jesus wept. ",
    "Ж 漢字 ﬁne",
    "",
    "   ",
    "And God said, Let there be light: and there was light. " * 8,
]


@pytest.fixture(scope="module")
def nllb(tmp_path_factory):
    """The NLLB-200 fixture, its vocabularies, the settings and its LiteRT directory (greedy,
    English the export's source language, no target language of its own)."""
    from keras_transformer.pretrained import m2m100

    model, _ = m2m100.load_m2m100(NLLB)
    vocabularies = m2m100.load_vocabularies(NLLB)
    settings = decoding.DecodingSettings(beam_size=1, max_extra_length=8, source_prefix="eng_Latn")
    directory = export.export(
        model,
        tmp_path_factory.mktemp("nllb") / "file",
        format="litert",
        vocabularies=vocabularies,
        decoding=settings,
    )
    return model, vocabularies, settings, directory


@pytest.mark.exact
def test_an_nllb_file_translates_as_the_library_with_the_language_of_each_request(nllb):
    """The translator's translations (the `serving_languages` signature) equal
    `kt.evaluation.Translator`'s with each target language; `serving_prefix` takes a target
    language a sentence, the export's source language for all; the manifest lists the
    languages and signatures. As the OPUS-MT test above: alike but where a translation
    first parts at a tie of the model's logits (tests/ties.py)."""
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    from keras_transformer.serving import LiteRTTranslator
    from keras_transformer.serving.litert import text_op_registrars

    model, vocabularies, settings, directory = nllb
    translator = LiteRTTranslator(directory)
    expected = {}
    for language in ("spa_Latn", "fra_Latn"):
        library = kt.evaluation.Translator(
            model, vocabularies, decoding=settings.replace(target_prefix=language)
        ).translate(NLLB_LINES)
        got = translator.translate(NLLB_LINES, target_prefix=language)
        got = [hypotheses[0].text for hypotheses in got]
        with_language = settings.replace(target_prefix=language)
        same = alike(model, vocabularies, with_language, NLLB_LINES, library, got)
        assert same >= len(NLLB_LINES) - 1, (language, same)
        assert library[0] and library[4] == library[5] == ""
        expected[language] = library
    assert expected["spa_Latn"] != expected["fra_Latn"]
    interpreter = InterpreterWithCustomOps(
        custom_op_registerers=text_op_registrars(), model_path=str(directory / "model.tflite")
    )
    languages = ["spa_Latn", "fra_Latn", "spa_Latn"]
    answer = interpreter.get_signature_runner("serving_prefix")(
        text=np.array([line.encode() for line in NLLB_LINES[:3:2] + [""]], dtype=object),
        target_prefix=np.array([language.encode() for language in languages], dtype=object),
    )["translations"]
    answer = [text.decode() for text in answer]
    assert answer[2] == ""
    same = 0  # each line alike, or parting at a tie
    for line, language, text in zip(NLLB_LINES[:3:2], languages, answer, strict=False):
        with_language = settings.replace(target_prefix=language)
        ours = expected[language][NLLB_LINES.index(line)]
        same += alike(model, vocabularies, with_language, [line], [ours], [text])
    assert same >= 1, answer
    facts = json.loads((directory / "manifest.json").read_text())
    assert facts["languages"]["target"] == vocabularies.target.language_codes
    assert facts["languages"]["source"] == vocabularies.source.language_codes
    assert facts["signatures"]["serving_languages"]["inputs"] == {
        "text": "string [batch]",
        "source_prefix": "string [batch]",
        "target_prefix": "string [batch]",
    }
    assert set(facts["signatures"]) == {"serving_default", "serving_prefix", "serving_languages"}
    assert "TFText>ByteSplitWithOffsets" in facts["custom_ops"]


def test_an_unknown_language_is_refused_by_the_translator_and_blank_in_the_file(nllb):
    """The translator checks a code against the manifest's languages, naming the code it
    could have meant, before the file runs; the file answers "" for a code it lacks."""
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    from keras_transformer.serving import LiteRTTranslator
    from keras_transformer.serving.litert import text_op_registrars

    directory = nllb[3]
    with pytest.raises(ValueError, match="target_prefix='spa_latn'.*did you mean 'spa_Latn'"):
        LiteRTTranslator(directory, target_prefix="spa_latn")
    translator = LiteRTTranslator(directory)
    with pytest.raises(ValueError, match="source_prefix='xxx_Zzzz'.* is not one of"):
        translator.translate(["Hello"], source_prefix="xxx_Zzzz")
    with pytest.raises(ValueError, match="target_prefix='Hola'.*takes one language code"):
        translator.translate(["Hello"], target_prefix="Hola")
    # A code cut short is not shaped like one: still the code it could have meant, and the
    # file's codes without a "..." when they are all listed.
    with pytest.raises(ValueError, match=r"'fra_Lat'.*did you mean 'fra_Latn'.*codes: [^.]*$"):
        translator.translate(["Hello"], target_prefix="fra_Lat")
    interpreter = InterpreterWithCustomOps(
        custom_op_registerers=text_op_registrars(), model_path=str(directory / "model.tflite")
    )
    answer = interpreter.get_signature_runner("serving_languages")(
        text=np.array([b"Hello", b"Hello", b"Hello"], dtype=object),
        source_prefix=np.array([b"eng_Latn", b"xxx_Zzzz", b"eng_Latn"], dtype=object),
        target_prefix=np.array([b"xxx_Zzzz", b"spa_Latn", b"spa_Latn"], dtype=object),
    )["translations"]
    assert answer[0] == answer[1] == b"" and answer[2]


def test_the_file_s_bpe_cut_is_sentencepiece_s(nllb):
    """The file's cut (`kt.export.litert_bpe`: a character model, then the merges in
    builtin ops) gives SentencePiece's BPE ids, and its source ids (language code, pieces,
    the piece of trailing whitespace, the cut to max_length - 1, EOS) the preprocessor's."""
    import sentencepiece

    from keras_transformer.export import litert_bpe
    from keras_transformer.models.preprocessor import TransformerSeq2SeqLMPreprocessor

    model, vocabularies, _, _ = nllb
    source = vocabularies.source
    strings = [
        *NLLB_LINES,
        "ЖЖ hello ЖЖЖ",  # runs of unknown characters: one <unk> each, as SentencePiece's
        "Ⅻ x\u3000y\u00a0",  # normalized (NFKC) first; Unicode spaces
        "Hello\t\n",
        "a" * 300,  # one word of many merges
        "¿Qué dijo Dios? Amén.",
    ]
    cut = litert_bpe.BpeCut(source.proto, max_chars=4096)
    ids, blank, _ = cut(tf.constant(strings))
    spm = sentencepiece.SentencePieceProcessor(model_proto=source.proto)
    assert [[i for i in row if i >= 0] for row in ids.numpy().tolist()] == [
        spm.encode(s) for s in strings
    ]
    assert blank.numpy().tolist() == [not spm.encode(s) for s in strings]
    # Each line's language: the one it starts with (taken off, as the translator does), else
    # English.
    languages = [
        (line[len("fra_Latn") :], "fra_Latn") if line.startswith("fra_Latn") else (line, "eng_Latn")
        for line in strings
    ]
    code = tf.constant([source.token_to_id(language) for _, language in languages])
    ours = tf.constant(litert_text.our_ids(source), tf.int32)
    got = litert_text.bpe_source_ids(
        cut,
        tf.constant([text for text, _ in languages]),
        code,
        model.config.max_length,
        ours,
        source.token_to_id("\u2581"),
    )
    preprocessor = TransformerSeq2SeqLMPreprocessor.for_model(model, vocabularies)
    expected = preprocessor.source_ids(tf.constant(strings), "eng_Latn").numpy()
    assert got.numpy()[:, : expected.shape[1]].tolist() == expected.tolist()
    assert not got.numpy()[:, expected.shape[1] :].any()
    assert expected.shape[1] == model.config.max_length  # the long line is cut


def test_the_translate_program_takes_an_nllb_file_s_languages(nllb):
    """`trainers.translate --model FILE --target-prefix spa_Latn` gives the translator's
    translations; a code the file lacks is refused naming the flag."""
    from keras_transformer.serving import LiteRTTranslator

    directory = nllb[3]
    lines = NLLB_LINES[:3]
    result = run_main(
        "trainers.translate",
        "--model",
        directory / "model.tflite",
        "--target-prefix",
        "spa_Latn",
        stdin="\n".join(lines).encode() + b"\n",
    )
    expected = LiteRTTranslator(directory, target_prefix="spa_Latn").translate(lines)
    assert result.stdout.splitlines() == [hypotheses[0].text for hypotheses in expected]
    refused = run_main(
        "trainers.translate", "--model", directory, "--source-prefix", "xxx_Zzzz", check=False
    )
    assert refused.returncode == 2 and "--source-prefix='xxx_Zzzz'" in refused.stderr


def test_a_broken_file_and_scores(nllb, tmp_path):
    """A file that is not LiteRT's is named in the error; `--with-scores` on a LiteRT file
    (which gives no scores) is refused naming the flag, before anything is written."""
    from keras_transformer.serving import LiteRTTranslator

    pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
    broken = tmp_path / "broken.tflite"
    broken.write_bytes(b"not a flatbuffer")
    (tmp_path / "manifest.json").write_text((nllb[3] / "manifest.json").read_text())
    with pytest.raises(ValueError, match=f"^{re.escape(str(broken))}: "):
        LiteRTTranslator(broken)
    output = tmp_path / "out.txt"
    scores = run_main(
        "trainers.translate",
        "--model",
        nllb[3],
        "--with-scores",
        "--output",
        output,
        stdin=b"Amen.\n",
        check=False,
    )
    assert scores.returncode == 2 and not output.exists()
    assert scores.stderr == (
        "python -m trainers.translate: error: --with-scores: a LiteRT file gives translations "
        "without scores\n"
    )


def test_the_bpe_cut_refuses_pieces_it_does_not_make():
    """A user-defined piece, or a piece of a character the model lacks (SentencePiece would
    merge it from the character's text), is refused by name: the file's merges start from
    the model's own characters."""
    from sentencepiece import sentencepiece_model_pb2

    from keras_transformer.export import litert_bpe

    kinds = sentencepiece_model_pb2.ModelProto.SentencePiece
    for piece, kind, message in (
        ("<x>", kinds.USER_DEFINED, "user-defined"),
        ("Щa", kinds.NORMAL, r"pieces of characters it lacks \(\['Щa'\]\)"),
    ):
        model = sentencepiece_model_pb2.ModelProto()
        model.ParseFromString((NLLB / "sentencepiece.bpe.model").read_bytes())
        added = model.pieces.add()
        added.piece, added.type, added.score = piece, kind, -2000.0
        with pytest.raises(ValueError, match=message):
            litert_bpe.character_model(model.SerializeToString())
