"""The quick-start at a constant learning rate, then the program's own work after ``train()``.

Run in a copy of examples/quickstart (``QUICKSTART_MAX_STEPS`` off an epoch boundary: 12 steps
per epoch). After ``train()`` it saves the model to ``out/model`` and writes
``out/model/after_train.json``: what ``train()`` returned and a digest of the optimizer and
scheduler state the Trainer holds then. With ``FINISH_WAIT`` set, the first attempt under nodus
then waits to be killed: after its final snapshot was committed, before it exits. With
``RESUME_FROM_LATER`` set, every later attempt calls ``train(resume_from_checkpoint=...)`` with
it, as a script given a checkpoint on its command line does. With ``HANG_AT_STEP`` set, the
first attempt under nodus stops making progress at that step's end (a silent sleep that never
ends, as a deadlocked collective would): in that step's optimizer update, so the step is
never completed nor saved.
"""

import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch
import train
from transformers import Trainer, default_data_collator, set_seed
from transformers.trainer_utils import SchedulerType


def digest(state) -> str:
    """Every tensor and number of a state dict, in a fixed order."""
    hashed = hashlib.sha256()

    def walk(value, path: str) -> None:
        if isinstance(value, torch.Tensor):
            hashed.update(f"{path}:{value.dtype}:{tuple(value.shape)}".encode())
            hashed.update(value.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                walk(value[key], f"{path}/{key}")
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(item, f"{path}/{index}")
        else:
            hashed.update(f"{path}={value!r}".encode())

    walk(state, "")
    return hashed.hexdigest()


def hang_at(step: int) -> None:
    """The optimizer's ``step``-th update never returns (nothing else of the Trainer changes:
    the integration admits built-in callbacks only)."""
    update = torch.optim.AdamW.step
    updates = []

    def stuck(self, *args, **kwargs):
        updates.append(True)
        if len(updates) == step:
            print(f"program: hanging in the update of step {step}", flush=True)
            while True:
                time.sleep(3600)
        return update(self, *args, **kwargs)

    torch.optim.AdamW.step = stuck


if os.environ.get("HANG_AT_STEP") and os.environ.get("NODUS_ATTEMPT") == "1":
    hang_at(int(os.environ["HANG_AT_STEP"]))
args = train.training_arguments()
args.lr_scheduler_type = SchedulerType.CONSTANT  # an extra step would change every tensor
args.warmup_steps = 0
tokenizer = train.build_tokenizer()
set_seed(args.seed)
model = train.build_model(tokenizer)
trainer = Trainer(
    model=model,
    args=args,
    train_dataset=train.build_dataset(tokenizer),
    processing_class=tokenizer,
    data_collator=default_data_collator,
)
later = os.environ.get("RESUME_FROM_LATER")
if later and os.environ.get("NODUS_ATTEMPT", "1") != "1":
    result = trainer.train(resume_from_checkpoint=later)
else:
    result = trainer.train()
trainer.save_model("out/model")
with open("out/model/after_train.json", "w") as handle:
    json.dump(
        {
            "returned_step": result.global_step,
            "global_step": trainer.state.global_step,
            "optimizer": digest(trainer.optimizer.state_dict()),
            "scheduler": digest(trainer.lr_scheduler.state_dict()),
        },
        handle,
    )
print("program: train() returned", flush=True)
if os.environ.get("FINISH_WAIT") and os.environ.get("NODUS_ATTEMPT") == "1":
    time.sleep(3600)  # killed here: after the final snapshot, before the program exits
