"""The train stage of a framework shortcut: TRL's SFT, DPO or GRPO trainer on a local base model.

Runs as ``python -m nodus.stages.methods.train`` under ``hf-trainer-v1``: the bootstrap prepares
the trainer with the method profile, so it saves, resumes and checks identities exactly as a
user's Trainer program does (periodic saves, saves on request and on a preemption notice, the
resume from the restored checkpoint). With ``lora_rank`` it trains a PEFT LoRA adapter, else all
weights. At the end it writes the final weights (adapter or full) and the tokenizer into
``trained/``, which the export stage reads.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import tempfile
from typing import Any

from nodus import protocol
from nodus.schemas.method_specs import MethodSpec, method_spec
from nodus.stages.methods import settings as method_settings


def main(arguments: dict[str, Any] | None = None) -> None:
    """Train, then write the final weights and tokenizer into ``trained/``.

    ``arguments`` are TrainingArguments laid over the program's own; nodus gives none. Only the
    bare side of benchmarks/methods_sft.py does (TRL's own saving, on nodus's cadence), so both
    sides of that benchmark run this same program.
    """
    settings = method_settings.read()
    problem = method_settings.unchanged_dataset_problem(settings)
    if problem:
        print(f"nodus: {problem}", file=sys.stderr)
        raise SystemExit(1)
    from transformers import set_seed

    set_seed(settings["seed"])  # the LoRA adapter's initial weights come from this seed too
    trainer = build_trainer(settings, arguments)
    _align_saves(trainer, settings)
    if _spec(settings).online:
        trainer.add_callback(_rollout_metrics())
    trainer.train()
    trainer.save_model(protocol.METHOD_TRAINED_DIR)


def build_trainer(settings: dict[str, Any], arguments: dict[str, Any] | None = None) -> Any:
    """The TRL trainer of ``settings['framework']``, with the base model, data and LoRA
    (``arguments``: TrainingArguments over the program's own, as :func:`main` says)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(settings["base_model"])  # type: ignore[no-untyped-call,unused-ignore]
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(settings["base_model"], dtype=torch.float32)
    dataset = method_settings.load_dataset(settings["dataset"])
    common = _common(settings, arguments or {})
    return _trainer(_spec(settings), settings, model, tokenizer, dataset, common)


def _spec(settings: dict[str, Any]) -> MethodSpec:
    spec = method_spec(settings["framework"])
    assert spec is not None, settings["framework"]  # resolved at submit from the same table
    return spec


def _common(settings: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """TrainingArguments every method shares; saving is nodus's (save_strategy "no")."""
    own = {
        "output_dir": os.path.join(tempfile.gettempdir(), "trainer"),
        "max_steps": settings["max_steps"] or -1,
        "num_train_epochs": settings["num_epochs"] or 1.0,
        "learning_rate": settings["learning_rate"],
        "per_device_train_batch_size": settings["batch_size"],
        "gradient_accumulation_steps": settings["gradient_accumulation_steps"],
        "seed": settings["seed"],
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "bf16": False,  # TRL's configs default to bf16; saves and resumes are exact in float32
    }
    return {**own, **arguments}


def _lora(settings: dict[str, Any]) -> Any:
    if not settings["lora_rank"]:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=settings["lora_rank"],
        lora_alpha=settings["lora_alpha"],
        lora_dropout=settings["lora_dropout"],
        target_modules=settings["lora_target_modules"],
        task_type="CAUSAL_LM",
    )


def _trainer(
    spec: MethodSpec,
    settings: dict[str, Any],
    model: Any,
    tokenizer: Any,
    dataset: Any,
    common: dict[str, Any],
) -> Any:
    """TRL's trainer of ``spec`` over its config; an online method's generation settings,
    reward functions and epoch-keyed prompt order besides."""
    trl = importlib.import_module("trl")
    arguments = {**common, spec.length_argument: settings["max_length"]}
    extra: dict[str, Any] = {}
    if spec.online:
        arguments.update(
            num_generations=settings["num_generations"],
            steps_per_generation=settings["steps_per_generation"],
            beta=settings["kl_beta"],
        )
        extra["reward_funcs"] = reward_functions(settings["reward_functions"])
    trainer = getattr(trl, spec.trainer)(
        model=model,
        args=getattr(trl, spec.config)(**arguments),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=_lora(settings),
        **extra,
    )
    if spec.online:
        trainer._get_train_sampler = _epoch_keyed(trainer._get_train_sampler)
    return trainer


def _epoch_keyed(get_sampler: Any) -> Any:
    """An online method's (grpo's) prompt order of epoch ``e`` is the ``e``-th draw of the
    sampler's seeded generator, whichever attempt draws it.

    TRL's ``RepeatSampler`` seeds its generator once and draws one permutation per epoch, so a
    resumed attempt's fresh sampler drew epoch 0's order for a later epoch, and the run went on
    training on other prompts than an uninterrupted one. Here the sampler takes the epoch that
    Accelerate's loader gives it (``set_epoch``: the Trainer's epoch, carried into the loader
    that skips the trained batches of a partial epoch) and starts each epoch's draw from the
    generator state after ``e`` draws: the uninterrupted run's sequence, TRL's own, in every
    attempt.
    """

    @functools.wraps(get_sampler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sampler = get_sampler(*args, **kwargs)
        if getattr(sampler, "shuffle", False) and hasattr(sampler, "generator"):
            return EpochKeyedSampler(sampler)
        return sampler

    return wrapper


class EpochKeyedSampler:
    """A seeded sampler that draws one permutation per ``__iter__`` (TRL's ``RepeatSampler``),
    made to draw epoch ``e``'s as the ``e``-th draw of its generator whatever drew before."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.epoch = 0
        self._states = [sampler.generator.get_state()]  # before the draw of epoch i

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Any:
        import torch

        generator, states = self.sampler.generator, self._states
        while len(states) <= self.epoch:  # the state after one more epoch's draw
            generator.set_state(states[-1])
            torch.randperm(self.sampler.num_samples, generator=generator)
            states.append(generator.get_state())
        generator.set_state(states[self.epoch])
        yield from self.sampler


def reward_functions(specs: list[str]) -> list[Any]:
    """``module:function`` imported from the source folder (the working directory)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    functions = []
    for spec in specs:
        module, name = spec.split(":", 1)
        functions.append(getattr(importlib.import_module(module), name))
    return functions


def _align_saves(trainer: Any, settings: dict[str, Any]) -> None:
    """An online method (grpo) saves only at generation boundaries; the alignment of
    checkpoint_every is said once."""
    every = settings.get("generation_every") or 1
    session = getattr(trainer, "_nodus_session", None)
    if session is None or every == 1:
        return
    session.save_granularity = every
    asked = settings["checkpoint_every"]
    if session.settings.save_every != asked and session.settings.restored_step is None:
        details = {"asked": asked, "used": session.settings.save_every}
        session.control.write_event(protocol.EVENT_CHECKPOINT_ALIGNED, details)


def _rollout_metrics() -> Any:
    """An online method (grpo) logs the rewards at the step that generated the rollouts; the
    steps that train on the same rollouts later show them too, so every snapshot carries its
    reward metrics."""
    from transformers import TrainerCallback

    class RolloutMetrics(TrainerCallback):
        def __init__(self) -> None:
            super().__init__()
            self.latest: dict[str, float] = {}

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            entry = state.log_history[-1] if state.log_history else {}
            if "reward" in entry:
                self.latest = {k: v for k, v in entry.items() if k.startswith(_REWARD_KEYS)}
            elif "loss" in entry:
                for key, value in self.latest.items():
                    entry.setdefault(key, value)

    RolloutMetrics.__module__ = __name__
    return RolloutMetrics()


_REWARD_KEYS = ("reward", "rewards/")


if __name__ == "__main__":
    main()
