"""The walkthroughs of "Using the library" (the README shows the task's, the guides hold
both) run as written, each in a fresh process from a folder that has the bundled corpus: the
task's
(docs/guides/task.md: load, generate, fit, save_to_preset, export; on fewer dev pairs, the
only edit, from a small preset the test writes where `make demo` writes its model), and the
model from its parts (docs/guides/model.md: with a vocabulary learned on fewer pairs, fewer
steps, dev batches and dev sentences and no XLA, the only edits, so that it takes seconds
rather than minutes). The guides' other Python blocks: tests/test_docs.py."""

import re
import sys
from pathlib import Path

import pytest

from tests import programs

ROOT = Path(__file__).resolve().parent.parent
QUICKER = {  # text in the block -> the test's: a vocabulary learned on 6,000 pairs (on all
    # 29,397, SentencePiece took a quarter of the walkthrough's time), fewer steps, no XLA (it
    # would compile each length bucket of so short a run), fewer dev sentences and dev batches
    "Vocabularies.train(train.sources, train.targets, 2000)": (
        "Vocabularies.train(train.sources[:6000], train.targets[:6000], 2000)"
    ),
    "epochs=2, steps_per_epoch=100": "epochs=1, steps_per_epoch=20",
    "metrics=[kt.metrics.MaskedAccuracy()],": "metrics=[kt.metrics.MaskedAccuracy()],"
    " jit_compile=False,",
    "dev.sources[:50]), dev.targets[:50]": "dev.sources[:5]), dev.targets[:5]",
    "validation_data=dev_set)": "validation_data=dev_set.take(2))",
}


TASK_QUICKER = {  # text in the block -> the test's: 64 dev pairs to fine-tune on
    "task.fit(list(dev.sources), list(dev.targets),": (
        "task.fit(list(dev.sources)[:64], list(dev.targets)[:64],"
    ),
}


TASK = ("docs/guides/task.md", "# The task")  # (page, heading): where each walkthrough is
MODEL = ("docs/guides/model.md", "## The model from its parts")


def walkthrough(page: str, heading: str) -> str:
    """The first Python block under `heading` in `page` (a path from the repository's root)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


@pytest.mark.slow
def test_the_task_walkthrough_runs_as_written(tmp_path):
    import keras

    import keras_transformer as kt
    from tests import bible

    code = walkthrough(*TASK)
    for text, quicker in TASK_QUICKER.items():
        assert text in code, text  # the guide still says what the test shortens
        code = code.replace(text, quicker)
    # What the walkthrough reads of `make demo`'s model directory, small: the averaged model
    # that make demo scores and exports, as trainers.average_checkpoints writes it, and the
    # vocabulary, as trainers.train does. Not model.keras nor the preset beside it: the
    # walkthrough loading those instead of the averaged model fails here.
    vocabularies = bible.vocabularies()
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=vocabularies.target.vocabulary_size(), max_length=64
    )
    demo = tmp_path / "runs" / "demo"
    demo.mkdir(parents=True)
    kt.build_transformer(config).save(demo / "model.averaged.keras")
    vocabularies.save(demo / "vocab")

    (tmp_path / "data").symlink_to(ROOT / "data")
    result = programs.snippet(code, cwd=tmp_path, env={"PYTHONPATH": ROOT})
    first, second = result.stdout.strip().splitlines()[-2:]
    assert not first.startswith("[") and second.startswith("['") and second.endswith("']")
    assert (tmp_path / "my_preset" / "task.json").exists()
    assert (tmp_path / "saved_models" / "my_model" / "1" / "saved_model.pb").exists()


@pytest.mark.slow
def test_the_model_from_its_parts_walkthrough_runs(tmp_path):
    code = walkthrough(*MODEL)
    for text, quicker in QUICKER.items():
        assert text in code, text  # the guide still says what the test shortens
        code = code.replace(text, quicker)
    (tmp_path / "data").symlink_to(ROOT / "data")
    result = programs.snippet(code, cwd=tmp_path, env={"PYTHONPATH": ROOT})
    translations, scores = result.stdout.strip().splitlines()[-2:]
    assert translations.startswith("['") and translations.endswith("']")
    assert "'bleu':" in scores and "'chrf':" in scores
    assert (tmp_path / "model.keras").exists() and (tmp_path / "vocab").is_dir()


def test_the_readmes_task_example_is_the_guides_walkthrough():
    """README.md shows the task walkthrough that the guide holds and the test above runs."""
    assert walkthrough("README.md", "## Using the library") == walkthrough(*TASK)


def test_the_readmes_layer_example_runs(tmp_path):
    """README.md's "One layer in your own model": a classifier on the library's encoder."""
    code = walkthrough("README.md", "**One layer in your own model.**")
    (tmp_path / "data").symlink_to(ROOT / "data")
    code += "\nprint(classifier.output.shape)\n"
    result = programs.snippet(code, cwd=tmp_path, env={"PYTHONPATH": ROOT})
    assert result.stdout.strip().splitlines()[-1] == "(None, 2)"


def test_the_checkpoints_are_downloaded_before_they_are_imported():
    """Each folder that the `trainers.import_pretrained` commands of README.md and the
    pretrained guide read is downloaded by a command before it (`hf download ORG/NAME
    --local-dir FOLDER`; an `hf://ORG/NAME` id downloads itself), and that command is the
    one the stack installs: huggingface_hub's `hf`, whose `download` takes `--local-dir`
    (its `huggingface-cli` is gone since huggingface_hub 1.0)."""
    for page in ("README.md", "docs/guides/pretrained.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert "huggingface-cli" not in text, page
        blocks = re.findall(r"^```sh\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
        downloaded, imported = set(), 0
        for line in "\n".join(blocks).replace("\\\n", " ").splitlines():
            if found := re.match(r"hf download \S+ --local-dir (\S+)", line):
                downloaded.add(found.group(1))
            if found := re.search(r"trainers\.import_pretrained (\S+)", line):
                if not found.group(1).startswith("hf://"):  # a hub id downloads itself
                    assert found.group(1) in downloaded, f"{page}: {line}"
                imported += 1
        assert imported, f"{page}: no trainers.import_pretrained command"
    hf = Path(sys.executable).parent / "hf"
    result = programs.run([hf, "download", "--help"], timeout=300)
    assert "--local-dir" in result.stdout, result.stderr
