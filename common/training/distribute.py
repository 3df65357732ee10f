"""Distribution strategies by name, and who the chief is.

`make_strategy(name, logical_cpus)` turns `TrainingConfig.distribute` into a
`tf.distribute.Strategy`:

| name | strategy |
|---|---|
| `none` | the default strategy, `tf.distribute.get_strategy()` (one device) |
| `mirrored` | `MirroredStrategy` over the local GPUs, or over `logical_cpus` logical CPUs |
| `multi-worker` | `MultiWorkerMirroredStrategy`; the cluster comes from `TF_CONFIG` |
| `auto` | `mirrored` when there is more than one GPU, else `none` |

Logical CPUs must be configured before TensorFlow initializes its devices (before the first
op runs or device is listed); `make_strategy` raises `DeviceConfigError` when it is too late,
unless the devices already have the requested layout.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from common.errors import UserError
from common.registry import Registry

STRATEGIES = Registry("distribution strategy")


class DeviceConfigError(RuntimeError):
    """Logical devices were asked for after TensorFlow had already initialized its devices."""


def configure_logical_cpus(count: int) -> list[str]:
    """Split the first physical CPU into `count` logical devices and return their names.

    Args:
        count: the number of logical CPUs wanted (>= 1).

    Returns:
        The names of the logical CPU devices, e.g. `["/device:CPU:0", "/device:CPU:1"]`.

    Raises:
        DeviceConfigError: TensorFlow's devices were initialized with another layout.
    """
    if count < 1:
        raise UserError(f"logical_cpus must be >= 1, got {count}")
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError:
        existing = tf.config.list_logical_devices("CPU")
        if len(existing) != count:
            raise DeviceConfigError(
                f"cannot split the CPU into {count} logical devices: TensorFlow has already "
                f"initialized {len(existing)} CPU device(s); call make_strategy before any "
                "TensorFlow op runs (for instance at the start of the program)"
            ) from None
    return [device.name for device in tf.config.list_logical_devices("CPU")]


def configure_logical_gpus(count: int, memory_limit_mb: int = 8192) -> list[str]:
    """Split the first GPU into `count` logical GPUs of `memory_limit_mb` each (to check
    mirrored training on a one-GPU machine); returns the logical GPU names. Like
    `configure_logical_cpus`, it must run before TensorFlow initializes its devices.

    Raises:
        UserError: there is no GPU.
        DeviceConfigError: TensorFlow's devices were initialized with another layout.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise UserError("no GPU to split into logical devices")
    try:
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mb)
                      for _ in range(count)])
    except RuntimeError:
        raise DeviceConfigError(
            f"cannot split the GPU into {count} logical devices: TensorFlow has already "
            "initialized its devices"
        ) from None
    return [device.name for device in tf.config.list_logical_devices("GPU")]


@STRATEGIES.register("none")
def _default(logical_cpus: int = 0) -> tf.distribute.Strategy:
    return tf.distribute.get_strategy()


@STRATEGIES.register("mirrored")
def _mirrored(logical_cpus: int = 0) -> tf.distribute.Strategy:
    if logical_cpus:
        return tf.distribute.MirroredStrategy(configure_logical_cpus(logical_cpus))
    return tf.distribute.MirroredStrategy()


@STRATEGIES.register("multi-worker")
def _multi_worker(logical_cpus: int = 0) -> tf.distribute.Strategy:
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise UserError(
            "distribute='multi-worker' needs the TF_CONFIG environment variable "
            '(e.g. {"cluster": {"worker": [...]}, "task": {"type": "worker", "index": 0}}); '
            "it is not set"
        )
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"TF_CONFIG is not valid JSON ({exc}); got {text[:80]!r}") from None
    return tf.distribute.MultiWorkerMirroredStrategy()


@STRATEGIES.register("auto")
def _auto(logical_cpus: int = 0) -> tf.distribute.Strategy:
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return _mirrored()
    return _default()


def make_strategy(name: str, logical_cpus: int = 0) -> tf.distribute.Strategy:
    """Build the distribution strategy called `name`.

    Args:
        name: one of "none", "mirrored", "multi-worker", "auto".
        logical_cpus: for "mirrored", mirror over this many logical CPUs instead of the
            GPUs (0: use the GPUs, or the one CPU when there is none). Ignored otherwise.

    Returns:
        A `tf.distribute.Strategy`.

    Raises:
        UnknownNameError: `name` is not a strategy (the message lists the choices).
        UserError: "multi-worker" without a usable `TF_CONFIG`.
        DeviceConfigError: logical CPUs asked for after TensorFlow initialized its devices.

    Example:
    >>> make_strategy("none").num_replicas_in_sync
    1
    """
    return STRATEGIES.get(name)(logical_cpus=logical_cpus)


def chief_task() -> bool:
    """Whether `TF_CONFIG`, when set, names this process the chief (`is_chief`'s rule: the
    chief, or worker 0 of a cluster without one), read before any strategy exists; True
    without a usable `TF_CONFIG`."""
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        task = config.get("task") or {}
        has_chief = "chief" in (config.get("cluster") or {})
        kind, index = task.get("type"), int(task.get("index", 0))
    except (ValueError, TypeError, AttributeError):
        return True
    return kind in (None, "chief") or (kind == "worker" and index == 0 and not has_chief)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes checkpoints and logs: the chief, or worker 0 without one.

    Single-process strategies (default, mirrored) always have the chief.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if resolver is None or task_type is None:
        return True
    if task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and resolver.task_id == 0 and not has_chief
