"""Where training runs: logical CPU devices, the distribution strategy, the XLA decision, and
which worker is the chief. TensorFlow is imported by the functions that use it: the
programs' argument parsers read `STRATEGIES` before it starts."""

from __future__ import annotations

import json
import os
import typing

from trainers.errors import ConfigError

if typing.TYPE_CHECKING:
    import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker")


def split_cpu(num_devices: int) -> None:
    """Splits the CPU into `num_devices` logical devices, so `MirroredStrategy` can run
    several replicas without GPUs. Must run before TensorFlow initializes its devices."""
    import tensorflow as tf

    if num_devices < 1:
        raise ConfigError(f"--cpu-devices={num_devices} must be >= 1")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices
        )
    except RuntimeError as error:
        raise RuntimeError(
            f"--cpu-devices must be applied before TensorFlow starts: {error}"
        ) from None


def make_strategy(kind: str) -> tf.distribute.Strategy:
    """ "default" (one device), "mirrored" (every local GPU, else every logical CPU device)
    or "multi_worker" (MultiWorkerMirroredStrategy over the cluster in TF_CONFIG)."""
    import tensorflow as tf

    if kind == "default":
        return tf.distribute.get_strategy()
    if kind == "mirrored":
        devices = [d.name for d in tf.config.list_logical_devices("GPU")] or [
            d.name for d in tf.config.list_logical_devices("CPU")
        ]
        return tf.distribute.MirroredStrategy(devices)
    if kind == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ConfigError(
                "--strategy multi_worker reads the cluster from the TF_CONFIG environment "
                'variable, which is not set (e.g. {"cluster": {"worker": ["host1:port", '
                '"host2:port"]}, "task": {"type": "worker", "index": 0}})'
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ConfigError(f"--strategy={kind!r}; choose one of {STRATEGIES}")


def devices(strategy: tf.distribute.Strategy) -> list[str]:
    """The devices the strategy's replicas run on (this worker's)."""
    import tensorflow as tf

    try:
        return list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy: TensorFlow's default placement
        gpus = tf.config.list_logical_devices("GPU")
        return [gpus[0].name if gpus else tf.config.list_logical_devices("CPU")[0].name]


def uses_gpus(strategy: tf.distribute.Strategy) -> bool:
    return any("GPU" in device.upper() for device in devices(strategy))


def resolve_jit_compile(setting, strategy: tf.distribute.Strategy) -> bool:
    """XLA or not. "auto": on with one replica; off with several replicas on CPU devices,
    where XLA fails ("Trying to access resource ... located in device CPU:1 from CPU:0");
    on with several GPU replicas."""
    replicas = strategy.num_replicas_in_sync
    if setting == "auto":
        return replicas == 1 or uses_gpus(strategy)
    if setting and replicas > 1 and not uses_gpus(strategy):
        raise ConfigError(
            f"training.jit_compile=true does not work with {replicas} replicas on CPU devices "
            "(XLA cannot reach variables across CPU devices); use jit_compile: auto or false"
        )
    return bool(setting)


def worker_info(strategy: tf.distribute.Strategy) -> tuple[int, int, bool]:
    """(number of workers, this worker's index, whether it is the chief)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return 1, 0, True
    cluster = resolver.cluster_spec().as_dict()
    workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
    task_type, task_id = resolver.task_type, resolver.task_id or 0
    has_chief = "chief" in cluster
    index = task_id + (1 if has_chief and task_type == "worker" else 0)
    is_chief = task_type == "chief" or (task_type == "worker" and task_id == 0 and not has_chief)
    return workers, index, is_chief


def describe(strategy: tf.distribute.Strategy) -> str:
    return json.dumps(
        {
            "strategy": type(strategy).__name__,
            "replicas": strategy.num_replicas_in_sync,
            "devices": devices(strategy),
        }
    )
