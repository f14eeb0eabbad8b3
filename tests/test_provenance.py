"""trainers.provenance: the git commit and package versions recorded with results."""

from importlib import metadata

import pytest

from tests import programs
from trainers import provenance


def test_records_this_checkout_and_the_installed_versions():
    record = provenance.provenance()
    head = programs.run(["git", "-C", provenance.SOURCE, "rev-parse", "HEAD"]).stdout.strip()
    assert record["git"]["commit"] == head and len(head) == 40
    assert isinstance(record["git"]["dirty"], bool)
    assert record["packages"]["keras"] == metadata.version("keras")
    assert set(record["packages"]) == set(provenance.PACKAGES)


def test_outside_a_git_checkout_the_commit_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "SOURCE", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert provenance.provenance()["git"] is None


def test_a_missing_package_is_none(monkeypatch):
    monkeypatch.setattr(provenance, "PACKAGES", ("no-such-package-anywhere",))
    assert provenance.provenance()["packages"] == {"no-such-package-anywhere": None}


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A git checkout with one committed module, as SOURCE."""

    def git(*args):
        programs.run(["git", "-C", tmp_path, *args], timeout=60)

    (tmp_path / "trainers").mkdir()
    (tmp_path / "trainers" / "train.py").write_text("STEPS = 1\n")
    (tmp_path / ".gitignore").write_text("runs/\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    monkeypatch.setattr(provenance, "SOURCE", tmp_path)
    return tmp_path


def test_a_changed_or_new_module_is_dirty_notes_and_runs_are_not(checkout):
    assert provenance.provenance()["git"]["dirty"] is False
    (checkout / "runs").mkdir()
    (checkout / "runs" / "log.txt").write_text("ignored\n")
    (checkout / "notes.txt").write_text("not code\n")
    assert provenance.provenance()["git"]["dirty"] is False
    module = checkout / "trainers" / "train.py"
    module.write_text("STEPS = 2\n")
    assert provenance.provenance()["git"]["dirty"] is True
    module.write_text("STEPS = 1\n")
    assert provenance.provenance()["git"]["dirty"] is False
    (checkout / "trainers" / "new.py").write_text("print('not added yet')\n")
    assert provenance.provenance()["git"]["dirty"] is True
