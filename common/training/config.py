"""`TrainingConfig`: how a model is trained, saved beside every checkpoint.

The same config drives both families (captioner and translators). It is a frozen dataclass,
so `common.config.to_dict` / `from_dict` round-trip it through `RUN_DIR/config.json`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from common.errors import UserError

DISTRIBUTE_CHOICES = ("none", "mirrored", "multi-worker", "auto")
PRECISION_CHOICES = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
# The dropout masks' random bits (`common.layers.dropout_rng`): Keras's generator (threefry on
# JAX) or, for the JAX trainer, XLA's RngBitGenerator (Philox on GPUs).
DROPOUT_RNG_CHOICES = ("keras", "rbg")


@dataclass(frozen=True)
class TrainingConfig:
    """How to train: epochs, batch, optimizer settings, checkpoints, logging, devices.

    Args:
        epochs: number of passes to train for, counted from the start of the run (a resumed
            run with a larger `epochs` continues up to it).
        steps_per_epoch: optimizer steps per epoch; `None` means one pass over the data that
            `make_dataset` returns for the epoch.
        batch_size: the global batch size, split evenly over the replicas; it must be a
            multiple of the number of replicas.
        learning_rate: the learning rate of the default Adam optimizer.
        clip_norm: clip the gradient to this global norm (`None` disables clipping). Under
            several replicas the norm is the norm of the cross-replica summed gradient.
        checkpoint_every: also save a checkpoint every this many steps (0: only at epoch ends).
        keep_checkpoints: how many checkpoints `RUN_DIR/checkpoints` keeps.
        log_every: write TensorBoard scalars and a `history.jsonl` line every this many steps.
        seed: the seed given to `keras.utils.set_random_seed` before the model is built.
        deterministic: make two runs with the same seed, data, packages and machine give the
            same weights bit for bit: TensorFlow's op determinism (on every device) and no
            Grappler graph rewriting, which otherwise reorders floating-point sums differently
            from process to process. Slower; see `make_deterministic`.
        jit_compile: compile the training step with XLA; `None` (auto): on where a GPU is
            visible, off on CPU (see `resolve_auto`).
        distribute: "none", "mirrored", "multi-worker" or "auto" (see `make_strategy`).
        logical_cpus: split the CPU into this many logical devices for "mirrored"
            (0 leaves the devices alone).
        precision: "float32", "mixed_float16" (with loss scaling), "mixed_bfloat16" or
            "auto": bfloat16 on GPUs that compute in it (compute capability 8.0 and up),
            float16 on older GPUs (7.x), float32 on CPU (see `resolve_auto`).
        best_metric: keep the weights of the best validation by this metric (a name the
            family's validation reports, e.g. "bleu") in `RUN_DIR/best/`, apart from the
            rotation of `keep_checkpoints` (see `common.training.best`); "auto": the first
            number the validation reports (the family's headline metric), when the run
            validates; None: no best kept.
        best_mode: "max" (higher is better) or "min".
        early_stopping: stop after this many validations without a new best (0: never).
        validation_examples: after each epoch, decode this many examples of the dataset's
            validation split (the first ones, the same every epoch) and score them with the
            family's metrics; 0 turns validation off.
        validation_beam_size: the beam size of that decoding (1: greedy).
        dropout_rng: where dropout's random bits come from: "keras" (Keras's generator, the
            only one of the TensorFlow trainer) or "rbg" (the JAX trainer only: XLA's
            RngBitGenerator, `common.layers.dropout_rng`; cheaper on a GPU, the same rates,
            another stream of masks, so a run is reproducible under one generator, not across
            them).

    Example:
    >>> TrainingConfig(epochs=2, batch_size=32).steps_per_epoch is None
    True
    """

    epochs: int = 10
    steps_per_epoch: int | None = None
    batch_size: int = 64
    learning_rate: float = 1e-3
    clip_norm: float | None = None
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    log_every: int = 100
    seed: int = 1234
    deterministic: bool = False
    jit_compile: bool | None = None
    distribute: str = "none"
    logical_cpus: int = 0
    precision: str = "auto"
    best_metric: str | None = "auto"
    best_mode: str = "max"
    early_stopping: int = 0
    validation_examples: int = 200
    validation_beam_size: int = 1
    dropout_rng: str = "keras"

    def __post_init__(self) -> None:
        _check_int("epochs", self.epochs, minimum=1)
        if self.steps_per_epoch is not None:
            _check_int("steps_per_epoch", self.steps_per_epoch, minimum=1)
        _check_int("batch_size", self.batch_size, minimum=1)
        _check_positive("learning_rate", self.learning_rate)
        if self.clip_norm is not None:
            _check_positive("clip_norm", self.clip_norm)
        _check_int("checkpoint_every", self.checkpoint_every, minimum=0)
        _check_int("keep_checkpoints", self.keep_checkpoints, minimum=1)
        _check_int("log_every", self.log_every, minimum=1)
        _check_int("seed", self.seed, minimum=0, maximum=2**32 - 1)  # NumPy's and JAX's range
        _check_int("logical_cpus", self.logical_cpus, minimum=0)
        _check_int("early_stopping", self.early_stopping, minimum=0)
        _check_int("validation_examples", self.validation_examples, minimum=0)
        _check_int("validation_beam_size", self.validation_beam_size, minimum=1)
        if self.best_mode not in ("max", "min"):
            raise UserError(f"best_mode must be max or min, got {self.best_mode!r}")
        if self.best_metric == "none":  # the command line's spelling of None
            object.__setattr__(self, "best_metric", None)
        if self.early_stopping and not self.best_metric:
            raise UserError("early_stopping needs best_metric: the metric it waits on")
        if not isinstance(self.deterministic, bool):
            raise UserError(f"deterministic must be true or false, got {self.deterministic!r}")
        if self.jit_compile is not None and not isinstance(self.jit_compile, bool):
            raise UserError(
                f"jit_compile must be true, false or null (auto), got {self.jit_compile!r}")
        if self.distribute not in DISTRIBUTE_CHOICES:
            raise UserError(
                f"Unknown distribute {self.distribute!r}; "
                f"choose one of: {', '.join(DISTRIBUTE_CHOICES)}"
            )
        if self.dropout_rng not in DROPOUT_RNG_CHOICES:
            raise UserError(
                f"Unknown dropout_rng {self.dropout_rng!r}; "
                f"choose one of: {', '.join(DROPOUT_RNG_CHOICES)}"
            )
        if self.precision not in PRECISION_CHOICES:
            raise UserError(
                f"Unknown precision {self.precision!r}; "
                f"choose one of: {', '.join(PRECISION_CHOICES)}"
            )


def refuse_jax_dropout_rng(dropout_rng: str) -> None:
    """The TensorFlow trainer's check of `dropout_rng`: it draws Keras's masks only, so
    another generator is refused in one line rather than trained without."""
    if dropout_rng != "keras":
        raise UserError(f"dropout_rng {dropout_rng!r} is the JAX trainer's (`train --prepared` "
                        "on KERAS_BACKEND=jax); the TensorFlow trainer draws Keras's masks: "
                        "expected keras")


def resolve_auto(config: TrainingConfig,
                 gpu_capabilities: Sequence[tuple[int, int]] | None = None) -> TrainingConfig:
    """`config` with `precision="auto"` and `jit_compile=None` made concrete for the devices.

    Mixed precision and XLA pay on GPUs (tensor cores, fused kernels) and not on CPUs, where
    bfloat16 matmuls are emulated on most chips and XLA's compile time outweighs its gain for
    these small models. So: `auto` precision is `mixed_bfloat16` when every GPU has compute
    capability 8.0 or more (A100, H100, ...), `mixed_float16` when they are 7.x (V100, T4),
    `float32` otherwise; `auto` XLA is on exactly when there is a GPU.

    Args:
        config: a `TrainingConfig`; explicit settings are kept.
        gpu_capabilities: `(major, minor)` per GPU; default: the visible GPUs'.
    """
    if gpu_capabilities is None:
        gpu_capabilities = visible_gpu_capabilities()
    precision = config.precision
    if precision == "auto":
        oldest = min((major for major, _ in gpu_capabilities), default=0)
        precision = ("mixed_bfloat16" if oldest >= 8 else
                     "mixed_float16" if oldest >= 7 else "float32")
    jit_compile = config.jit_compile
    if jit_compile is None:
        jit_compile = bool(gpu_capabilities)
    return replace(config, precision=precision, jit_compile=jit_compile)


def visible_gpu_capabilities() -> list[tuple[int, int]]:
    """`(major, minor)` compute capability of each GPU TensorFlow sees (`(0, 0)` if unknown)."""
    import tensorflow as tf

    capabilities = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        capabilities.append(tuple(details.get("compute_capability", (0, 0))))
    return capabilities


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise UserError(f"{name} must be an integer <= {maximum}, got {value!r}")


def _check_positive(name: str, value: object) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not 0 < value < float("inf"):
        raise UserError(f"{name} must be a finite number > 0, got {value!r}")
