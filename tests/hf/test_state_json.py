"""trainer_state.json is written byte for byte as the Trainer writes it, however its log history
changed between saves."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from nodus.stages.hf.inprocess.state_json import StateJson
from scheduling import ML_IN_PROCESS

pytestmark = ML_IN_PROCESS

if TYPE_CHECKING:  # imported where a test needs it: collecting imports no Transformers
    from transformers import TrainerState


def trainers_own(state: TrainerState, tmp_path) -> str:
    path = tmp_path / "trainer_state.json"
    state.save_to_json(str(path))
    return path.read_text(encoding="utf-8")


@dataclasses.dataclass
class Params:
    width: int
    names: tuple


def a_state() -> TrainerState:
    from transformers import TrainerState

    state = TrainerState(max_steps=100, logging_steps=1, train_batch_size=8)
    state.stateful_callbacks = {
        "TrainerControl": {"args": {"should_save": True}, "attributes": {}},
        "Early": [{"args": {}, "attributes": {"patience": 3}}],
    }
    state.trial_params = {"params": Params(4, ("a", "b")), "text": 'line\nbreak "quoted" é'}
    return state


def log(state: TrainerState, step: int, **values) -> None:
    state.global_step = step
    state.log_history.append({"step": step, "epoch": step / 12, **values})


def test_the_same_bytes_as_the_trainer_across_saves(tmp_path):
    state, writer = a_state(), StateJson()
    assert writer.text(state) == trainers_own(state, tmp_path)  # no history yet
    for step in range(1, 40):
        log(state, step, loss=1.0 / step, learning_rate=1e-3, grad_norm=float("nan"))
        if step % 7 == 0:
            log(state, step, eval_loss=math.inf, nested={"k": [1, 2.5, None]})
            state.best_metric = 0.5
            state.epoch = step / 12
            assert writer.text(state) == trainers_own(state, tmp_path)


def test_an_edited_history_is_serialized_again(tmp_path):
    state, writer = a_state(), StateJson()
    for step in range(1, 6):
        log(state, step, loss=float(step))
    writer.text(state)
    state.log_history[1]["extra"] = 1  # an old entry gained a key
    assert writer.text(state) == trainers_own(state, tmp_path)
    state.log_history[2] = {"step": 3, "loss": 9.0}  # replaced by another object
    assert writer.text(state) == trainers_own(state, tmp_path)
    del state.log_history[3:]  # shortened
    assert writer.text(state) == trainers_own(state, tmp_path)
    state.log_history.clear()
    assert writer.text(state) == trainers_own(state, tmp_path)


def test_step_metrics_merge_the_entries_of_the_current_step():
    from nodus.stages.hf.inprocess.state_copy import step_metrics  # imports torch

    state = a_state()
    for step in range(1, 4):
        log(state, step, loss=float(step))
    state.log_history.append({"step": 3, "eval_loss": 0.25, "note": "text"})
    state.log_history.append({"train_runtime": 1.5})  # the end-of-training entry: no step
    assert step_metrics(state) == {"epoch": 0.25, "loss": 3.0, "eval_loss": 0.25}
