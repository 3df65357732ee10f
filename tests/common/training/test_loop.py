"""`TrainingLoop` over a pure-Python backend: the loop's own promises, apart from any framework.

The backend "trains" a scalar weight `w` by `w += batch` and reports `loss = w`; its
checkpoints are dict copies kept in memory. So every record, checkpoint and rollback the loop
makes can be predicted by hand, for a pipelined backend (JAX's: metrics read one step late) and
a synchronous one (TensorFlow's) alike.
"""

from __future__ import annotations

import contextlib
import json
import math

import pytest

from common.training.config import TrainingConfig
from common.training.loop import TrainingDiverged, TrainingLoop
from common.training.run_dir import RunDir


class ToyBackend:
    name, first_claim = "toy", False

    def __init__(self, run_dir, config, data, pipelined):
        self.run_dir, self.config, self.chief, self.model = RunDir(run_dir), config, True, None
        self.data, self.pipelined = data, pipelined
        self.w, self.position = 0.0, {"step": 0, "epoch": 0, "step_in_epoch": 0}
        self.checkpoints: dict[int, dict] = {}  # step -> saved state
        self.steps_run = 0

    def begin(self, resume, verbose):
        if resume and self.checkpoints:
            self._load(max(self.checkpoints))

    def _load(self, step):
        saved = self.checkpoints[step]
        self.w, self.position = saved["w"], dict(saved["position"])

    def get_position(self):
        return dict(self.position)

    def set_position(self, step, epoch, step_in_epoch):
        self.position = {"step": step, "epoch": epoch, "step_in_epoch": step_in_epoch}

    def pass_steps(self):
        return len(self.data)

    def batches(self, epoch, skip):
        return iter(self.data[skip:])

    def step(self, batch):
        self.w += batch
        self.steps_run += 1
        return {"loss": self.w, "count": 1.0, "examples": 1.0}

    def learning_rate(self, step):
        return 0.1

    def weights_finite(self):
        return math.isfinite(self.w)

    def save_checkpoint(self):
        self.checkpoints[self.position["step"]] = {"w": self.w, "position": dict(self.position)}
        return f"ckpt-{self.position['step']}"

    def newest_checkpoint(self):
        return f"ckpt-{max(self.checkpoints)}" if self.checkpoints else None

    def rollback(self, bad_weights_step):
        if self.checkpoints and max(self.checkpoints) == bad_weights_step:
            del self.checkpoints[bad_weights_step]
        if not self.checkpoints:
            return None
        self._load(max(self.checkpoints))
        return self.newest_checkpoint()

    def evaluate_losses(self):
        return {}

    def best_writer(self):
        return {"write": lambda model, path: path.write_text(str(self.w)), "file": "w.txt"}

    def summaries(self):
        return contextlib.nullcontext()

    def write_scalars(self, record):
        pass

    def write_samples(self, samples, step):
        pass

    def truncate_logs(self, step):
        pass

    def finish(self):
        pass

    def status_fields(self):
        return {"backend": "toy"}


def records(run_dir):
    lines = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    for line in lines:
        line.pop("time_s", None)
        line.pop("examples_per_s", None)
    return lines


@pytest.mark.parametrize("pipelined", [False, True])
def test_records_checkpoints_and_best_are_those_computed_by_hand(tmp_path, pipelined):
    config = TrainingConfig(epochs=2, checkpoint_every=2, log_every=1, best_metric="score",
                            best_mode="min")
    backend = ToyBackend(tmp_path, config, [1.0, 2.0, 3.0], pipelined)
    # The validation scores |w - 7|: after epoch 1 w = 6 (|.| 1), after epoch 2 w = 12 (5).
    loop = TrainingLoop(backend, validate=lambda epoch: {"score": abs(backend.w - 7)})
    out = loop.fit(verbose=0)
    weights = [1.0, 3.0, 6.0, 7.0, 9.0, 12.0]
    steps = [r for r in records(tmp_path) if r["kind"] == "step"]
    assert [r["loss"] for r in steps] == weights and [r["step"] for r in steps] == [1, 2, 3, 4,
                                                                                  5, 6]
    epochs = [r for r in records(tmp_path) if r["kind"] == "epoch"]
    assert [{k: v for k, v in r.items() if k not in ("time_s", "examples_per_s")}
            for r in out] == epochs
    assert [r["loss"] for r in epochs] == [10 / 3, 28 / 3]
    assert [r["val_score"] for r in epochs] == [1.0, 5.0]
    assert [r["epoch"] for r in epochs] == [1, 2]  # numbered as the log prints them
    assert [r["best_epoch"] for r in epochs] == [1, 1]
    # Mid-epoch checkpoints at steps 2 and 4 (due every 2), epoch ends at 3 and 6; none twice.
    assert sorted(backend.checkpoints) == [2, 3, 4, 6]
    assert backend.checkpoints[3]["position"] == {"step": 3, "epoch": 1, "step_in_epoch": 0}
    assert (tmp_path / "best" / "w.txt").read_text() == "6.0"
    assert json.loads((tmp_path / "status.json").read_text())["state"] == "finished"


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_non_finite_loss_deletes_the_checkpoint_of_its_weights_and_restores_the_one_before(
        tmp_path, pipelined):
    config = TrainingConfig(epochs=1, checkpoint_every=1, log_every=1)
    # Step 3 makes w infinite: the run stops there (a pipelined loop reads a step's loss
    # before its checkpoint, so no later step's is read first).
    backend = ToyBackend(tmp_path, config, [1.0, 1.0, math.inf, 1.0], pipelined)
    loop = TrainingLoop(backend)
    with pytest.raises(TrainingDiverged, match=r"the loss was inf at step 3 \(epoch 1\)"):
        loop.fit(verbose=0)
    # The checkpoint of step 2 holds the weights step 3 diverged from: deleted; back at step 1.
    assert sorted(backend.checkpoints) == [1]
    assert backend.w == 1.0 and backend.position["step"] == 1
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["state"] == "failed" and "diverged" in status["error"]
    # Nothing non-finite was ever saved.
    assert all(math.isfinite(c["w"]) for c in backend.checkpoints.values())


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_resumed_run_skips_the_steps_done_and_ends_as_an_uninterrupted_one(tmp_path, pipelined):
    data = [1.0, 2.0, 3.0, 4.0]
    whole = ToyBackend(tmp_path / "whole", TrainingConfig(epochs=2, checkpoint_every=1,
                                                          log_every=1), data, pipelined)
    TrainingLoop(whole).fit(verbose=0)

    cut = ToyBackend(tmp_path / "cut", TrainingConfig(epochs=2, checkpoint_every=1,
                                                      log_every=1), data, pipelined)
    real_step = cut.step

    def dying_step(batch):
        if cut.steps_run == 5:  # step 6 (epoch 1, its 2nd) is killed before it runs
            raise KeyboardInterrupt
        return real_step(batch)

    cut.step = dying_step
    with pytest.raises(KeyboardInterrupt):
        TrainingLoop(cut).fit(verbose=0)
    cut.step = real_step
    # Steps 1-5 ran; a pipelined loop had read step 5 only if a checkpoint was due there (it
    # was: every step), so the newest checkpoint is step 5 either way.
    assert max(cut.checkpoints) == 5
    TrainingLoop(cut).fit(resume=True, verbose=0)
    assert cut.w == whole.w == 20.0 and cut.position == whole.position
    assert cut.steps_run == 8  # 5 + the 3 left: nothing trained twice
    # The same step records; the resumed epoch's record covers the steps run after the restart.
    assert ([r for r in records(tmp_path / "cut") if r["kind"] == "step"]
            == [r for r in records(tmp_path / "whole") if r["kind"] == "step"])
    cut_epochs = [r for r in records(tmp_path / "cut") if r["kind"] == "epoch"]
    assert [r["step"] for r in cut_epochs] == [4, 8] and cut_epochs[1]["loss"] == (13 + 16 + 20) / 3
