"""`trainers.import_pretrained` on an NLLB-200 (M2M100) checkpoint, as users run it: the
transformers-made fixture (tests/fixtures/m2m100) becomes a model directory whose target
language (`--target-language`, stored as the decoding settings' `target_prefix`) every
program applies: `evaluate` scores exactly what the library's `generate` gives, and what the
exported SavedModel and CTranslate2 model serve through `trainers.translate`; the flags
change it per run. The OPUS-MT path of the same command is tests/test_import_marian.py's."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from keras_transformer.decoding import DecodingSettings
from keras_transformer.decoding.settings import prefix_ids
from keras_transformer.models import TransformerSeq2SeqLM
from tests import ties
from tests.cli import run_main

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHECKPOINT = FIXTURES / "m2m100" / "nllb-tiny"


def sentences(count=12) -> list[str]:
    """Source lines as NLLB reads them: the source language's code first."""
    items = json.loads((FIXTURES / "m2m100" / "reference.json").read_text())["greedy"]["items"]
    return [f"eng_Latn {item['text']}" for item in items[:count]]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("import") / "nllb"
    result = run_main(
        "trainers.import_pretrained",
        CHECKPOINT,
        "--model-dir",
        model_dir,
        "--target-language",
        "spa_Latn",
    )
    return model_dir, result


def test_the_import_records_the_target_language_as_the_decoding_prefix(imported):
    model_dir, result = imported
    assert "note: every translation starts with spa_Latn" in result.stderr
    experiment = yaml.safe_load((model_dir / "experiment.yaml").read_text())
    assert experiment["decoding"]["target_prefix"] == "spa_Latn"
    assert experiment["data"]["target_language"] == "spa_Latn"
    assert experiment["training"]["jit_compile"] is False
    assert "preset: null\n" in (model_dir / "experiment.yaml").read_text()
    record = json.loads((model_dir / "pretrained.json").read_text())
    assert record["format"] == "m2m_100 (Hugging Face transformers)"
    assert "model.safetensors" in record["files"]
    task = TransformerSeq2SeqLM.from_preset(model_dir)
    assert task.decoding.target_prefix == "spa_Latn" and task.decoding.beam_size == 1
    assert (model_dir / "model.pretrained.keras").exists()


@pytest.mark.exact
def test_evaluate_scores_what_generate_and_both_exports_translate(imported, tmp_path):
    """One target language everywhere: the hypotheses `evaluate` scores are `generate`'s
    with the settings' prefix, and `trainers.translate` answers the same through the
    SavedModel and the CTranslate2 export; another language is a flag away, and so is the
    source language's code (`--source-prefix`), each checked against the vocabulary's.
    Exactly, CTranslate2 too: every greedy step of these verses in both languages has its
    two best tokens LAST_BITS (2e-4) apart or more (`greedy_margin`, checked), the engines'
    logits 2e-5."""
    model_dir, _ = imported
    lines = sentences()
    task = TransformerSeq2SeqLM.from_preset(model_dir)
    for language in ("spa_Latn", "fra_Latn"):
        assert greedy_margin(task, lines, language) >= ties.LAST_BITS, language
    source = tmp_path / "source.txt"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "hyp.txt"
    arguments = ["--model-dir", model_dir, "--source", source, "--reference", source]
    run_main("trainers.evaluate", *arguments, "--output", out)
    scored = out.read_text().splitlines()
    assert scored == task.generate(lines)
    assert scored == task.generate(lines, target_prefix="spa_Latn")
    french = task.generate(lines, target_prefix="fra_Latn")
    assert french != scored  # the prefix reaches the search
    run_main("trainers.evaluate", *arguments, "--output", out, "--target-prefix", "fra_Latn")
    assert out.read_text().splitlines() == french

    # The source language's code put by --source-prefix in front of each line without one.
    bare = tmp_path / "bare.txt"
    bare.write_text("".join(line.removeprefix("eng_Latn ") + "\n" for line in lines))
    run_main("trainers.export", "--model-dir", model_dir, "--out", tmp_path / "sm")
    served_as(tmp_path / "sm", source, bare, scored, french)
    # The SavedModel's serving_prefix signature, which takes a target prefix, gives one
    # hypothesis a line.
    flags = ("--model", tmp_path / "sm", "--input", source, "--target-prefix", "fra_Latn")
    refused = run_main("trainers.translate", *flags, "--n-best", "2", check=False)
    assert refused.returncode == 2 and not refused.stdout
    assert refused.stderr.startswith(
        "python -m trainers.translate: error: --n-best 2: a target prefix gives one hypothesis"
    )
    pytest.importorskip("ctranslate2")
    ct2 = tmp_path / "ct2"
    run_main("trainers.export", "--model-dir", model_dir, "--out", ct2, "--format", "ctranslate2")
    assert json.loads((ct2 / "manifest.json").read_text())["decoding"]["target_prefix"] == (
        "spa_Latn"
    )
    served_as(ct2, source, bare, scored, french)


def greedy_margin(task, lines, target_prefix: str) -> float:
    """The smallest margin between the two best tokens (padding and BOS never generated) of
    any step of the greedy searches of `lines` under `target_prefix`, the model's logits
    teacher forced along its own outputs in NumPy. Where it is at least LAST_BITS, ten times
    the engines' logit differences (2e-5), every engine's greedy search takes these tokens on
    any CPU: the condition of this file's exact comparisons, checked here (2.6e-4 when
    written: tests/test_pretrained_m2m100.py)."""
    settings = task.decoding.replace(target_prefix=target_prefix)
    prefix = np.asarray(prefix_ids(settings, task.preprocessor.tokenizer.target))[0].tolist()
    smallest = np.inf
    for line in lines:
        source = np.asarray(task.preprocessor.generate_preprocess([line])["source_ids"])[0]
        next_logits = ties.teacher_forced(task, source)
        limit = ties.length_limit(source, settings.max_extra_length, task.config.max_length)
        output = list(prefix)
        while len(output) < limit and output[-1:] != [ties.EOS_ID]:
            logits = np.array(next_logits([[ties.BOS_ID, *output]])[0], "float64")
            logits[[ties.PAD_ID, ties.BOS_ID]] = -np.inf
            best, second = np.sort(logits)[::-1][:2]
            smallest = min(smallest, best - second)
            output.append(int(np.argmax(logits)))
    return float(smallest)


def served_as(exported, source, bare, scored, french) -> None:
    """`trainers.translate` on an export: the lines of `source` (each with its code) as
    `scored`; those of `bare` (none) with `--source-prefix eng_Latn` too; with
    `--target-prefix fra_Latn`, `french`; a code the vocabulary lacks refused in one line
    that names the flag and the code it could have meant."""
    translate = ("trainers.translate", "--model", exported)
    assert run_main(*translate, "--input", source).stdout.splitlines() == scored
    served = run_main(*translate, "--input", bare, "--source-prefix", "eng_Latn")
    assert served.stdout.splitlines() == scored
    served = run_main(*translate, "--input", source, "--target-prefix", "fra_Latn")
    assert served.stdout.splitlines() == french
    for flag, code in (("--source-prefix", "eng_latn"), ("--target-prefix", "fra_latn")):
        refused = run_main(*translate, "--input", source, flag, code, check=False)
        assert refused.returncode == 2 and not refused.stdout
        assert refused.stderr.startswith(
            f"python -m trainers.translate: error: {flag}='{code}': '{code}' is not one of"
        )
        assert f"did you mean '{code[:4]}{code[4].upper()}{code[5:]}'?" in refused.stderr
        assert len(refused.stderr.splitlines()) == 1


def test_the_ctranslate2_client_cuts_text_as_nllbs_tokenizer(imported, tmp_path):
    """The CTranslate2 runtime's plain-Python pieces (`kt.serving.PieceRules`) are the
    in-graph tokenizer's on NLLB's hard cases: whitespace before and after special tokens,
    trailing whitespace (one more "▁"), several language codes, unknown characters; and
    pieces back to text as its decoding. Its source prefix gives the ids and translations
    of the lines written with the code by hand."""
    pytest.importorskip("ctranslate2")
    from keras_transformer.serving import CTranslate2Translator

    model_dir, _ = imported
    task = TransformerSeq2SeqLM.from_preset(model_dir)
    directory = tmp_path / "ct2"
    arguments = ["--model-dir", model_dir, "--out", directory, "--format", "ctranslate2"]
    run_main("trainers.export", *arguments)
    translator = CTranslate2Translator(directory)
    # Blank lines: nothing to translate, though NLLB's pieces of whitespace are a "▁" (as
    # generate and the SavedModel answer them).
    blank = ["   ", "\t", " \u3000 "]
    assert task.generate(blank) == ["", "", ""]
    assert [[(h.text, h.score) for h in hs] for hs in translator.translate(blank)] == [
        [("", 0.0)]
    ] * 3
    client = translator.rules
    tokenizer = task.preprocessor.tokenizer.source
    pieces = tokenizer.get_vocabulary()
    texts = [
        "eng_Latn Hello world",
        "eng_Latn  two  spaces and a trailing one ",
        "fra_Latn<mask> Bonjour <mask>  le monde\u3000",
        "eng_Latn\tTabs\tand\u00a0no-break spaces\u2009",
        "Without a code, with ☃ and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "spa_Latn eng_Latn codes everywhere fra_Latn",
    ]
    known = set(pieces)
    for text, row in zip(texts, tokenizer.tokenize(texts).to_list(), strict=True):
        # A piece the vocabulary lacks is CTranslate2's unknown token, as it is our <unk>.
        split = [piece if piece in known else "<unk>" for piece in client.split(text)]
        assert split == [pieces[i] for i in row], text
        assert client.join([pieces[i] for i in row]) == (
            tokenizer.detokenize([row]).numpy()[0].decode("utf-8")
        ), text
    bare = ["Hello world", "  two  spaces ", "fra_Latn keeps its own code", " "]
    by_hand = ["eng_Latn Hello world", "eng_Latn   two  spaces ", bare[2], " "]
    translator = CTranslate2Translator(directory)
    expected = translator.translate(by_hand)
    assert all(h[0].ids for h in expected[:3])  # ids compared below, not only text
    assert translator.translate(bare, source_prefix="eng_Latn") == expected
    assert CTranslate2Translator(directory, source_prefix="eng_Latn").translate(bare) == expected
    assert translator.translate(bare) != expected  # without the code, another translation


def test_target_prefix_is_a_decoding_setting():
    settings = DecodingSettings(target_prefix="spa_Latn")
    assert DecodingSettings.from_dict(settings.to_dict()) == settings
    assert DecodingSettings().target_prefix is None
    for bad in ("", "  ", 3):
        with pytest.raises(ValueError, match="target_prefix=.* must be None or a non-blank"):
            DecodingSettings(target_prefix=bad)


def test_a_bad_target_language_or_one_for_marian_is_refused_before_any_work(tmp_path):
    refused = run_main(
        "trainers.import_pretrained",
        CHECKPOINT,
        "--model-dir",
        tmp_path / "new",
        "--target-language",
        "xxx_Latn",
        check=False,
    )
    assert refused.returncode == 2
    assert "--target-language=xxx_Latn is not one of the checkpoint's" in refused.stderr
    marian = run_main(
        "trainers.import_marian",
        FIXTURES / "marian" / "shared",
        "--model-dir",
        tmp_path / "new",
        "--target-language",
        "spa",
        check=False,
    )
    assert marian.returncode == 2 and "is a Marian model, which takes no language" in marian.stderr
    assert not (tmp_path / "new").exists()


def test_an_unknown_target_language_flag_is_one_line_before_any_work(imported, tmp_path):
    model_dir, _ = imported
    source = tmp_path / "source.txt"
    source.write_text("eng_Latn Hello\n")
    for program, *args in (
        ("trainers.export", "--out", tmp_path / "sm"),
        ("trainers.evaluate", "--source", source, "--reference", source),
    ):
        refused = run_main(
            program, "--model-dir", model_dir, *args, "--target-prefix", "xxx_Zzzz", check=False
        )
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "--target-prefix" in lines[0] and "xxx_Zzzz" in lines[0]
    assert not (tmp_path / "sm").exists()


@pytest.mark.exact
def test_the_source_language_reaches_evaluate_and_the_export(imported, tmp_path):
    """`--source-language` (the settings' `source_prefix`) puts the code before every line
    that lacks one: `evaluate` and the exported SavedModel translate lines without the code
    as the first import translates them with it; `--source-prefix` sets it per run; a code
    the vocabulary lacks is one line before any work, at import and in the flags. Exactly:
    every greedy step's two best tokens LAST_BITS apart or more (`greedy_margin`, checked)."""
    model_dir, _ = imported
    coded = sentences()
    plain = [line.removeprefix("eng_Latn ") for line in coded]
    task = TransformerSeq2SeqLM.from_preset(model_dir)
    assert greedy_margin(task, coded, "spa_Latn") >= ties.LAST_BITS
    expected = task.generate(coded)
    source, reference = tmp_path / "plain.txt", tmp_path / "reference.txt"
    source.write_text("\n".join(plain) + "\n")
    reference.write_text("\n".join(coded) + "\n")
    both = tmp_path / "both"
    result = run_main(
        "trainers.import_pretrained",
        CHECKPOINT,
        "--model-dir",
        both,
        "--source-language",
        "eng_Latn",
        "--target-language",
        "spa_Latn",
    )
    assert "note: every source starts with eng_Latn" in result.stderr
    experiment = yaml.safe_load((both / "experiment.yaml").read_text())
    assert experiment["decoding"]["source_prefix"] == "eng_Latn"
    assert experiment["data"]["source_language"] == "eng_Latn"
    out = tmp_path / "hyp.txt"
    arguments = ["--source", source, "--reference", reference, "--output", out]
    run_main("trainers.evaluate", "--model-dir", both, *arguments)
    assert out.read_text().splitlines() == expected
    assert json.loads(out.with_suffix(".json").read_text())["source_prefix"] == "eng_Latn"
    # Another model directory's scores go to a file of their own: an evaluation never
    # replaces another model's (trainers.evaluate).
    flagged = tmp_path / "hyp-flagged.txt"
    arguments[-1] = flagged
    run_main(
        "trainers.evaluate", "--model-dir", model_dir, *arguments, "--source-prefix", "eng_Latn"
    )
    assert flagged.read_text().splitlines() == expected  # the flag on the first import
    run_main("trainers.export", "--model-dir", both, "--out", tmp_path / "sm")
    served = run_main("trainers.translate", "--model", tmp_path / "sm", "--input", source)
    assert served.stdout.splitlines() == expected
    refused = run_main(
        "trainers.import_pretrained",
        CHECKPOINT,
        "--model-dir",
        tmp_path / "new",
        "--source-language",
        "eng_latn",
        check=False,
    )
    assert refused.returncode == 2
    assert "--source-language=eng_latn is not one of the checkpoint's" in refused.stderr
    assert not (tmp_path / "new").exists()
    for program, *args in (
        ("trainers.export", "--out", tmp_path / "sm2"),
        ("trainers.evaluate", "--source", source, "--reference", source),
    ):
        refused = run_main(
            program, "--model-dir", model_dir, *args, "--source-prefix", "xxx_Zzzz", check=False
        )
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "--source-prefix" in lines[0] and "xxx_Zzzz" in lines[0]
    assert not (tmp_path / "sm2").exists()
