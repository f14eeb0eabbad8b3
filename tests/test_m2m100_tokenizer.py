"""M2M100 with its own tokenizer (`facebook/m2m100_418M` and `_1.2B`: transformers'
`M2M100Tokenizer`, `vocab.json` and `__xx__` language codes), imported at transformers' parity
on a checkpoint that transformers made (tests/fixtures/m2m100/m2m100-tiny, made once by
make_m2m100_fixture.py; no torch or transformers here): the weights are NLLB-200's
architecture, so this is `kt.pretrained.m2m100` with `m2m100_vocab` reading the tokenizer and
`kt.tokenizers.M2M100Tokenizer` running it.

Token ids against `M2M100Tokenizer` (hard cases among them: codes written in the text, pieces
that vocab.json lacks, whitespace at the edges), decoded text against its `decode`,
teacher-forced log-probabilities against `M2M100ForConditionalGeneration`, greedy ids against
`generate(forced_bos_token_id=...)` in this process, through `trainers.import_pretrained` in
a new process and `TransformerSeq2SeqLM.from_preset` in another, and through the CTranslate2
export and `trainers.translate`'s client."""

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.pretrained import m2m100
from keras_transformer.tokenizers import M2M100Tokenizer
from tests import programs

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "m2m100"
CHECKPOINT = FIXTURES / "m2m100-tiny"


@functools.cache
def reference() -> dict:
    return json.loads((FIXTURES / "m2m100-reference.json").read_text())


@functools.cache
def _model():
    model, _ = m2m100.load_m2m100(CHECKPOINT)
    return model


def imported():
    """(model, vocabularies): the model loaded once, the tokenizer anew for each test."""
    return _model(), m2m100.load_vocabularies(CHECKPOINT)


@functools.cache
def order() -> list[int]:
    """Our id -> the checkpoint's."""
    config = json.loads((CHECKPOINT / "config.json").read_text())
    return m2m100.vocabulary_order(config, config["vocab_size"])


@functools.cache
def ours() -> dict[int, int]:
    """The checkpoint's id -> ours (its decoder start's row is our <s> as well: not that)."""
    return {theirs: i for i, theirs in enumerate(order()) if i != kt.text.BOS_ID}


def to_checkpoint(ids) -> list[int]:
    return [order()[i] for i in ids]


def code(language: str) -> str:
    """transformers' src_lang/tgt_lang ("en") -> the language code token ("__en__")."""
    return language if language.startswith("__") else f"__{language}__"


def source_ids(items) -> np.ndarray:
    """Our source ids `[batch, len]` (0-padded) of the greedy items' unpadded inputs."""
    rows = []
    for item in items:
        pairs = zip(item["input_ids"], item["attention_mask"], strict=True)
        rows.append([ours()[i] for i, keep in pairs if keep])
    ids = np.zeros((len(rows), max(map(len, rows))), "int32")
    for row, values in enumerate(rows):
        ids[row, : len(values)] = values
    return ids


def transformers_output(item) -> list[int]:
    """`generate`'s ids after the decoder start, without the batch's padding."""
    ids = item["ids"][1:]
    pad = reference()["tokenizer_info"]["special_ids"]["<pad>"]
    while ids and ids[-1] == pad:
        ids = ids[:-1]
    return ids


def equal_to_transformers(row, item) -> bool:
    """Our greedy ids (searched with one token more than transformers' limit) against
    `generate`'s: equal where it ended, its tokens first where it ran to the limit (four
    of the 32 do; a search of ours at that limit would end with EOS in its place)."""
    got, theirs = to_checkpoint([i for i in row if i != kt.PAD_ID]), transformers_output(item)
    return got == theirs if theirs[-1] == 2 else got[: len(theirs)] == theirs


def test_the_checkpoint_is_read_with_m2m100s_own_tokenizer():
    """vocab.json numbers the pieces (not SentencePiece's order plus fairseq's offset), the
    100 language codes follow it, and 8 rows no token reaches end the table."""
    checkpoint = m2m100.read_checkpoint(CHECKPOINT)
    info = reference()["tokenizer_info"]
    vocabulary = checkpoint.vocabulary
    assert vocabulary.tokenizer_class is M2M100Tokenizer
    assert len(vocabulary.language_codes) == 100 and "__es__" in vocabulary.language_codes
    for token, i in info["language_ids"].items():
        assert vocabulary.added[token] == i
    assert len(vocabulary.names) == info["vocab_size"] == info["len"] + 8
    assert info["pieces_not_in_vocab_json"] > 0  # pieces SentencePiece gives, <unk> here
    _, vocabularies = imported()
    assert type(vocabularies.source) is M2M100Tokenizer
    assert vocabularies.source.language_id("__es__") == ours()[info["language_ids"]["__es__"]]


def test_source_ids_are_m2m100_tokenizers_with_src_lang():
    """`M2M100Tokenizer(src_lang=L)(text)` is L's code, the text's ids, EOS; ours: the code's
    id, `tokenize(text)`, EOS; and the code written into the text gives the same ids."""
    _, vocabularies = imported()
    tokenizer = vocabularies.source
    items = reference()["source_encoding"]
    assert len(items) >= 60
    rows = tokenizer.tokenize([item["text"] for item in items]).to_list()
    coded = tokenizer.tokenize([f"{code(item['src_lang'])} {item['text']}" for item in items])
    for item, row, with_code in zip(items, rows, coded.to_list(), strict=True):
        language = tokenizer.language_id(code(item["src_lang"]))
        assert to_checkpoint([language, *row, kt.text.EOS_ID]) == item["input_ids"], item["text"]
        assert with_code == [language, *row], item["text"]


def test_the_fixture_covers_the_hard_cases():
    items = reference()["source_encoding"]
    texts = [item["text"] for item in items]
    tokens = [token for item in items for token in item["tokens"]]
    assert "" in texts and any(t.endswith(" ") for t in texts) and any("\t" in t for t in texts)
    assert any("__es__" in t for t in texts) and tokens.count("__es__") >= 3  # split out
    assert tokens.count("<unk>") >= 10 and "</s>" in tokens[2:]
    assert any("Pharaoh" in t for t in texts)  # pieces that vocab.json leaves out
    assert {"en", "es", "fr", "de"} <= {item["src_lang"] for item in items}


def test_target_ids_are_m2m100_tokenizers_with_tgt_lang():
    _, vocabularies = imported()
    tokenizer = vocabularies.target
    for item in reference()["target_encoding"]:
        row = tokenizer.tokenize([f"{code(item['tgt_lang'])} {item['text']}"]).to_list()[0]
        assert to_checkpoint([*row, kt.text.EOS_ID]) == item["labels"], item["text"]


def test_decoding_is_m2m100_tokenizers_decode():
    """`detokenize` leaves out the special tokens and language codes and strips the text, as
    `decode(skip_special_tokens=True)` does."""
    _, vocabularies = imported()
    items = reference()["decoding"]
    width = max(len(item["ids"]) for item in items)
    ids = np.zeros((len(items), width), "int32")
    for row, item in enumerate(items):
        ids[row, : len(item["ids"])] = [ours()[i] for i in item["ids"]]
    texts = [t.decode("utf-8") for t in vocabularies.target.detokenize(ids).numpy()]
    assert texts == [item["text"] for item in items]


def test_teacher_forced_log_probabilities_equal_transformers():
    model, _ = imported()
    worst = 0.0
    for item in reference()["teacher_forcing"]:
        source = np.array([[ours()[i] for i in item["input_ids"]]])
        target = np.array([[ours()[i] for i in item["decoder_input_ids"]]])
        assert target[0, 0] == kt.text.EOS_ID  # </s>, the decoder start: our <s> is its copy
        target[0, 0] = kt.text.BOS_ID
        logits = model({"source_ids": source, "target_ids": target}, training=False)
        log_probs = tf.nn.log_softmax(logits)[0].numpy()
        labels = [ours()[i] for i in item["labels"]]
        got = log_probs[np.arange(len(labels)), labels]
        worst = max(worst, float(np.abs(got - item["label_log_probs"]).max()))
        argmax = [order()[i] for i in log_probs.argmax(-1)]
        assert argmax == item["argmax"]
    assert worst <= 1e-4


def test_greedy_ids_equal_generate_with_forced_bos_token_id():
    """32 sentences, Spanish and French forced (`target_prefix`, as transformers'
    `forced_bos_token_id`), in transformers' padded batches of 4."""
    model, vocabularies = imported()
    items = reference()["greedy"]["items"]
    limit = reference()["greedy"]["settings"]["max_new_tokens"]
    assert len(items) == 32
    search = tf.function(
        lambda source, prefix: kt.decoding.greedy_search(
            model, source, max_length=limit + 1, target_prefix=prefix
        ),
        input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2,
    )
    for start in range(0, len(items), 4):
        batch = items[start : start + 4]
        language = vocabularies.target.language_id(batch[0]["tgt_lang"])
        ids, _ = search(source_ids(batch), np.full((len(batch), 1), language, "int32"))
        for item, row in zip(batch, ids.numpy(), strict=True):
            assert equal_to_transformers(row, item), item["text"]
    assert sum(transformers_output(item)[-1] != 2 for item in items) == 4


def test_a_language_code_is_checked_and_forced_as_nllbs_are():
    """`target_prefix="__es__"` is checked against the vocabulary's codes and forced first;
    the checkpoint's generation_config.json (num_beams 5, as m2m100_418M's) sets the beam."""
    from keras_transformer.models import TransformerSeq2SeqLM

    task = TransformerSeq2SeqLM.from_preset(CHECKPOINT)
    assert task.decoding.beam_size == 5 and task.decoding.target_prefix is None
    task.compile(sampler="greedy")
    items = [item for item in reference()["greedy"]["items"] if item["tgt_lang"] == "__es__"]
    texts = [f"__en__ {item['text']}" for item in items[:4]]
    assert task.generate(texts, target_prefix="__es__") == [i["translation"] for i in items[:4]]
    with pytest.raises(ValueError, match="'__zz__' is not one of this model's .* codes"):
        task.generate("__en__ Hello", target_prefix="__zz__")
    with pytest.raises(ValueError, match="did you mean '__es__'"):
        task.generate("__en__ Hello", target_prefix="__ES__")


def copy_of(tmp_path) -> Path:
    copy = tmp_path / "m2m100"
    shutil.copytree(CHECKPOINT, copy)
    return copy


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_tokenizer_files_as_transformers_5_saves_them_give_the_same_ids(tmp_path):
    """transformers 4.34 and later save the added tokens' ids in tokenizer_config.json
    (`added_tokens_decoder`); they must be the rule's (vocab.json's size + the code's place),
    and with them the tokenizer is the same. Without tokenizer_class the files choose
    M2M100's reader (vocab.json and no tokenizer.json)."""
    checkpoint = copy_of(tmp_path)
    info = reference()["tokenizer_info"]
    entry = {"lstrip": False, "rstrip": False, "normalized": False, "special": True}
    decoder = {str(i): {**entry, "content": t} for t, i in info["special_ids"].items()}
    decoder.update({str(i): {**entry, "content": t} for t, i in info["language_ids"].items()})
    edit_json(checkpoint / "tokenizer_config.json", added_tokens_decoder=decoder)
    tokenizer_config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    del tokenizer_config["tokenizer_class"]
    (checkpoint / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    text = ["__en__ Hello world __fr__ </s>"]
    ids = m2m100.load_vocabularies(checkpoint).source.tokenize(text).to_list()
    assert ids == m2m100.load_vocabularies(CHECKPOINT).source.tokenize(text).to_list()
    decoder[str(info["language_ids"]["__es__"])]["content"] = "__de__"  # __es__'s id
    edit_json(checkpoint / "tokenizer_config.json", added_tokens_decoder=decoder)
    with pytest.raises(m2m100.M2M100Error, match="json: '__de__' has the id 1012, but M2M100"):
        m2m100.read_checkpoint(checkpoint)


@pytest.mark.parametrize(
    "change, message",
    [
        ("no vocab.json", "missing vocab.json"),
        ("language_codes", "language_codes='m2m200' is not one of M2M100Tokenizer's lists"),
        ("vocab order", "vocab.json: id 0 is '<pad>', not '<s>'"),
        ("vocab_size", "ids up to 1092 .* but config.json's vocab_size=1000 rows"),
    ],
)
def test_bad_tokenizer_files_are_refused_naming_the_file(tmp_path, change, message):
    checkpoint = copy_of(tmp_path)
    if change == "no vocab.json":
        (checkpoint / "vocab.json").unlink()
    elif change == "language_codes":
        edit_json(checkpoint / "tokenizer_config.json", language_codes="m2m200")
    elif change == "vocab order":
        vocab = json.loads((checkpoint / "vocab.json").read_text())
        vocab["<s>"], vocab["<pad>"] = vocab["<pad>"], vocab["<s>"]
        (checkpoint / "vocab.json").write_text(json.dumps(vocab))
    else:
        edit_json(checkpoint / "config.json", vocab_size=1000)
    with pytest.raises(m2m100.M2M100Error, match=message):
        m2m100.read_checkpoint(checkpoint)


def test_the_ctranslate2_export_and_client_cut_and_translate_as_transformers(tmp_path):
    """The CTranslate2 export records M2M100's rules (no "▁" for trailing whitespace, decoded
    text stripped): `trainers.translate`'s client cuts text as the in-graph tokenizer does,
    and CTranslate2 gives transformers' greedy ids with `__es__` as its target prefix."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from keras_transformer.serving import PieceRules

    model, vocabularies = imported()
    path = kt.export.export(
        model, tmp_path / "ct2", format="ctranslate2", vocabularies=vocabularies
    )
    rules = json.loads((path / "manifest.json").read_text())["vocabulary"]["pieces"]
    assert rules["trailing_whitespace_piece"] is False
    tokenizer = vocabularies.source
    pieces = tokenizer.get_vocabulary()
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    client = PieceRules(processor, processor, rules, pieces)
    texts = [f"{code(item['src_lang'])} {item['text']}" for item in reference()["source_encoding"]]
    known = set(pieces)
    for text, row in zip(texts, tokenizer.tokenize(texts).to_list(), strict=True):
        split = [piece if piece in known else "<unk>" for piece in client.split(text)]
        assert split == [pieces[i] for i in row], text
        decoded = tokenizer.detokenize([row]).numpy()[0].decode("utf-8")
        assert client.join([pieces[i] for i in row]) == decoded, text
    items = reference()["greedy"]["items"]
    rows = tokenizer.tokenize([f"__en__ {item['text']}" for item in items])
    translator = ctranslate2.Translator(str(path), device="cpu")
    results = translator.translate_batch(
        [[pieces[i] for i in row] for row in rows.to_list()],
        target_prefix=[[item["tgt_lang"]] for item in items],
        beam_size=1,
        max_decoding_length=reference()["greedy"]["settings"]["max_new_tokens"],
    )
    index = {piece: i for i, piece in enumerate(pieces)}
    for item, result in zip(items, results, strict=True):
        got = to_checkpoint([index[token] for token in result.hypotheses[0]])
        ended = transformers_output(item)[-1] == 2  # else it ran to the limit
        assert got + [2] * ended == transformers_output(item), item["text"]


GREEDY_IN_A_NEW_PROCESS = """
import json, sys
import numpy as np
import keras_transformer as kt
from keras_transformer.models import TransformerSeq2SeqLM

task = TransformerSeq2SeqLM.from_preset(sys.argv[1])
batches, limit = json.loads(sys.argv[2]), int(sys.argv[3])
target = task.preprocessor.tokenizer.target
answer = {"decoding": task.decoding.to_dict(), "tokenizer": type(target).__name__, "ids": []}
for texts, language in batches:
    source = task.preprocessor.source_ids([f"__en__ {text}" for text in texts]).numpy()
    prefix = np.full((len(texts), 1), target.language_id(language), "int32")
    ids, _ = kt.decoding.greedy_search(task, source, max_length=limit, target_prefix=prefix)
    answer["ids"] += np.asarray(ids).tolist()
task.compile(sampler="greedy")
firsts = [f"__en__ {texts[0]}" for texts, language in batches if language == "__es__"]
answer["translations"] = task.generate(firsts)  # the settings' target language, __es__
print(json.dumps(answer))
"""


@pytest.mark.slow  # two new processes: the import, then the preset's
def test_the_import_program_and_from_preset_in_new_processes_give_transformers_ids(tmp_path):
    """`trainers.import_pretrained DIR --target-language __es__` in a process of its own,
    then `TransformerSeq2SeqLM.from_preset(DIR)` in another: its tokenizer is M2M100's, the
    target language the settings' prefix, and greedy ids are transformers' for all 32."""
    model_dir = tmp_path / "m2m100"
    command = ["trainers.import_pretrained", CHECKPOINT]
    imported_ = programs.program(*command, "--model-dir", model_dir, "--target-language", "__es__")
    assert "note: every translation starts with __es__" in imported_.stderr
    refused = programs.program(
        *command, "--model-dir", tmp_path / "new", "--target-language", "__xx__", check=False
    )
    assert refused.returncode == 2 and "--target-language=__xx__ is not one" in refused.stderr
    assert not (tmp_path / "new").exists()
    items = reference()["greedy"]["items"]
    batches = [
        [[item["text"] for item in items[i : i + 4]], items[i]["tgt_lang"]]
        for i in range(0, len(items), 4)
    ]
    limit = str(reference()["greedy"]["settings"]["max_new_tokens"] + 1)
    loaded = programs.snippet(GREEDY_IN_A_NEW_PROCESS, model_dir, json.dumps(batches), limit)
    answer = json.loads(loaded.stdout.splitlines()[-1])
    assert answer["tokenizer"] == "M2M100Tokenizer"
    assert answer["decoding"]["target_prefix"] == "__es__" and answer["decoding"]["beam_size"] == 5
    for item, row in zip(items, answer["ids"], strict=True):
        assert equal_to_transformers(row, item), item["text"]
    spanish = [items[i]["translation"] for i in range(0, 16, 4)]  # each batch's first
    assert answer["translations"] == spanish
