"""Benchmark: ``save_every = "auto"`` on the quick-start model, against no periodic saves.

    .venv/bin/python benchmarks/save_cadence.py [--repeat 3] [--epochs 40]
                                                [--width 32] [--layers 2]
                                                [--max-save-overhead 0.035] [--dir SCRATCH]
                                                [--cadence '"auto"' | N] [--side-by-side]

Each round runs the quick-start (examples/quickstart, 12 optimizer steps per epoch) under
`nodus run` twice, one after the other (the order alternates from round to round): with
``save_every = 0`` (only the final save) and with ``save_every = "auto"``; no epoch-end saves in
either. ``--width``/``--layers`` make the quick-start's GPT-2 wider and deeper (the copy's
config is edited; the defaults are the quick-start itself, whose steps take a few
milliseconds: a 3.5 % bound is then smaller than the noise of a shared machine). The figure is
the Trainer's own ``train_runtime`` (the training loop: start-up and the final save, the same
in both, are left out), so ``overhead = auto / none - 1`` is what the periodic saves cost
training; target: at most ``max_save_overhead``. Also reported: the saves taken and the
cadences chosen (the run's ``save_cadence`` events). Medians over the rounds. On a shared
machine ``OMP_NUM_THREADS=1`` keeps torch's threads from spinning against other processes.
``--cadence N`` measures a fixed ``save_every = N`` the same way (what a cadence costs, to set
``auto``'s estimates against); ``--cadence 0`` measures the benchmark's own noise.

``--side-by-side`` runs the two at once, each with everything it starts pinned to one of the
first two cores (the order they start in and the cores swapped from round to round). One
after the other, the same program's speed drifts by several percent within a minute on a
shared virtual machine, as much as the bound itself; side by side, a drift hits both. Each
run's saves then cost it on its own core (the runner's capture cannot use a free one), so
what ``auto`` measures, and what it costs, is a one-core machine's.

The script drives the nodus next to it (``../src``), so a copy of it in another checkout
measures that checkout.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")
QUICKSTART = os.path.join(HERE, "..", "examples", "quickstart")
_EXECUTION = re.compile(r"^\[execution\].*", re.S | re.M)
_RUNTIME = re.compile(r"\{'train_runtime':.*\}")
_WIDTH = re.compile(r"n_embd=\d+,\n(\s*)n_layer=(.*),\n\s*n_head=\d+,")
QUICKSTART_WIDTH = 32
NODUS = [sys.executable, "-m", "nodus"]


def model_size(code: str, args) -> None:
    """The copy's GPT-2 made ``--width`` wide (a head per 64 wide, at least 2) and
    ``--layers`` deep; untouched at the quick-start's own size."""
    if args.width == QUICKSTART_WIDTH:
        return
    path = os.path.join(code, "train.py")
    with open(path) as handle:
        text = handle.read()
    heads = max(2, args.width // 64)
    edited, found = _WIDTH.subn(rf"n_embd={args.width},\n\1n_layer=\2,\n\1n_head={heads},", text)
    if found != 1:
        raise SystemExit(f"{path}: the model config is not where this script expects it")
    with open(path, "w") as handle:
        handle.write(edited)


def one_run(scratch: str, cadence: str, args) -> dict:
    """The quick-start under `nodus run` with ``save_every = CADENCE``: its figures."""
    code, env = project(scratch, cadence, args)
    return figures(code, env, launch(code, env))


def project(scratch: str, cadence: str, args) -> tuple[str, dict]:
    """A copy of the quick-start with this cadence, and the environment to run it in."""
    folder = tempfile.mkdtemp(dir=scratch)
    code = os.path.join(folder, "code")
    shutil.copytree(QUICKSTART, code, ignore=shutil.ignore_patterns("out", "state", ".nodus"))
    model_size(code, args)
    bound = f"max_save_overhead = {args.max_save_overhead}\n" if cadence == '"auto"' else ""
    workload = os.path.join(code, "workload.toml")
    with open(workload) as handle:
        text = handle.read()
    with open(workload, "w") as handle:  # the quick start's own file, with this cadence
        handle.write(
            _EXECUTION.sub(
                f"[execution]\nsave_every = {cadence}\n{bound}keep_recoverable = 1\n", text
            )
        )
    home = os.path.join(folder, "home")
    env = dict(os.environ, NODUS_HOME=home, PYTHONPATH=SRC, QUICKSTART_EPOCHS=str(args.epochs))
    env["QUICKSTART_LAYERS"] = str(args.layers)
    # The workload says `python`: this interpreter's, with the training stack installed.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.pop("NODUS_STORE", None)
    return code, env


def launch(code: str, env: dict, cpu: int | None = None) -> subprocess.Popen:
    """`nodus run` of the copy; with ``cpu``, it and everything it starts on that core only."""
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    # What it says goes to a file: a pipe read only once the other run ended would fill and
    # stop this one's runner, and then its program, until then.
    said = open(os.path.join(code, "said.txt"), "w+b")  # noqa: SIM115 - the runner writes it
    proc = subprocess.Popen(
        [*NODUS, "run", "workload.toml", "--key", "bench"],
        cwd=code,
        env=env,
        stdout=said,
        stderr=subprocess.STDOUT,
        preexec_fn=pin,
    )
    proc.said = said
    return proc


def figures(code: str, env: dict, proc: subprocess.Popen) -> dict:
    """Once the run ended: its training time, saves and chosen cadences."""
    proc.wait()
    proc.said.seek(0)
    said = proc.said.read().decode(errors="replace")
    proc.said.close()
    if proc.returncode != 0:
        raise SystemExit(said[-6000:])
    view = subprocess.run(
        [*NODUS, "runs", "get", "bench", "--json"], cwd=code, env=env, capture_output=True
    )
    run = json.loads(view.stdout)
    log = run["stages"][0]["attempts"][0]["log_path"]
    with open(log, errors="replace") as handle:
        metrics = ast.literal_eval(_RUNTIME.findall(handle.read())[-1])
    events = run["events"]
    return {
        "train_s": float(metrics["train_runtime"]),
        "saves": sum(1 for e in events if e["type"] == "snapshot_committed"),
        "cadences": [
            (e["every"], e["overhead"], e["step"]) for e in events if e["type"] == "save_cadence"
        ],
    }


def side_by_side(scratch: str, number: int, args) -> tuple[dict, dict]:
    """Both runs at once, each pinned to one of the first two cores. Which one starts first
    alternates every round (the first trains while the other still imports: 2% faster or
    slower), and which core each gets every two rounds."""
    cpus = (0, 1) if number // 2 % 2 == 0 else (1, 0)
    none_code, none_env = project(scratch, "0", args)
    auto_code, auto_env = project(scratch, args.cadence, args)
    if number % 2:
        auto_proc = launch(auto_code, auto_env, cpus[1])
        none_proc = launch(none_code, none_env, cpus[0])
    else:
        none_proc = launch(none_code, none_env, cpus[0])
        auto_proc = launch(auto_code, auto_env, cpus[1])
    return figures(none_code, none_env, none_proc), figures(auto_code, auto_env, auto_proc)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=40, help="quick-start epochs (12 steps)")
    parser.add_argument("--width", type=int, default=QUICKSTART_WIDTH, help="GPT-2 n_embd")
    parser.add_argument("--layers", type=int, default=2, help="GPT-2 n_layer")
    parser.add_argument("--max-save-overhead", type=float, default=0.035)
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="run both at once, each pinned to a core of its own (see the description)",
    )
    parser.add_argument(
        "--cadence",
        default='"auto"',
        help='save_every on the measured side (default "auto"; a number: that fixed cadence)',
    )
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        for number in range(args.repeat):
            if args.side_by_side:
                none, auto = side_by_side(scratch, number, args)
            elif number % 2:  # alternate which goes first: a drift of the machine hits both
                auto = one_run(scratch, args.cadence, args)
                none = one_run(scratch, "0", args)
            else:
                none = one_run(scratch, "0", args)
                auto = one_run(scratch, args.cadence, args)
            rounds.append((none, auto))
            print(
                f"round {number + 1}: none {none['train_s']:.2f} s, auto {auto['train_s']:.2f} s "
                f"= {auto['train_s'] / none['train_s']:.3f}x ({auto['saves']} saves; "
                f"cadences (every, overhead, step): {auto['cadences']}; "
                f"load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    none_s = statistics.median(none["train_s"] for none, _ in rounds)
    auto_s = statistics.median(auto["train_s"] for _, auto in rounds)
    summary = {
        "steps": args.epochs * 12,
        "width": args.width,
        "layers": args.layers,
        "none_train_s": round(none_s, 3),
        "auto_train_s": round(auto_s, 3),
        "overhead": round(auto_s / none_s - 1, 4),
        "overhead_of_round_ratios": round(
            statistics.median(auto["train_s"] / none["train_s"] for none, auto in rounds) - 1, 4
        ),
        # How far single rounds scatter: on a shared 2-core machine the speed of the same
        # program drifts by several percent within a minute, as much as the bound itself.
        "round_ratio_quartiles": [
            round(q, 3)
            for q in statistics.quantiles(
                [auto["train_s"] / none["train_s"] for none, auto in rounds], n=4
            )
        ]
        if len(rounds) > 1
        else None,
        "bound": args.max_save_overhead,
        "saves": statistics.median(auto["saves"] for _, auto in rounds),
        "last_cadence": (rounds[-1][1]["cadences"] or [(args.cadence,)])[-1][0],
    }
    print(json.dumps({"median": summary}, indent=2))


if __name__ == "__main__":
    main()
