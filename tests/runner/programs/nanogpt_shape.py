"""A training script in the shape of karpathy/nanoGPT's ``train.py``: ``out/ckpt.pt`` in place.

    python nanogpt_shape.py [--init_from=scratch|resume] [--out_dir=out] [--max_iters=60]
                            [--eval_interval=5] [--always_save_checkpoint=True]
                            [--log=PATH] [--sleep=0.0] [--gate=PATH]

Its save and resume paths are nanoGPT's: settings as ``--key=value`` overrides of module-level
defaults (nanoGPT's configurator); ``torch.manual_seed(1337)`` at every start; batches drawn
with ``torch.randint`` from the global RNG (``get_batch``); every ``eval_interval`` iterations
an estimate of the loss (more draws from the same RNG), then, when the validation loss improved
or ``always_save_checkpoint``, and ``iter_num > 0``, ``torch.save`` of
``{"model", "optimizer", "model_args", "iter_num", "best_val_loss", "config"}`` straight onto
``out_dir/ckpt.pt``. ``best_val_loss`` is a tensor, as nanoGPT's is. ``--init_from=resume``
loads that file and carries on from its ``iter_num``, whose evaluation comes first, so the
checkpoint is saved again at once. The file holds no RNG state, and the seed is set again at
start: the batches after a resume are not the ones an uninterrupted run draws.

The model is a bigram table over a synthetic corpus (a fixed generator, not the global RNG).
For tests only (each also from ``$TEST_LOG``, ``$TEST_SLEEP``, ``$TEST_GATE``): every save and
resume is appended to ``--log`` as ``<pid> <event>`` (``resume iter_num=<n>``, ``start fresh``,
``save-begin``/``save-end <path> iter_num=<n>``, ``done``); ``--sleep`` slows each iteration
until ``--gate`` exists; ``out_dir/result.json`` (or ``$TEST_RESULT``) holds ``{"iter_num",
"digest"}`` at the end.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

# -- defaults, overridden by --key=value (nanoGPT's configurator.py) ---------------------------
init_from = "scratch"
out_dir = "out"
max_iters = 60
eval_interval = 5
eval_iters = 2
always_save_checkpoint = True
batch_size = 8
block_size = 8
vocab_size = 64
learning_rate = 1e-2
# for tests only, also from the environment (a recipe's workload runs the command as written)
log = os.environ.get("TEST_LOG", "")
sleep = float(os.environ.get("TEST_SLEEP", "0"))
gate = os.environ.get("TEST_GATE", "")


def configure(argv: list[str]) -> None:
    """``--key=value`` overrides of the module's defaults, each value parsed as a literal when
    it is one: what nanoGPT's configurator does (without its config files)."""
    for arg in argv:
        key, _, value = arg.removeprefix("--").partition("=")
        if key not in globals() or key.startswith("_"):
            raise SystemExit(f"Unknown config key: {key}")
        try:
            parsed = ast.literal_eval(value)
        except (SyntaxError, ValueError):
            parsed = value
        globals()[key] = parsed


class Bigram(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab, vocab)

    def forward(self, idx, targets):
        logits = self.table(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def corpus() -> dict[str, torch.Tensor]:
    fixed = torch.Generator().manual_seed(0)
    data = torch.randint(vocab_size, (4096,), generator=fixed)
    return {"train": data[:3600], "val": data[3600:]}


def get_batch(data: dict[str, torch.Tensor], split: str) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = data[split]
    ix = torch.randint(len(tokens) - block_size, (batch_size,))  # the global RNG, as nanoGPT
    x = torch.stack([tokens[i : i + block_size] for i in ix])
    y = torch.stack([tokens[i + 1 : i + 1 + block_size] for i in ix])
    return x, y


@torch.no_grad()
def estimate_loss(model: nn.Module, data) -> dict[str, torch.Tensor]:
    out = {}
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = model(*get_batch(data, split)).item()
        out[split] = losses.mean()
    return out


def digest(model: nn.Module, optimizer: torch.optim.Optimizer) -> str:
    hasher = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        hasher.update(name.encode())
        hasher.update(tensor.contiguous().numpy().tobytes())
    for index, state in sorted(optimizer.state_dict()["state"].items()):
        for key in sorted(state):
            value = state[key]
            hasher.update(f"{index}.{key}".encode())
            hasher.update(
                value.numpy().tobytes() if torch.is_tensor(value) else repr(value).encode()
            )
    return hasher.hexdigest()


def note(event: str) -> None:
    if log:
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()} {event}\n")
    print(f"nanogpt_shape: {event}", flush=True)


def main() -> int:
    configure(sys.argv[1:])
    torch.set_num_threads(1)
    torch.manual_seed(1337)
    os.makedirs(out_dir, exist_ok=True)
    data = corpus()
    model_args = {"vocab_size": vocab_size, "block_size": block_size}
    config = {k: globals()[k] for k in ("max_iters", "eval_interval", "batch_size")}
    iter_num, best_val_loss = 0, 1e9
    model = Bigram(vocab_size)
    if init_from == "resume":
        checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location="cpu")
        model.load_state_dict(checkpoint["model"])
        iter_num = checkpoint["iter_num"]
        best_val_loss = checkpoint["best_val_loss"]
        note(f"resume iter_num={iter_num}")
    else:
        note("start fresh")
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    if init_from == "resume":
        optimizer.load_state_dict(checkpoint["optimizer"])
        checkpoint = None
    x, y = get_batch(data, "train")
    while True:
        if iter_num % eval_interval == 0:
            losses = estimate_loss(model, data)
            if losses["val"] < best_val_loss or always_save_checkpoint:
                best_val_loss = losses["val"]
                if iter_num > 0:
                    checkpoint = {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "model_args": model_args,
                        "iter_num": iter_num,
                        "best_val_loss": best_val_loss,
                        "config": config,
                    }
                    path = os.path.join(out_dir, "ckpt.pt")
                    note(f"save-begin {path} iter_num={iter_num}")
                    torch.save(checkpoint, path)
                    note(f"save-end {path} iter_num={iter_num}")
        if not (gate and os.path.exists(gate)):
            time.sleep(sleep)
        loss = model(x, y)
        x, y = get_batch(data, "train")
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        iter_num += 1
        if iter_num > max_iters:
            break
    with open(os.environ.get("TEST_RESULT") or os.path.join(out_dir, "result.json"), "w") as handle:
        json.dump({"iter_num": iter_num, "digest": digest(model, optimizer)}, handle)
    note("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
