"""Reading a program's own metric logs (:mod:`nodus.stages.metric_logs`): files written by the
real loggers (torch's ``SummaryWriter``, Lightning's ``CSVLogger``) and by hand, read on from
where each read stopped, a line or record still being written left for the next read, and the
curves of a run's attempts joined along the path that led to the last (``nodus runs plot``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nodus.stages.metric_logs import NO_TENSORBOARD, MetricLogs, at_step, kind_of, read_jsonl


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("events.out.tfevents.1700000000.host.123.0", "tensorboard"),
        ("metrics.csv", "csv"),
        ("metrics.jsonl", "jsonl"),
        ("train.jsonl", "jsonl"),
        ("hparams.yaml", None),
        ("ckpt.pt", None),
    ],
)
def test_a_files_name_says_its_reader(name, kind):
    assert kind_of(name) == kind


@pytest.mark.parametrize(
    ("lines", "points"),
    [
        (['{"step": 1, "loss": 0.5}'], [(1, {"loss": 0.5})]),
        (['{"step": 2, "loss": 1, "lr": 0.001, "tag": "x"}'], [(2, {"loss": 1.0, "lr": 0.001})]),
        (['{"step": 3.0, "loss": 0.5}'], [(3, {"loss": 0.5})]),  # a whole number as a float
        (['{"step": 3.5, "loss": 0.5}'], []),  # not a step
        (['{"loss": 0.5}'], []),  # no step
        (['{"step": true, "loss": 0.5}'], []),
        (['{"step": 4, "ok": true, "nan": NaN}'], []),  # no finite number
        (['{"step": 5, "loss": 0.5', '{"step": 6, "loss": 0.25}'], [(6, {"loss": 0.25})]),
        (["[1, 2]", "", "not json"], []),
    ],
)
def test_json_lines_give_points_with_a_step_and_numbers(lines, points):
    assert read_jsonl(lines) == points


@pytest.mark.parametrize(
    ("points", "step", "values"),
    [
        ([], 10, {}),
        ([(1, {"loss": 2.0}), (2, {"loss": 1.0})], 1, {"loss": 2.0}),
        ([(1, {"loss": 2.0}), (2, {"loss": 1.0})], 5, {"loss": 1.0}),
        ([(5, {"loss": 2.0})], 4, {}),
        ([(1, {"loss": 2.0, "val": 3.0}), (2, {"loss": 1.0})], 2, {"loss": 1.0, "val": 3.0}),
        ([(2, {"loss": 1.0}), (1, {"loss": 2.0})], 2, {"loss": 1.0}),  # by step, not by order
        ([(2, {"loss": 1.0}), (2, {"loss": 0.5})], 2, {"loss": 0.5}),  # logged again: the last
    ],
)
def test_a_snapshot_carries_the_last_value_of_each_name_at_or_before_its_step(points, step, values):
    assert at_step(points, step) == values


def test_json_lines_are_read_on_from_where_the_last_read_stopped(tmp_path):
    log = tmp_path / "metrics.jsonl"
    logs = MetricLogs(str(tmp_path))
    assert logs.read() == []
    log.write_text('{"step": 1, "loss": 3}\n{"step": 2, "lo')
    assert logs.read() == [(1, {"loss": 3.0})]  # the second line is still being written
    with log.open("a") as f:
        f.write('ss": 2}\n{"step": 3, "loss": 1}')
    assert logs.read() == [(2, {"loss": 2.0})]
    assert logs.read(final=True) == [(3, {"loss": 1.0})]  # the program ended: whole after all


def test_a_torn_last_json_line_is_passed_over_at_the_last_read(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 3}\n{"step": 2, "loss": 2.')
    assert MetricLogs(str(tmp_path)).read(final=True) == [(1, {"loss": 3.0})]


def test_a_csv_row_is_read_once_whole_and_blanks_are_not_logged(tmp_path):
    folder = tmp_path / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    csv = folder / "metrics.csv"
    csv.write_text("epoch,loss,step,val_loss\n0,1.5,0,\n0,,0,2.5\n0,1.25,1")
    logs = MetricLogs(str(tmp_path))
    assert logs.read() == [(0, {"epoch": 0.0, "loss": 1.5}), (0, {"epoch": 0.0, "val_loss": 2.5})]
    assert logs.read(final=True) == []  # a row without its newline may be cut off: never read
    with csv.open("a") as f:
        f.write("\n")
    assert logs.read() == [(1, {"epoch": 0.0, "loss": 1.25})]


def test_a_csv_written_again_with_a_new_column_is_read_again(tmp_path):
    csv = tmp_path / "metrics.csv"
    csv.write_text("loss,step\n1.5,0\n")
    logs = MetricLogs(str(tmp_path), ["metrics.csv"])
    assert logs.read() == [(0, {"loss": 1.5})]
    csv.write_text("loss,step,val_loss\n1.5,0,\n,0,2.5\n")
    assert logs.read() == [(0, {"loss": 1.5}), (0, {"val_loss": 2.5})]


@pytest.mark.slow  # imports Lightning
def test_lightnings_own_csv_logger_is_read(tmp_path):
    from lightning.fabric.loggers import CSVLogger

    logger = CSVLogger(str(tmp_path))
    logger.log_metrics({"loss": 1.5, "epoch": 0}, step=0)
    logger.log_metrics({"loss": 1.25, "epoch": 0}, step=1)
    logger.save()
    logs = MetricLogs(str(tmp_path))
    assert logs.read() == [(0, {"loss": 1.5, "epoch": 0.0}), (1, {"loss": 1.25, "epoch": 0.0})]
    logger.log_metrics({"val_loss": 2.5, "epoch": 0}, step=1)  # a new column: written again
    logger.save()
    assert at_step(logs.read(), 1) == {"epoch": 0.0, "loss": 1.25, "val_loss": 2.5}


@pytest.mark.slow  # imports torch's SummaryWriter
def test_summary_writer_scalars_are_read_incrementally_and_a_torn_record_waits(tmp_path):
    pytest.importorskip("tensorboard")
    import numpy
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "runs" / "one"))
    writer.add_scalar("loss", 0.1, 1)
    writer.add_scalars("parts", {"a": 1.5}, 1)  # a folder of its own per name
    writer.add_histogram("weights", numpy.arange(4.0), 1)  # not a curve
    writer.add_text("note", "hello", 1)
    writer.flush()
    logs = MetricLogs(str(tmp_path))
    points = logs.read()
    assert (1, {"loss": 0.1}) in points and (1, {"parts": 1.5}) in points  # as written
    assert all(set(values) <= {"loss", "parts"} for _step, values in points)
    writer.add_scalar("loss", 0.05, 2)
    writer.flush()
    (event,) = (tmp_path / "runs" / "one").glob("*tfevents*")
    whole = event.read_bytes()
    event.write_bytes(whole[:-3])  # the last record cut off: it waits for the rest
    assert logs.read() == []
    event.write_bytes(whole)
    assert logs.read() == [(2, {"loss": 0.05})]
    writer.close()


def test_without_tensorboard_event_files_are_skipped_with_a_note(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "events.out.tfevents.1.host.1.0").write_bytes(b"\0" * 16)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 3}\n')
    script = (
        "import sys, json; sys.modules['tensorboard'] = None\n"  # as if not installed
        "from nodus.stages.metric_logs import MetricLogs\n"
        f"logs = MetricLogs({str(tmp_path)!r})\n"
        "print(json.dumps([logs.read(), logs.read(), logs.notes]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    first, second, notes = json.loads(out.stdout)
    assert first == [[1, {"loss": 3.0}]] and second == [] and notes == [NO_TENSORBOARD]


def _attempt(tmp_path, number: int, restored: int | None, points: list) -> dict:
    folder = tmp_path / str(number)
    folder.mkdir()
    lines = [json.dumps({"step": step, "loss": value}) for step, value in points]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return {"number": number, "restored_step": restored, "log_path": str(folder / "output.log")}


@pytest.mark.parametrize(
    ("attempts", "curve"),
    [
        # killed after step 4, restored from 3: 4 logged again (the new attempt's value)
        (
            [(None, [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]), (3, [(4, 40.0), (5, 5.0)])],
            [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 5.0)],
        ),
        # the restored attempt logged nothing yet: what it will train again is not drawn
        ([(None, [(1, 1.0), (2, 2.0), (3, 3.0)]), (2, [])], [(1, 1.0), (2, 2.0)]),
        # it ignored the restore and started over: its points replace every earlier one
        ([(None, [(1, 1.0), (2, 2.0), (3, 3.0)]), (2, [(1, 10.0)])], [(1, 10.0)]),
        # a restart from nothing
        ([(None, [(1, 1.0), (2, 2.0)]), (None, [(1, 10.0), (2, 20.0)])], [(1, 10.0), (2, 20.0)]),
        # three attempts, each from the one before
        (
            [(None, [(1, 1.0), (2, 2.0)]), (1, [(2, 20.0), (3, 30.0)]), (3, [(4, 4.0)])],
            [(1, 1.0), (2, 20.0), (3, 30.0), (4, 4.0)],
        ),
    ],
)
def test_the_curve_follows_the_path_that_led_to_the_last_attempt(tmp_path, attempts, curve):
    from nodus.inventory.plot import _logged

    given = [
        _attempt(tmp_path, number, restored, points)
        for number, (restored, points) in enumerate(attempts, start=1)
    ]
    assert _logged(given) == {"loss": curve}


def test_an_attempt_without_kept_metrics_draws_nothing(tmp_path):
    from nodus.inventory.plot import _logged

    assert _logged([{"number": 1, "restored_step": None, "log_path": None}]) == {}
    missing = {"number": 1, "restored_step": None, "log_path": str(tmp_path / "1" / "output.log")}
    assert _logged([missing]) == {}
