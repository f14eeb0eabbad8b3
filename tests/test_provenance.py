"""trainers.provenance: the git commit and package versions recorded with results."""

import subprocess
from importlib import metadata

from trainers import provenance


def test_records_this_checkout_and_the_installed_versions():
    record = provenance.provenance()
    head = subprocess.run(
        ["git", "-C", str(provenance.SOURCE), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
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
