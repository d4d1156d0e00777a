"""`nodus runs plot`: a real PNG with the curves, every snapshot and the run's recoveries."""

from __future__ import annotations

import pytest
from snapshot_helpers import HF_STEPS

# Outside the quick tier: plots of the session's real runs.
pytestmark = [
    pytest.mark.slow,
    # with the other tests of the session's `hf_run` and `counter_run`: each is made once
    pytest.mark.xdist_group("inventory_runs"),
]

PNG = b"\x89PNG\r\n\x1a\n"


def _image_size(path) -> tuple[int, int]:
    import matplotlib.image

    height, width = matplotlib.image.imread(path).shape[:2]
    return width, height


def test_plot_of_a_trainer_run_draws_every_logged_step_and_marks_every_snapshot(hf_run, tmp_path):
    from nodus.inventory.plot import collect

    out = tmp_path / "loss.png"
    proc = hf_run.home.nodus("runs", "plot", hf_run.key, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == PNG and _image_size(out)[0] > 600
    assert "loss" in proc.stderr and "3 snapshot(s)" in proc.stderr
    run = hf_run.home.catalog().get_run(hf_run.run_id)
    (series,) = collect(hf_run.home.store(), hf_run.home.catalog(), run)
    assert [step for step, _ in series.curves["loss"]] == list(range(1, HF_STEPS + 1))
    assert [step for step, _ in series.snapshots] == [6, 12, HF_STEPS]
    assert series.restarts == []


def test_plot_of_a_recovered_run_marks_the_recovery(counter_run, tmp_path):
    from nodus.inventory.plot import collect

    out = tmp_path / "counter.png"
    proc = counter_run.home.nodus("runs", "plot", counter_run.run_id, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == PNG
    run = counter_run.home.catalog().get_run(counter_run.run_id)
    (series,) = collect(counter_run.home.store(), counter_run.home.catalog(), run)
    restored = run.stages[0]["attempts"][1]["restored_step"]
    assert series.restarts == [(restored, f"recovery: attempt 2 from step {restored}")]
    assert restored > 10 and restored in [step for step, _ in series.snapshots]


def test_plot_of_an_unknown_run_is_refused(counter_run, tmp_path):
    proc = counter_run.home.nodus("runs", "plot", "no-such-run", "--out", str(tmp_path / "x.png"))
    assert proc.returncode == 2 and "no-such-run" in proc.stderr
    assert not (tmp_path / "x.png").exists()
