"""Marian checkpoints as today's Helsinki-NLP downloads lay them out, beyond the first OPUS-MT
release (tests/fixtures/marian/variants, made by transformers 5 with make_variants.py; no
torch or transformers here): parity with transformers on each, and refusals by name.

tc-big          relu, 1,024 positions, <unk> 7 and </s> 440, decoder_vocab_size one more
                than vocab_size with shared embeddings (unused, as in transformers)
separate-sizes  source and target vocabularies of different sizes, the decoder's table one
                row longer than target_vocab.json, the target's <pad> (its start) at 20
tc-bible-big    >>xxx<< language tokens, a shared table one row longer than vocab.json,
                num_beams and max_length null in generation_config.json
legacy-config   transformers 3.x's config.json: BART's layout keys, generation settings in
                config.json and no generation_config.json
"""

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.pretrained import marian

VARIANTS = Path(__file__).resolve().parent / "fixtures" / "marian" / "variants"
NAMES = ("tc-big", "separate-sizes", "tc-bible-big", "legacy-config")
TIE = 1e-3  # nats between a step's two best logits: either engine may take either


@functools.cache
def reference(name: str) -> dict:
    return json.loads((VARIANTS / f"{name}.json").read_text(encoding="utf-8"))


@functools.cache
def _imported(name: str):
    """(model, source order, target order); the model is loaded once."""
    checkpoint = marian.read_checkpoint(VARIANTS / name)
    model, _ = marian.load_marian(checkpoint)
    _, source, target = marian._vocabularies(VARIANTS / name)
    return model, source, target


def imported(name: str):
    """(model, vocabularies, source order, target order): the tokenizers anew for each test
    (conftest's seeding destroys TensorFlow's SentencePiece resources made before it)."""
    model, source, target = _imported(name)
    return model, marian.load_vocabularies(VARIANTS / name), source, target


def ours(order: list[int]) -> dict[int, int]:
    """Marian id -> our id (Marian's start row is our <s>, not our padding)."""
    return {marian_id: i for i, marian_id in enumerate(order) if i != kt.PAD_ID}


def copy_of(tmp_path: Path, name: str, **config_changes) -> Path:
    path = tmp_path / name
    shutil.copytree(VARIANTS / name, path)
    if config_changes:
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, **config_changes}))
    return path


# -- Parity with transformers ----------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_token_ids_are_marian_tokenizers(name):
    _, vocabularies, source, target = imported(name)
    for side, tokenizer, order, key in (
        ("source_encoding", vocabularies.source, source, "input_ids"),
        ("target_encoding", vocabularies.target, target, "labels"),
    ):
        items = reference(name)[side]
        ids = tokenizer.tokenize([item["text"] for item in items])
        for item, row in zip(items, ids.to_list(), strict=True):
            assert [order[i] for i in row + [kt.text.EOS_ID]] == item[key], item["text"]


def teacher_forced_error(name: str) -> float:
    """Largest |our log-prob - transformers'| over every teacher-forced label, and over every
    entry of the distributions reference.npz holds."""
    model, _, source, target = imported(name)
    to_source, to_target = ours(source), ours(target)
    arrays = np.load(VARIANTS / f"{name}.npz")
    worst = 0.0
    for item in reference(name)["teacher_forcing"]:
        source_ids = np.array([[to_source[i] for i in item["input_ids"]]])
        target_ids = np.array([[to_target[i] for i in item["decoder_input_ids"]]])
        assert target_ids[0, 0] == kt.text.BOS_ID  # Marian's start, our <s>
        logits = model({"source_ids": source_ids, "target_ids": target_ids}, training=False)
        log_probs = tf.nn.log_softmax(logits)[0].numpy()  # (len, our vocab)
        labels = [to_target[i] for i in item["labels"]]
        got = log_probs[np.arange(len(labels)), labels]
        worst = max(worst, float(np.abs(got - item["label_log_probs"]).max()))
        if item["npz_log_probs"]:  # the whole distribution, extra rows included
            theirs = arrays[item["npz_log_probs"]]
            assert theirs.shape[1] == len(target) - 1  # every row of transformers' table
            mapped = np.empty_like(theirs)
            mapped[:, target[1:]] = log_probs[:, 1:]  # our padding row is out of the softmax
            worst = max(worst, float(np.abs(mapped - theirs).max()))
    return worst


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.exact
def test_teacher_forced_log_probabilities_equal_transformers(name):
    assert teacher_forced_error(name) <= 1e-4


def first_near_ties(name: str) -> list[int | None]:
    """For each greedy item: the first step of transformers' output where our two best tokens
    (teacher-forced along it) are within TIE, or None; outputs are compared up to there."""
    model, _, source, target = imported(name)
    to_source, to_target = ours(source), ours(target)
    pad = reference(name)["config"]["pad_token_id"]
    ties = []
    for item in reference(name)["greedy"]["items"]:
        pairs = zip(item["input_ids"], item["attention_mask"], strict=True)
        source_ids = np.array([[to_source[i] for i, keep in pairs if keep]])
        output = [to_target[i] for i in item["ids"][1:] if i != pad]
        target_ids = np.array([[kt.text.BOS_ID, *output[:-1]]])
        logits = model({"source_ids": source_ids, "target_ids": target_ids}, training=False)
        logits = np.array(logits[0])
        logits[:, [kt.PAD_ID, kt.text.BOS_ID]] = -np.inf  # never generated
        best = -np.sort(-logits, axis=1)[:, :2]
        tied = np.flatnonzero(best[:, 0] - best[:, 1] < TIE)
        ties.append(int(tied[0]) if tied.size else None)
    return ties


def greedy_outputs(name: str):
    """(ours, transformers', near ties) for the reference's greedy items, all in one padded
    batch, to transformers' limit: max_length 64 counts the start, so 63 tokens, the last a
    forced EOS."""
    model, _, source, target = imported(name)
    to_source = ours(source)
    greedy = reference(name)["greedy"]
    pad = reference(name)["config"]["pad_token_id"]
    limit = greedy["kwargs"]["max_length"] - 1
    rows = []
    for item in greedy["items"]:
        pairs = zip(item["input_ids"], item["attention_mask"], strict=True)
        rows.append([to_source[i] for i, keep in pairs if keep])
    source_ids = np.zeros((len(rows), max(map(len, rows))), "int32")
    for row, ids in enumerate(rows):
        source_ids[row, : len(ids)] = ids
    search = tf.function(
        lambda s: kt.decoding.greedy_search(model, s, max_extra_length=limit, max_length=limit)
    )
    ids, _ = search(source_ids)
    got = [[target[i] for i in row if i != kt.PAD_ID] for row in ids.numpy()]
    expected = [[i for i in item["ids"][1:] if i != pad] for item in greedy["items"]]
    return got, expected, first_near_ties(name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.exact
def test_greedy_ids_equal_transformers_generate(name):
    got, expected, ties = greedy_outputs(name)
    assert sum(tie is None for tie in ties) >= 12  # most compared whole
    for ours_ids, theirs, tie, item in zip(
        got, expected, ties, reference(name)["greedy"]["items"], strict=True
    ):
        assert ours_ids[:tie] == theirs[:tie], item["source"]


@pytest.mark.parametrize("name", ["tc-big", "tc-bible-big", "legacy-config"])
def test_greedy_text_is_marian_tokenizers_decode(name):
    """The greedy outputs decoded: our detokenizer's text is transformers' decode with
    skip_special_tokens. Seven tc-bible-big outputs hold the table's extra row, which
    transformers 5 cannot decode (it asks SentencePiece for a piece of that id: IndexError);
    ours leaves it out. (With separate vocabularies transformers 5 skips the source's special
    ids, not the target's: separate-sizes is left out.)"""
    _, vocabularies, _, target = imported(name)
    mapping = ours(target)
    items = reference(name)["greedy"]["items"]
    width = max(len(item["ids"]) for item in items)
    pieces = vocabularies.target.get_vocabulary()
    extra = pieces.index(marian.EXTRA_PIECE) if marian.EXTRA_PIECE in pieces else None
    ids = np.zeros((2, len(items), width), "int32")  # as generated; without the extra row
    for row, item in enumerate(items):
        mapped = [mapping[i] for i in item["ids"]]
        ids[0, row, : len(mapped)] = mapped
        kept = [i for i in mapped if i != extra]
        ids[1, row, : len(kept)] = kept
    texts, without_extra = (
        [t.decode("utf-8") for t in vocabularies.target.detokenize(batch).numpy()] for batch in ids
    )
    failed = [row for row, item in enumerate(items) if item["text"] is None]
    assert len(failed) == (7 if name == "tc-bible-big" else 0)
    for row in failed:
        assert "piece id is out of range" in items[row]["decode_error"]
    assert texts == without_extra
    assert [t for row, t in enumerate(texts) if row not in failed] == [
        item["text"] for item in items if item["text"] is not None
    ]


# -- What each variant needed ----------------------------------------------------------------


def test_tc_big_relu_special_ids_and_an_unused_decoder_vocab_size():
    model, vocabularies, source, target = imported("tc-big")
    config = reference("tc-big")["config"]
    assert model.config.activation == "relu" and model.config.max_length == 1024
    assert (target[kt.text.EOS_ID], target[kt.text.UNK_ID]) == (440, 7)  # not 0 and 1
    assert target[kt.text.BOS_ID] == target[kt.PAD_ID] == config["pad_token_id"]
    # decoder_vocab_size = vocab_size + 1, shared: transformers' tables all have vocab_size rows
    assert config["decoder_vocab_size"] == config["vocab_size"] + 1
    assert config["lm_head_shape"][0] == config["vocab_size"] == len(target) - 1
    assert reference("tc-big")["decoder_vocab_size_unused_when_shared"] == 0.0
    notes = marian.import_notes(marian.read_checkpoint(VARIANTS / "tc-big"))
    assert notes == [
        "config.json: decoder_vocab_size=588 is not used: with shared embeddings transformers "
        "gives every table vocab_size=587 rows, and so does the import"
    ]
    assert vocabularies.target.tokenize("</s>").numpy().tolist() == [kt.text.EOS_ID]


def test_a_table_row_beyond_the_vocabulary_is_kept_without_a_piece():
    """separate-sizes: target_vocab.json numbers 348 pieces, the decoder's table (and output
    projection and bias) has 349 rows, the encoder's 300. The extra row stays in the softmax,
    as the last id, named by the empty piece: no text gives it and it decodes to nothing."""
    model, vocabularies, source, target = imported("separate-sizes")
    config = reference("separate-sizes")["config"]
    target_size = len(json.loads((VARIANTS / "separate-sizes" / "target_vocab.json").read_text()))
    assert config["decoder_embed_shape"][0] == config["lm_head_shape"][0] == target_size + 1
    assert config["encoder_embed_shape"][0] == len(source) - 1 != target_size + 1
    assert target[-1] == target_size  # our last id is the extra row
    greedy = reference("separate-sizes")["greedy"]["items"]
    assert sum(target_size in item["ids"] for item in greedy) == 2  # generated, and compared
    assert vocabularies.target.get_vocabulary()[-1] == marian.EXTRA_PIECE
    assert model.config.source_vocab == len(source) and model.config.target_vocab == len(target)
    some = vocabularies.target.tokenize("Y dijo el rey.").numpy().tolist()
    extra = len(target) - 1
    ids = np.zeros((2, len(some) + 2), "int32")
    ids[0, : len(some)], ids[1] = some, [extra, *some, extra]
    texts = vocabularies.target.detokenize(ids)
    assert texts.numpy()[0] == texts.numpy()[1] == b"Y dijo el rey."
    notes = marian.import_notes(marian.read_checkpoint(VARIANTS / "separate-sizes"))
    assert notes == [
        "target_vocab.json: the target embedding table has a row beyond its 348 ids (id 348); "
        "kept, as transformers keeps it in the softmax, as an id that no text gives and that "
        "decodes to nothing"
    ]


def test_language_tokens_and_null_generation_settings():
    """tc-bible-big: >>xxx<< stays one token at the start (an unknown code becomes <unk>, one
    elsewhere is text); num_beams and max_length null: this library's defaults apply, and the
    import says so."""
    _, vocabularies, source, _ = imported("tc-bible-big")
    vocab = json.loads((VARIANTS / "tc-bible-big" / "vocab.json").read_text())
    ids = vocabularies.source.tokenize([">>spa<< Hello", ">>xyz<< Hello"]).to_list()
    assert source[ids[0][0]] == vocab[">>spa<<"] and len(ids[0]) == len(ids[1])
    assert ids[1][0] == kt.text.UNK_ID
    checkpoint = marian.read_checkpoint(VARIANTS / "tc-bible-big")
    assert checkpoint.generation["num_beams"] is None
    assert marian.decoding_defaults(checkpoint.generation) == {}  # the defaults apply
    notes = marian.import_notes(checkpoint)
    assert notes[:2] == [
        "generation_config.json: num_beams is null; this library's default beam size, 4, applies",
        "generation_config.json: max_length is null; this library's default length limit "
        "applies (the source's length + 50 tokens, within the model's positions)",
    ]
    assert "row beyond its 594 ids (id 594)" in notes[2] and len(notes) == 3
    generation = reference("tc-bible-big")["config"]["generation_config"]
    assert generation["num_beams"] is None and generation["max_length"] is None


def test_a_legacy_config_reads_its_generation_settings_as_transformers_does():
    checkpoint = marian.read_checkpoint(VARIANTS / "legacy-config")
    assert not (VARIANTS / "legacy-config" / "generation_config.json").exists()
    assert checkpoint.generation_source == "config.json"
    assert marian.decoding_defaults(checkpoint.generation) == {"beam_size": 6, "max_length": 511}
    generation = reference("legacy-config")["config"]["generation_config"]
    assert (generation["num_beams"], generation["max_length"]) == (6, 512)  # transformers'
    assert marian.ignored_generation_settings(checkpoint.generation, 586) == []
    assert marian.import_notes(checkpoint) == [
        "no generation_config.json: config.json's generation settings apply, as transformers "
        "reads them (num_beams=6, max_length=512, bad_words_ids=[[586]])"
    ]
    model, *_ = imported("legacy-config")
    assert model.config.activation == "silu" and not model.config.norm_first


# -- Refusals, by key, before any work -------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        ({"normalize_before": True}, "normalize_before=True is not supported"),
        ({"add_bias_logits": True}, "add_bias_logits=True is not supported"),
        ({"static_position_embeddings": False}, "static_position_embeddings=False is not"),
        ({"normalize_embedding": True}, "normalize_embedding=True is not supported"),
        ({"add_final_layer_norm": True}, "add_final_layer_norm=True is not supported"),
        ({"extra_pos_embeddings": 0}, r"extra_pos_embeddings=0 is not supported \(expected "),
        ({"extra_pos_embeddings": "2"}, "extra_pos_embeddings='2' is not an integer"),
    ],
)
def test_legacy_layout_keys_at_other_values_are_refused_by_name(tmp_path, change, message):
    path = copy_of(tmp_path, "legacy-config", **change)
    with pytest.raises(marian.MarianError, match=message):
        marian.load_marian(path)


def test_legacy_layout_keys_at_marian_values_are_accepted():
    config = json.loads((VARIANTS / "legacy-config" / "config.json").read_text())
    assert config["extra_pos_embeddings"] == config["pad_token_id"] + 1
    for value in (config["pad_token_id"] + 1, 2):  # 3.0's computed value, 3.1-4.0's default
        marian.transformer_config({**config, "extra_pos_embeddings": value})


@pytest.mark.parametrize(
    "name, change, message",
    [
        ("separate-sizes", {"decoder_vocab_size": 350}, "its 348 ids do not fit the 350 rows"),
        ("tc-bible-big", {"vocab_size": 592}, "vocab.json: its 594 ids do not fit the 592 rows"),
        ("tc-big", {"decoder_vocab_size": "588"}, "decoder_vocab_size='588' is not an integer"),
    ],
)
def test_tables_the_vocabularies_do_not_fit_are_refused_naming_the_file(
    tmp_path, name, change, message
):
    path = copy_of(tmp_path, name, **change)
    with pytest.raises(marian.MarianError, match=message):
        marian.load_marian(path)


def test_a_refused_checkpoint_is_refused_before_anything_is_written(tmp_path):
    """trainers.import_marian checks the checkpoint whole before writing its model directory."""
    from trainers.errors import ConfigError
    from trainers.import_marian import import_marian

    path = copy_of(tmp_path, "legacy-config", add_bias_logits=True)
    with pytest.raises(ConfigError, match="config.json: add_bias_logits=True is not supported"):
        import_marian(path, tmp_path / "model")
    assert not (tmp_path / "model").exists()


def test_the_import_prints_and_records_what_it_decided(tmp_path, capsys):
    """trainers.import_marian says which defaults apply where generation_config.json leaves
    them null, on stderr and in pretrained.json."""
    from trainers.import_marian import import_marian

    import_marian(VARIANTS / "tc-bible-big", tmp_path / "model")
    expected = marian.import_notes(marian.read_checkpoint(VARIANTS / "tc-bible-big"))
    printed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert printed == [f"note: {note}" for note in expected]
    record = json.loads((tmp_path / "model" / "pretrained.json").read_text())
    assert record["notes"] == expected and record["decoding"] == {}
