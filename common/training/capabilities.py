"""Which training settings each backend's trainer honours, and the one-line refusal of the rest.

Every `train` option works on both trainers (`common.training.Trainer` on TensorFlow,
`common.training.jax_trainer` on JAX) unless `CAPABILITIES` names it: option -> the backends
that honour it, and for which values (`Capability.needs`: the values that need it; None: any
value given). A setting given as an option to a backend not listed is refused in one line
naming the backend that has it, rather than dropped. These are `TrainingConfig` fields; a
family adds its own (`Family.capabilities`, the captioner's `scst`: `section=""` names a whole
section of its config).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.errors import UserError

BACKENDS = ("tensorflow", "jax")


@dataclass(frozen=True)
class Capability:
    """Args:
        backends: the backends whose trainer honours the setting.
        needs: `value -> whether that value needs one of them` (None: every value does).
        what: the values it refuses, in words ("above 1"), for the message.
        why: what the other backends do instead, for the message.
        section: where the setting is in a run's config: `"training"`, a `TrainingConfig`
            field of that name; `""`, the config's top-level section of that name.
    """

    backends: tuple[str, ...]
    needs: Callable[[Any], bool] | None = None
    what: str = ""
    why: str = ""
    section: str = "training"


CAPABILITIES: dict[str, Capability] = {
    "jit_compile": Capability(("tensorflow",), why="JAX always compiles the step with XLA"),
    "deterministic": Capability(("tensorflow",)),
    "logical_cpus": Capability(("tensorflow",)),
}


def explicit_settings(training: dict[str, Any]) -> dict[str, Any]:
    """The settings of a run's complete `training` dict that are not `TrainingConfig`'s
    defaults: what a flag, a preset or a config file chose, for `refuse_unsupported`."""
    from common.config import to_dict
    from common.training.config import TrainingConfig

    defaults = to_dict(TrainingConfig())
    return {k: v for k, v in training.items() if k not in defaults or defaults[k] != v}


def refuse_unsupported(given: dict[str, Any], backend: str, where: str,
                       sections: dict[str, Any] | None = None,
                       family: dict[str, Capability] | None = None) -> None:
    """Refuse, in one line, the training settings of `given` (options given explicitly, by
    `TrainingConfig` field), and the config sections of `sections` (the options' nested
    overrides), that `backend`'s trainer does not honour (`CAPABILITIES`, and the `family`'s
    own: `Family.capabilities`).

    Raises:
        UserError: naming each such option and the backend that has it.
    """
    refused = []
    for name, capability in {**CAPABILITIES, **(family or {})}.items():
        settings = given if capability.section == "training" else (sections or {})
        if name not in settings or backend in capability.backends:
            continue
        if capability.needs is not None and not capability.needs(settings[name]):
            continue
        option = f"--{name.replace('_', '-')}"
        value = f" {capability.what}" if capability.what else ""
        why = f"; {capability.why}" if capability.why else ""
        refused.append(f"{option}{value} needs the {' or '.join(capability.backends)} "
                       f"trainer{why}")
    if refused:
        raise UserError(f"{', '.join(refused)} (not the {backend} one; docs/jax.md); "
                        f"expected it left out {where}")
