"""Training on Keras's JAX backend from a prepared folder, over every visible device.

`train_jax(prepared_dir, run_dir, training)` is the JAX counterpart of the families' `train`:
it reads only the folder `common.training.prepare` wrote (NumPy; no TensorFlow is imported),
builds the model and learning rate through the hooks of the folder's family
(`Family.build_model`, `Family.learning_rate`), and trains it with the model's own
`loss_terms(batch, training=True)`, as `common.training.Trainer` does:

    loss = loss_sum / count + sum(model.losses)       over the global batch
    reported: loss, count, examples, and every other term / count

The step is one `jax.jit`-compiled function: `loss_terms` runs under `keras.StatelessScope`
on the current variable values (so dropout seeds and hard attention's moving-average baseline
come out as new values, not side effects), `jax.value_and_grad` gives the gradients and
`optimizer.stateless_apply` the update. Clipping is the optimizer's `global_clipnorm`: the
gradient is already the global one. Dropout draws its masks from `config.dropout_rng`'s
generator (`common.layers.dropout_rng`: Keras's, or XLA's RngBitGenerator for "rbg").

Devices (`distribute`):
- `"none"`: the default device;
- `"data-parallel"`: `keras.distribution.DataParallel` over all devices of all processes:
  the variables are replicated, each global batch is split over the devices along its first
  axis and XLA (GSPMD) inserts the gradient all-reduce;
- `"model-parallel"`: `keras.distribution.ModelParallel` on a `(data, model)` mesh with
  `model_parallel` devices on the model axis; the Transformer's large matrices (embeddings,
  attention projections, feed-forward) are split along their wide axis (`transformer_layout`),
  everything else replicated.
Several processes (hosts) join with `initialize_processes` (`jax.distributed.initialize`)
before `train_jax`; each builds the same global batch from the same seed and hands the
devices their rows.

Run directory (as the TensorFlow trainer's, with its checkpoints in `jax/`):

```
RUN_DIR/config.json, vocab*.txt   copied from the prepared folder
RUN_DIR/history.jsonl             step and epoch records, as the TensorFlow trainer's
RUN_DIR/status.json               training | finished | failed, step, epoch, checkpoint
RUN_DIR/jax/ckpt-STEP/            model.weights.h5 + state.npz (every variable's value, the
                                  optimizer's and the position) + position.json
RUN_DIR/model.weights.h5          the final weights, for `import_jax_weights` (TensorFlow)
RUN_DIR/best/model.weights.h5     the best validation's weights, and `best/best.json`
```

Validation (`validation_examples`, `validation_beam_size`): the family's `Family.validation`
gives the examples the TensorFlow trainer validates on, from the prepared folder, and
`common.training.validation.Validator` decodes them with the same search (`jax.jit` over the
current state) and scores them with the same metrics; the best weights and early stopping
follow `common.training.best.BestPolicy`, as on TensorFlow, and survive a resume.

A checkpoint is written into `jax/.ckpt-STEP.tmp/` and renamed when complete, so a kill never
leaves a partial `ckpt-STEP`. `resume=True` restores the newest one (the position, the
weights, the optimizer and the random state) and skips the batches of the epoch already
trained on: a resumed run ends with the weights of an uninterrupted one. Only process 0 writes.
An epoch's record goes into `history.jsonl` before its checkpoint, and a write that fails (no
space, read-only) is a one-line `RunDirError` that leaves the complete checkpoints and no
partial one, as on TensorFlow (`common.training.run_dir`).

Dimensions: `B` global batch, `P` processes.
"""

from __future__ import annotations

import itertools
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from common.config import (
    deep_merge,
    differing_paths,
    from_dict,
    load_json,
    replacing,
    save_json,
)
from common.errors import DataError, UserError
from common.family import Family, family_named
from common.training.best import BestPolicy
from common.training.config import TrainingConfig
from common.training.loop import TrainingLoop
from common.training.prepare import Prepared, load_prepared
from common.training.progress import RunningMeans
from common.training.run_dir import (
    POSITION_FILE,
    STATE_FILE,
    RunDir,
    complete_jax_checkpoints,
    write_failure,
)
from common.training.validation import Validator

DISTRIBUTIONS = ("none", "data-parallel", "model-parallel")
CHECKPOINTS = RunDir.jax_checkpoints
WEIGHTS_FILE = RunDir.jax_weights
#: What this trainer does where the TensorFlow trainer has a setting it does not honour
#: (`common.training.capabilities.CAPABILITIES`), written so in the run's `config.json`: it
#: always compiles with XLA.
JAX_TRAINING_FACTS = {"jit_compile": True, "deterministic": False, "logical_cpus": 0}


def initialize_processes(coordinator: str, num_processes: int, process_id: int,
                         cpu_collectives: bool | None = None) -> None:
    """Join this process to a multi-process JAX run (`keras.distribution.initialize`).

    Args:
        coordinator: `host:port` of process 0.
        num_processes: `P`.
        process_id: this process, `0 <= process_id < P`.
        cpu_collectives: use gloo for cross-process collectives between CPU devices (needed
            when the devices are CPUs); default: when no accelerator is expected
            (`JAX_PLATFORMS` is `cpu`).
    """
    import jax

    if cpu_collectives is None:
        cpu_collectives = os.environ.get("JAX_PLATFORMS", "") == "cpu"
    if cpu_collectives:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    import keras

    keras.distribution.initialize(coordinator, num_processes, process_id)


def transformer_layout(device_mesh: Any, model_axis: str = "model") -> Any:
    """The `keras.distribution.LayoutMap` that splits the Transformer's large matrices.

    Embeddings `(V, D)` and the output projection `(D, V)` along `D` (vocabularies seldom
    divide by the device count; widths do); query/key/value kernels
    `(D, H, K)` along the heads; the attention output `(H, K, D)` along the heads; the
    feed-forward's inner kernel `(D, F)` along `F` and its outer `(F, D)` along `F` (Megatron's
    column- then row-parallel split). Other variables are replicated.
    """
    import keras

    layout = keras.distribution.LayoutMap(device_mesh)
    layout[r".*embedding/embeddings"] = (None, model_axis)
    layout[r".*reverse_embeddings"] = (model_axis, None)
    layout[r".*(query|key|value)/kernel"] = (None, model_axis, None)
    layout[r".*attention_output/kernel"] = (model_axis, None, None)
    layout[r".*ffn_inner/kernel"] = (None, model_axis)
    layout[r".*ffn_outer/kernel"] = (model_axis, None)
    return layout


def make_distribution(distribute: str, model_parallel: int = 1) -> Any:
    """The `keras.distribution.Distribution` for `distribute` (None for `"none"`)."""
    import keras

    if distribute not in DISTRIBUTIONS:
        raise UserError(f"Unknown distribute {distribute!r} on JAX; choose one of: "
                        f"{', '.join(DISTRIBUTIONS)}")
    if distribute == "none":
        return None
    devices = keras.distribution.list_devices()
    if distribute == "data-parallel":
        return keras.distribution.DataParallel(devices=devices)
    if model_parallel < 1 or len(devices) % model_parallel:
        raise UserError(f"model_parallel {model_parallel} does not divide the {len(devices)} "
                        "devices; expected a divisor")
    mesh = keras.distribution.DeviceMesh((len(devices) // model_parallel, model_parallel),
                                         ("batch", "model"), devices)
    return keras.distribution.ModelParallel(layout_map=transformer_layout(mesh),
                                            batch_dim_name="batch")


def build_family_model(family: str | Family, config: dict[str, Any],
                       vocab_sizes: dict[str, int]
                       ) -> tuple[Any, Callable[[TrainingConfig, int], Any]]:
    """The family's model (`Family.build_model`) and `(training, steps per epoch) ->
    optimizer`: Adam at the family's `learning_rate`, clipped to `training.clip_norm`, as the
    family's `train` makes them.

    Args:
        family: a `Family` or its name (`common.family.family_named`).
        config: the run config as a dict (`config.json`).
        vocab_sizes: name -> tokens, by the names of the family's
            `prepared_layout().vocabularies`.
    """
    import keras

    family = family_named(family) if isinstance(family, str) else family
    model = family.build_model(config, vocab_sizes)

    def build_optimizer(training: TrainingConfig, steps: int):
        return keras.optimizers.Adam(family.learning_rate(config, training, steps),
                                     global_clipnorm=training.clip_norm)

    return model, build_optimizer


def resolve_precision(precision: str) -> str:
    """`"auto"`: mixed_bfloat16 on GPUs and TPUs, float32 on CPUs; float16 needs loss
    scaling, which this trainer does not do."""
    import jax

    if precision == "mixed_float16":
        raise UserError("precision mixed_float16 needs loss scaling, which the JAX trainer "
                        "does not do; expected mixed_bfloat16 or float32")
    if precision == "auto":
        return "float32" if jax.default_backend() == "cpu" else "mixed_bfloat16"
    return precision


class JaxTrainer:
    """Trains the model of a prepared folder on JAX (see the module docstring).

    Args:
        prepared: a `Prepared` folder (`load_prepared`).
        run_dir: the run directory.
        config: a `TrainingConfig` (`distribute`, `logical_cpus`, `jit_compile` and
            `deterministic` are the TensorFlow trainer's; here `distribute` is given apart).
        distribute: one of `DISTRIBUTIONS`.
        model_parallel: devices on the model axis for `"model-parallel"`.
    """

    def __init__(self, prepared: Prepared, run_dir: str | os.PathLike, config: TrainingConfig,
                 distribute: str = "data-parallel", model_parallel: int = 1):
        import jax
        import keras

        if keras.backend.backend() != "jax":
            raise UserError(f"the JAX trainer needs KERAS_BACKEND=jax; got "
                            f"{keras.backend.backend()!r}")
        if Path(run_dir).resolve() == Path(prepared.path).resolve():
            raise UserError(f"{run_dir} is the prepared folder; expected another run "
                            "directory (--out) for the run")
        self.prepared = prepared
        self.run_dir = RunDir(run_dir)
        self.config = config = replace(config, precision=resolve_precision(config.precision))
        self.chief = jax.process_index() == 0
        self.distribution = make_distribution(distribute, model_parallel)
        replicas = (self.distribution.device_mesh.shape[0] if self.distribution is not None
                    else 1)
        if config.batch_size % replicas:
            raise UserError(f"batch_size {config.batch_size} does not split over {replicas} "
                            f"devices; expected a multiple of {replicas}")
        keras.config.set_dtype_policy(config.precision)
        keras.utils.set_random_seed(config.seed)
        with self._scope():
            self.model, build_optimizer = build_family_model(
                prepared.family, prepared.config,
                {name: len(tokens) for name, tokens in prepared.vocabularies.items()})
            batch = next(self._batches("train", 0), None)
            if batch is None:
                raise UserError(f"{prepared.path}: fewer training examples per bucket than "
                                f"batch_size {config.batch_size}; expected at least one batch")
            try:
                self.model.loss_terms(batch, training=False)  # creates the variables
                self._steps_per_pass = (None if config.steps_per_epoch
                                        else max(1, self._pass_steps()))
                steps = config.steps_per_epoch or self._steps_per_pass
                self.optimizer = build_optimizer(config, steps)
                # The rate the step logs show (`learning_rate`): the family's, as the
                # optimizer has it.
                self._rate = family_named(prepared.family).learning_rate(
                    prepared.config, config, steps)
                self.optimizer.build(self.model.trainable_variables)
                # Found now: once training steps run, reading `optimizer.learning_rate` would
                # read arrays the compiled step has taken over (a schedule reads the count).
                self._rate_position = _rate_index(self.optimizer)
            except ValueError as exc:  # jax's IndivisibleError: a split that does not divide
                if model_parallel == 1 or "evenly divide" not in str(exc):
                    raise
                shape = str(exc).split("full shape: ")[-1].split(", per")[0]
                raise UserError(f"model_parallel {model_parallel} does not divide the model: "
                                f"a weight of shape {shape} is split along an axis it does "
                                "not divide; expected a divisor of the heads, the width and "
                                "the feed-forward size") from None
        self._train_step = self._compile(training=True)
        self._eval_step = self._compile(training=False)
        self.state = self._variables_state()
        self.position = {"step": 0, "epoch": 0, "step_in_epoch": 0}
        # Validation by decoding (the family's `validation`) and the best checkpoint.
        validation = (family_named(prepared.family).validation(
            prepared.config, prepared, config.validation_examples)
            if config.validation_examples else None)
        self.validation = (None if validation is None else Validator(
            self.model, validation, config.validation_beam_size))
        self.loop: TrainingLoop | None = None  # made by `fit`
        self._host: tuple[int, dict[str, np.ndarray]] | None = None  # `weights_finite`'s

    # -- the step ------------------------------------------------------------------------------

    def mesh(self) -> dict[str, int]:
        """The device mesh the step runs on, axis name -> size (`{}` on one device)."""
        if self.distribution is None:
            return {}
        mesh = self.distribution.device_mesh
        return dict(zip(mesh.axis_names, mesh.shape))

    def _scope(self):
        import contextlib

        return self.distribution.scope() if self.distribution else contextlib.nullcontext()

    def _variables_state(self) -> tuple[list, list, list]:
        return ([v.value for v in self.model.trainable_variables],
                [v.value for v in self.model.non_trainable_variables],
                [v.value for v in self.optimizer.variables])

    def _compile(self, training: bool):
        import jax
        import keras
        from keras import ops

        from common.layers.dropout import dropout_rng

        model, optimizer = self.model, self.optimizer
        trainable_vars, other_vars = model.trainable_variables, model.non_trainable_variables
        shardings = None
        if self.distribution is not None:
            shardings = jax.tree.map(lambda x: x.sharding, self._variables_state())

        def objective(trainable, non_trainable, batch):
            mapping = list(zip(trainable_vars, trainable)) + list(zip(other_vars, non_trainable))
            # The dropout masks' generator acts when the step is traced (`dropout_rng`).
            with keras.StatelessScope(state_mapping=mapping) as scope, \
                    dropout_rng(self.config.dropout_rng):
                terms = model.loss_terms(batch, training=training)
                losses = model.losses
            updated = [scope.get_current_value(v) for v in other_vars]
            updated = [old if new is None else new for old, new in zip(non_trainable, updated)]
            if not isinstance(terms, dict) or not {"loss_sum", "count"} <= set(terms):
                raise TypeError("loss_terms must return a dict with 'loss_sum' and 'count'")
            sums = {k: ops.reshape(ops.cast(v, "float32"), ()) for k, v in terms.items()}
            loss = sums["loss_sum"] / ops.maximum(sums["count"], 1.0)
            for extra in losses:
                loss = loss + ops.cast(extra, "float32")
            return loss, (sums, updated)

        def report(loss, sums, batch):
            count = sums["count"]
            extras = {k: v / ops.maximum(count, 1.0) for k, v in sums.items()
                      if k not in ("loss_sum", "count")}
            examples = jax.tree.leaves(batch)[0].shape[0]
            return {**extras, "loss": loss, "count": count,
                    "examples": ops.convert_to_tensor(float(examples))}

        def constrain(state):
            if shardings is None:
                return state
            return jax.tree.map(jax.lax.with_sharding_constraint, state, shardings)

        if not training:
            def eval_step(state, batch):
                loss, (sums, _) = objective(state[0], state[1], batch)
                return report(loss, sums, batch)

            return jax.jit(eval_step)

        gradient = jax.value_and_grad(objective, has_aux=True)

        def train_step(state, batch):
            trainable, non_trainable, optimizer_vars = state
            (loss, (sums, non_trainable)), grads = gradient(trainable, non_trainable, batch)
            trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads,
                                                                  trainable)
            state = constrain((trainable, non_trainable, optimizer_vars))
            return state, report(loss, sums, batch)

        return jax.jit(train_step, donate_argnums=0)

    # -- data ------------------------------------------------------------------------------

    def _batches(self, split: str, epoch: int, repeat: bool = False, training: bool = True):
        """`split`'s batches. Every example is served: a bucket's last rows are padded to the
        batch (rows of no target token, which add nothing to the token sums), except in
        training where the family's layout says `"drop"` (`PreparedLayout.train_remainder`:
        the captioner's, whose hard attention moves its baseline by the batch's mean reward):
        there each pass drops other `< batch_size` rows."""
        remainder = self.prepared.layout.train_remainder if training else "pad"
        return self.prepared.batches(split, self.config.batch_size, self.config.seed, epoch,
                                     repeat=repeat, remainder=remainder)

    def _pass_steps(self) -> int:
        return sum(1 for _ in self._batches("train", 0))

    def _global(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """The global batch laid out over the devices (each process holds the same `batch`
        and gives its devices their rows)."""
        if self.distribution is None:
            return batch
        import jax

        out = {}
        for key, value in batch.items():
            sharding = self.distribution.get_data_layout(value.shape).backend_layout
            out[key] = jax.make_array_from_callback(value.shape, sharding,
                                                    lambda index, v=value: v[index])
        return out

    def step(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """One optimizer step on a host batch (every process passes the same global batch).

        Returns the step's metrics as device scalars: reading one (`float`) waits for the
        step, so a timing loop can queue several steps before it reads.
        """
        self.state, metrics = self._train_step(self.state, self._global(batch))
        return {**metrics, "examples": float(self.prepared.real_rows(batch))}

    def save_weights(self, path: str | os.PathLike) -> None:
        """Write the current weights as a Keras `.weights.h5` (on process 0 only)."""
        self._sync_variables()
        if self.chief:
            self._write_weights(Path(path))

    # -- training ------------------------------------------------------------------------------

    def fit(self, resume: bool = False, verbose: int = 1) -> list[dict[str, Any]]:
        """Train up to `config.epochs` epochs; returns one record per epoch run (as the
        TensorFlow trainer's, with `val_loss` when the folder has a `valid` split).

        The epochs run in `common.training.loop.TrainingLoop`, the loop the TensorFlow
        trainer runs too; this class is its JAX backend."""
        validate = None if self.validation is None else lambda epoch: self.validate()
        self.loop = TrainingLoop(self, validate)
        return self.loop.fit(resume, verbose)

    @property
    def best(self) -> BestPolicy | None:
        """The best checkpoint and early stopping of the run `fit` trains (None before)."""
        return self.loop.best if self.loop is not None else None

    def epoch_batches(self, epoch: int):
        """The host batches epoch `epoch` trains on, in order: `steps_per_epoch` of them from
        the repeated, reshuffled data when set, else one pass."""
        steps = self.config.steps_per_epoch
        batches = self._batches("train", epoch, repeat=steps is not None)
        return itertools.islice(batches, steps) if steps is not None else batches

    # -- the loop's backend (`common.training.loop.StepBackend`) -------------------------------

    name, first_claim, pipelined = "jax", True, True

    def begin(self, resume: bool, verbose: int) -> None:
        # Nothing of the run is written before it is known to be this model's: its config,
        # vocabularies and checkpoint shapes are checked first.
        restored = self._restore() if resume else None
        if self.chief:
            self._copy_run_files()
        if verbose and restored:
            print(f"Resuming from {restored} at {self.position}", flush=True)

    def get_position(self) -> dict[str, int]:
        return dict(self.position)

    def set_position(self, step: int, epoch: int, step_in_epoch: int) -> None:
        self.position = {"step": step, "epoch": epoch, "step_in_epoch": step_in_epoch}

    def pass_steps(self) -> int | None:
        return self._steps_per_pass

    def batches(self, epoch: int, skip: int):
        return itertools.islice(self.epoch_batches(epoch), skip, None)

    def learning_rate(self, step: int) -> float:
        """The state's constant rate, or the family's schedule at `step`."""
        index = self._rate_position
        if index is not None:
            return float(np.asarray(self.state[2][index]))
        if callable(self._rate):
            import keras

            return float(keras.ops.convert_to_numpy(self._rate(step)))
        return float(self._rate)

    def weights_finite(self) -> bool:
        """Whether every floating value of the state is finite (a collective under several
        processes); the values gathered are kept for the checkpoint that follows."""
        host = self.host_state()
        self._host = (self.position["step"], host)
        return _all_finite(host)

    def save_checkpoint(self) -> str | None:
        host, self._host = self._host, None
        return self._save(host[1] if host and host[0] == self.position["step"] else None)

    def newest_checkpoint(self) -> str | None:
        return self._latest()

    def rollback(self, bad_weights_step: int | None) -> str | None:
        found = complete_jax_checkpoints(self.checkpoints)
        if found and bad_weights_step is not None and int(found[0].name[5:]) == bad_weights_step:
            if self.chief:
                shutil.rmtree(found[0], ignore_errors=True)
            found = found[1:]
        if not found:
            return None
        self._load_checkpoint(found[0])
        return str(found[0])

    def evaluate_losses(self) -> dict[str, float]:
        return self.evaluate("valid") if "valid" in self.prepared.splits else {}

    def best_writer(self) -> dict[str, Any]:
        return {"write": self._write_best, "file": WEIGHTS_FILE}

    def summaries(self):
        import contextlib

        return contextlib.nullcontext()  # no TensorBoard without TensorFlow

    def write_scalars(self, record: dict[str, Any]) -> None:
        pass

    def write_samples(self, samples: dict[str, Any], step: int) -> None:
        pass

    def truncate_logs(self, step: int) -> None:
        pass

    def finish(self) -> None:
        """The final weights, `RUN_DIR/model.weights.h5` (for `import_jax_weights`)."""
        final = self.run_dir.path / WEIGHTS_FILE
        try:
            self.save_weights(final)
        except OSError as exc:
            raise write_failure(final, exc) from None

    def status_fields(self) -> dict[str, Any]:
        return {"backend": "jax", "mesh": self.mesh()}

    # -- validation by decoding, the best checkpoint, early stopping --------------------------

    def _write_best(self, model: Any, path: Path) -> None:
        """`BestPolicy`'s writer: the current weights as `path` (`best/model.weights.h5`)."""
        self._sync_variables()
        self._write_weights(path)

    def validate(self) -> dict[str, Any]:
        """The family's validation (`common.training.validation`) of the current state."""
        return self.validation(state=(self.state[0], self.state[1]))

    def evaluate(self, split: str = "valid") -> dict[str, float]:
        """Count-weighted mean `loss` and extra terms over all of `split` (no update; dropout
        off)."""
        means = RunningMeans()
        for batch in self._batches(split, 0, training=False):
            metrics = self._eval_step(self.state, self._global(batch))
            means.add({**{k: float(v) for k, v in metrics.items()},
                       "examples": float(self.prepared.real_rows(batch))})
        return means.result()

    def compile_steps(self) -> int:
        """Compile the training step for every batch shape of the data (one per bucket) and
        the evaluation step for `valid`'s, so that no compilation falls inside a timed epoch;
        the state is left as it was. Returns how many shapes were compiled."""
        import jax

        def shapes(split, training=True):
            seen = {}
            for batch in self._batches(split, 0, training=training):
                seen.setdefault(tuple(sorted((k, v.shape) for k, v in batch.items())), batch)
            return list(seen.values())

        state = self.state
        self.state = jax.tree.map(lambda x: x.copy(), state)  # the step donates its input
        try:
            train = shapes("train")
            for batch in train:
                float(self.step(batch)["loss"])
        finally:
            self.state = state
        valid = shapes("valid", training=False) if "valid" in self.prepared.splits else []
        for batch in valid:
            float(self._eval_step(self.state, self._global(batch))["loss"])
        return len(train) + len(valid)

    # -- checkpoints ---------------------------------------------------------------------------

    @property
    def checkpoints(self) -> Path:
        return self.run_dir.path / CHECKPOINTS

    def _latest(self) -> str | None:
        found = complete_jax_checkpoints(self.checkpoints)
        return str(found[0]) if found else None

    def _sync_variables(self) -> None:
        """Put the state's values into the Keras variables (for saving)."""
        variables = (self.model.trainable_variables, self.model.non_trainable_variables,
                     self.optimizer.variables)
        for group, values in zip(variables, self.state):
            for variable, value in zip(group, values):
                variable.assign(value)

    def host_state(self) -> dict[str, np.ndarray]:
        """Every value of the state as NumPy on this host: `tNNNNN` trainable, `nNNNNN`
        non-trainable, `oNNNNN` optimizer variables (a collective under several processes)."""
        from jax.experimental import multihost_utils

        out = {}
        for prefix, values in zip("tno", self.state):
            for i, value in enumerate(values):
                if not value.is_fully_addressable:
                    value = multihost_utils.process_allgather(value, tiled=True)
                out[f"{prefix}{i:05d}"] = np.asarray(value)
        return out

    def _write_weights(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.tmp.weights.h5")
        try:
            self.model.save_weights(tmp)
            os.replace(tmp, path)
        finally:  # a file cut short by a full disk is removed
            tmp.unlink(missing_ok=True)

    def _checked_host_state(self) -> dict[str, np.ndarray]:
        """`host_state()` (a collective under several processes: every one calls it), after
        checking that every weight is finite."""
        host = self.host_state()
        if not _all_finite(host):
            raise UserError(f"training diverged: a weight became NaN or infinite at step "
                                f"{self.position['step']}; stopped without saving")
        return host

    def _save(self, host: dict[str, np.ndarray] | None = None) -> str | None:
        """Write a checkpoint of `host` (default: the state now, checked) at `position`;
        returns its folder (None where this process does not write)."""
        if host is None:
            host = self._checked_host_state()
        if not self.chief:
            return None
        self._sync_variables()
        final = self.checkpoints / f"ckpt-{self.position['step']}"
        tmp = self.checkpoints / f".ckpt-{self.position['step']}.tmp"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            self._write_weights(tmp / WEIGHTS_FILE)
            with open(tmp / STATE_FILE, "wb") as f:
                np.savez(f, **host)
            save_json(tmp / POSITION_FILE, self.position)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)  # the part written, no checkpoint
            raise write_failure(self.checkpoints, exc) from None
        for old in complete_jax_checkpoints(self.checkpoints)[self.config.keep_checkpoints:]:
            shutil.rmtree(old, ignore_errors=True)
        return str(final)

    def _restore(self) -> str | None:
        """Restore the newest JAX checkpoint (None: there is none, the run starts afresh),
        after checking that the run is one of this prepared folder's model."""
        self._check_resumable()
        found = complete_jax_checkpoints(self.checkpoints)
        if not found:
            return None
        self._load_checkpoint(found[0])
        return str(found[0])

    def _load_checkpoint(self, folder: Path) -> None:
        """Put `folder`'s state and position in place (the config's learning rate kept)."""
        self._put_host_state(self._read_state(folder), folder)
        self._apply_learning_rate()
        position = load_json(folder / POSITION_FILE)
        if not (isinstance(position, dict) and all(
                isinstance(position.get(k), int) for k in ("step", "epoch", "step_in_epoch"))):
            raise DataError(f"{folder / POSITION_FILE}: not a training position; expected "
                            "a complete checkpoint: move the folder away to use the one before")
        self.position = position

    def _apply_learning_rate(self) -> None:
        """Set the optimizer's rate in the state to the config's after a restore, which brings
        back the rate the checkpoint was saved with: `--resume --learning-rate X` then trains
        at X, as on TensorFlow. Only a constant rate is a variable (`optimizer.learning_rate` itself); a
        schedule (the Transformer's, a cosine decay) is a function of the step and is built
        from the config already."""
        import jax

        index = self._rate_position
        if index is None:
            return
        opt_state = list(self.state[2])
        old = opt_state[index]
        opt_state[index] = jax.device_put(
            np.asarray(self.config.learning_rate, dtype=old.dtype), old.sharding)
        self.state = (self.state[0], self.state[1], opt_state)

    def _check_resumable(self) -> None:
        """Refuse to resume a TensorFlow run, or a run of another model or vocabulary than the
        prepared folder's (a one-line `UserError` naming what differs)."""
        run = self.run_dir.path
        if any((run / "checkpoints").glob("ckpt-*.index")):
            if complete_jax_checkpoints(self.checkpoints):  # checkpoints/ holds imports
                raise UserError(
                    f"{run}/checkpoints holds TensorFlow checkpoints imported from this JAX "
                    "run's weights (import_jax_weights), which training on would leave behind;"
                    f" move {run}/checkpoints away to resume on JAX, and import again after")
            raise UserError(f"{run} is a TensorFlow run (checkpoints/ckpt-N); on JAX --resume "
                            "continues a run of `train --prepared` (jax/ckpt-N)")
        if not (run / "config.json").is_file():
            return
        saved = load_json(run / "config.json")
        if not isinstance(saved, dict):
            raise UserError(f"{run / 'config.json'}: not a run config")
        differ = differing_paths({k: v for k, v in saved.items() if k != "training"},
                              {k: v for k, v in self.prepared.config.items() if k != "training"})
        for file in self.prepared.vocab_files.values():
            mine = self.prepared.path / file
            if not (run / file).is_file() or (run / file).read_bytes() != mine.read_bytes():
                differ.append(file)
        if differ:
            raise UserError(f"{run} was trained from another prepared folder than "
                            f"{self.prepared.path} (they differ in {', '.join(differ[:4])}); "
                            "expected the folder the run was trained from")

    def average_checkpoints(self, last: int) -> list[str]:
        """Set the model's values to their mean over the newest `last` JAX checkpoints, as
        `common.training.checkpoints.average_checkpoints` does for TensorFlow runs: floating
        model values summed in float64 and cast back, integer ones (random-generator states)
        and the optimizer's state from the newest. Returns the folders read, newest first.
        """
        if last < 1:
            raise UserError(f"nothing to average: asked for the newest {last} checkpoints; "
                            "expected at least 1")
        found = complete_jax_checkpoints(self.checkpoints)
        if len(found) < last:
            raise UserError(f"cannot average the newest {last} checkpoints: {self.checkpoints} "
                            f"has {len(found)} (train with keep_checkpoints N to keep more)")
        found = found[:last]
        host = self._read_state(found[0])
        averaged = {k: v for k, v in host.items()
                    if k[0] in "tn" and np.issubdtype(v.dtype, np.floating)}
        sums = {k: v.astype(np.float64) for k, v in averaged.items()}
        for folder in found[1:]:
            other = self._read_state(folder)
            for key in sums:
                sums[key] += other[key].astype(np.float64)
        host.update({k: (sums[k] / len(found)).astype(v.dtype) for k, v in averaged.items()})
        self._put_host_state(host, found[0])
        return [str(p) for p in found]

    @staticmethod
    def _read_state(folder: Path) -> dict[str, np.ndarray]:
        try:
            with np.load(folder / STATE_FILE) as npz:
                return {k: npz[k] for k in npz.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DataError(f"{folder / STATE_FILE}: cannot be read ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:120]}); expected a complete "
                            "checkpoint: move the folder away to use the one before") from None

    def _put_host_state(self, host: dict[str, np.ndarray], source: Path) -> None:
        """Lay `host` (as `host_state` writes it) out on the devices as the state."""
        import jax

        state = []
        for prefix, values in zip("tno", self.state):
            if sum(k[0] == prefix for k in host) != len(values):
                raise UserError(f"{source} holds another model's state; expected "
                                f"{len(values)} '{prefix}' arrays")
            for i, value in enumerate(values):
                saved = host[f"{prefix}{i:05d}"]
                if saved.shape != value.shape:
                    raise UserError(f"{source} holds another model's state: array {prefix}{i:05d}"
                                    f" is {saved.shape} there, {value.shape} in this model")
            state.append([jax.device_put(host[f"{prefix}{i:05d}"].astype(v.dtype), v.sharding)
                          for i, v in enumerate(values)])
        self.state = tuple(state)

    # -- run directory -------------------------------------------------------------------------

    def _copy_run_files(self) -> None:
        """`config.json` (with this run's training settings, as this trainer honours them:
        `JAX_TRAINING_FACTS`) and the vocabularies."""
        from common.config import to_dict

        config = dict(self.prepared.config)
        config["training"] = {**to_dict(self.config), **JAX_TRAINING_FACTS}
        try:
            save_json(self.run_dir.config, config)
        except OSError as exc:
            raise write_failure(self.run_dir.config, exc) from None
        for file in self.prepared.vocab_files.values():
            try:
                with replacing(self.run_dir.path / file) as tmp:  # the old file or a whole copy
                    shutil.copyfile(self.prepared.path / file, tmp)
            except OSError as exc:
                raise write_failure(self.run_dir.path / file, exc) from None
        self.run_dir.record_vocabularies(self.prepared.vocab_files.values())


def resumed_training(run_dir: str | os.PathLike, default: dict[str, Any],
                     resume: bool) -> dict[str, Any]:
    """The training settings a run starts from: with `resume`, the run's own
    (`RUN_DIR/config.json`) when it has them, else `default` (the prepared folder's)."""
    path = Path(run_dir) / "config.json"
    saved = load_json(path) if resume and path.is_file() else None
    if isinstance(saved, dict) and isinstance(saved.get("training"), dict):
        return saved["training"]
    return default


def _all_finite(host: dict[str, np.ndarray]) -> bool:
    """Whether every floating-point array of `host` (`host_state`) holds only finite values."""
    return all(np.all(np.isfinite(v)) for v in host.values()
               if np.issubdtype(v.dtype, np.floating))


def train_jax(prepared_dir: str | os.PathLike, run_dir: str | os.PathLike,
              training: TrainingConfig | dict[str, Any] | None = None,
              distribute: str = "data-parallel", model_parallel: int = 1,
              resume: bool = False, verbose: int = 1) -> list[dict[str, Any]]:
    """`KERAS_BACKEND=jax ... train --prepared PREPARED_DIR`: train the prepared folder's model
    into `run_dir`; returns the epoch records.

    Args:
        prepared_dir: a folder written by `prepare_translation` / `prepare_captions`.
        run_dir: the run directory.
        training: the training settings: a `TrainingConfig`, or a dict of those that
            change the run's own (`RUN_DIR/config.json`) when resuming one, else the
            prepared folder's (None: those as they are).
        distribute: one of `DISTRIBUTIONS`.
        model_parallel: devices on the model axis for `"model-parallel"`.
        resume: continue from the run's newest JAX checkpoint.
        verbose: 0 silent, 1 one line per epoch.
    """
    prepared = load_prepared(prepared_dir)
    if not isinstance(training, TrainingConfig):  # settings given over the run's or folder's
        training = from_dict(TrainingConfig, deep_merge(
            resumed_training(run_dir, prepared.config.get("training", {}), resume),
            training or {}))
    trainer = JaxTrainer(prepared, run_dir, training, distribute, model_parallel)
    return trainer.fit(resume=resume, verbose=verbose)


def _rate_index(optimizer) -> int | None:
    """The position in `optimizer.variables` (and in the optimizer's part of the state) of a
    constant learning rate: Keras's public `optimizer.learning_rate` is then that variable
    itself; None for a schedule (a function of the step, not a variable). Call it on a newly
    built optimizer: for a schedule the property reads the step count."""
    import keras

    rate = optimizer.learning_rate
    if not isinstance(rate, keras.Variable):
        return None
    return next((i for i, v in enumerate(optimizer.variables) if v is rate), None)
