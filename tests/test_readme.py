"""README's "Using the library" walkthrough runs as written: its code block, in a fresh
process, from a folder that has the bundled corpus (with a vocabulary learned on fewer pairs,
fewer steps, dev batches and dev sentences and no XLA, the only edits, so that it takes
seconds rather than minutes)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
QUICKER = {  # text in the block -> the test's: a vocabulary learned on 6,000 pairs (on all
    # 30,000, SentencePiece took a quarter of the walkthrough's time), fewer steps, no XLA (it
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


def walkthrough() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Using the library") :]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


@pytest.mark.slow
def test_the_using_the_library_walkthrough_runs(tmp_path):
    code = walkthrough()
    for text, quicker in QUICKER.items():
        assert text in code, text  # the README still says what the test shortens
        code = code.replace(text, quicker)
    (tmp_path / "data").symlink_to(ROOT / "data")
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    translations, scores = result.stdout.strip().splitlines()[-2:]
    assert translations.startswith("['") and translations.endswith("']")
    assert "'bleu':" in scores and "'chrf':" in scores
    assert (tmp_path / "model.keras").exists() and (tmp_path / "vocab").is_dir()
