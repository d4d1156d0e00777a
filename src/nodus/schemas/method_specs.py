"""The managed methods, each described once: what nodus knows of ``framework = "sft"`` and the rest.

A managed method (docs/methods.md) is one :class:`MethodSpec` in :data:`METHODS`. Every module
that treats methods differently reads its spec, never the method's name: the submit checks
(:mod:`nodus.schemas.methods`, :mod:`nodus.schemas.rules`), the continuation rules
(:mod:`nodus.schemas.method_rules`), the train program (:mod:`nodus.stages.methods.train`), the
in-process profiles (``nodus.stages.hf.inprocess.profile`` and ``method_profile``) and the
merge of a checkpoint's adapter (:mod:`nodus.inventory.merging`). A new method is a new entry
here (and its name in ``nodus.schemas.models.Framework``, which ``tests/test_concepts.py``
checks against this table).

Standard library only: the in-process profile imports it inside the user's training process.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "METHODS",
    "ONLINE_KEYS",
    "MethodSpec",
    "in_words",
    "method_spec",
    "online_methods",
    "trainer_methods",
]


@dataclass(frozen=True)
class MethodSpec:
    """One managed method: its TRL classes, its data, its defaults and its rules."""

    name: str  # the ``framework`` value
    trainer: str  # TRL's trainer class (module ``trl``) the train program builds
    config: str  # TRL's TrainingArguments subclass the trainer takes
    columns: tuple[tuple[str, ...], ...]  # the dataset's column sets: one must be there
    learning_rate: float  # ``[method] learning_rate`` when omitted (TRL's default)
    max_length: int  # ``[method] max_length`` when omitted
    length_argument: str  # the config's argument ``max_length`` becomes
    online: bool = False
    """Trains on completions it generates and scores with reward functions: it needs
    ``reward_functions``, takes :data:`ONLINE_KEYS`, saves only at generation boundaries, and
    with ``kl_beta > 0`` penalises towards a reference policy (the continuation rules' KL
    rule)."""


ONLINE_KEYS = ("reward_functions", "num_generations", "kl_beta")
"""``[method]`` keys only an online method (``MethodSpec.online``) takes."""

METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            name="sft",
            trainer="SFTTrainer",
            config="SFTConfig",
            columns=(("text",), ("messages",), ("prompt", "completion")),
            learning_rate=2e-5,
            max_length=1024,
            length_argument="max_length",
        ),
        MethodSpec(
            name="dpo",
            trainer="DPOTrainer",
            config="DPOConfig",
            columns=(("prompt", "chosen", "rejected"),),
            learning_rate=1e-6,
            max_length=1024,
            length_argument="max_length",
        ),
        MethodSpec(
            name="grpo",
            trainer="GRPOTrainer",
            config="GRPOConfig",
            columns=(("prompt",),),
            learning_rate=1e-6,
            max_length=256,
            length_argument="max_completion_length",
            online=True,
        ),
    )
}
"""Every managed method, by its ``framework`` name, in the order docs/methods.md lists them."""


def method_spec(name: object) -> MethodSpec | None:
    """The spec of the method ``name`` names (a ``Framework`` or its value); None for none."""
    return METHODS.get(str(getattr(name, "value", name)))


def online_methods() -> list[MethodSpec]:
    """The methods that generate what they train on (``MethodSpec.online``)."""
    return [spec for spec in METHODS.values() if spec.online]


def trainer_methods() -> dict[str, str]:
    """TRL's trainer class name -> the method that trains it."""
    return {spec.trainer: spec.name for spec in METHODS.values()}


def in_words(specs: list[MethodSpec] | None = None) -> str:
    """``"sft, dpo or grpo"``: the methods (all of them by default) as a message names them."""
    names = [spec.name for spec in (METHODS.values() if specs is None else specs)]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
