"""MultiWorkerMirroredStrategy with two workers on 127.0.0.1: both train to the same
weights, only the chief writes, and a cluster that lost a worker resumes, skipping exactly the
batches it consumed, to the weights of an uninterrupted cluster, bit for bit."""

import json
import signal
from pathlib import Path

import pytest

from tests.test_reliability import wait_for_backup
from tests.test_trainer import free_ports, slice_config, summary_line
from tests.test_trainer import start_training as start

pytestmark = pytest.mark.slow


def cluster(config, model_dir: Path, *args):
    """A function starting worker `index` of a two-worker MultiWorkerMirroredStrategy run."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]

    def launch(index):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {"TF_CONFIG": json.dumps(tf_config)}
        return start(config, model_dir, "--strategy", "multi_worker", *args, env=env)

    return launch


def finish(processes) -> list[str]:
    """Waits for the workers; each must succeed. Their standard outputs."""
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr[-3000:]
    return [stdout for stdout, _ in outputs]


@pytest.mark.exact
def test_a_killed_worker_and_its_cluster_resume_to_the_weights_of_an_uninterrupted_cluster(
    tmp_path,
):
    config = slice_config(
        tmp_path,
        dev=False,
        steps=30,
        steps_per_epoch=10,
        deterministic="true",
        jit_compile="false",  # XLA would compile every length bucket again in each process
    )
    # Uninterrupted: both workers train, agree, and only the chief writes.
    launch = cluster(config, tmp_path / "once")
    chief, other = (summary_line(out) for out in finish([launch(0), launch(1)]))
    for summary in (chief, other):
        assert summary["strategy"] == "multi_worker"
        assert summary["workers"] == 2 and summary["replicas"] == 2 and summary["steps"] == 30
    assert chief["weights_sha256"] == other["weights_sha256"]
    assert chief["final_loss"] < chief["initial_loss"]
    once = tmp_path / "once"
    assert json.loads((once / "train_summary.json").read_text()) == chief
    assert len(list((once / "checkpoints").glob("*.weights.h5"))) == 2
    assert len(list((once / "backup").glob("state-*"))) == 1
    # Killed: a worker dies after the first backup; the chief reports it and exits 3.
    launch = cluster(config, tmp_path / "killed")
    chief, other = launch(0), launch(1)
    wait_for_backup(tmp_path / "killed", chief)
    other.send_signal(signal.SIGKILL)
    other.wait()
    _, stderr = chief.communicate(timeout=300)
    assert chief.returncode == 3, stderr[-2000:]
    assert "lost contact with another worker" in stderr
    assert "start the same command again on every worker" in stderr
    # Resumed: every worker skips the batches the cluster consumed, no more, and the cluster
    # ends with the uninterrupted one's weights, bit for bit (one program, one machine).
    launch = cluster(config, tmp_path / "killed")
    outputs = finish([launch(0), launch(1)])
    resumed = [summary_line(stdout) for stdout in outputs]
    assert resumed[0]["steps"] == resumed[1]["steps"] == 30
    assert resumed[0]["weights_sha256"] == resumed[1]["weights_sha256"] == chief_sha(once)
    assert all("resuming after update 10 " in stdout for stdout in outputs)


def chief_sha(model_dir: Path) -> str:
    return json.loads((model_dir / "train_summary.json").read_text())["weights_sha256"]
