"""The pure decisions behind the page's charts and lists, as tables: smoothing, the log axis's
ticks, the time axis's placing of steps, the reader's chart options, the CSV's rows, the
metric a run is compared by and its newest and best value, the time zone said."""

from __future__ import annotations

import csv
import io
import math

import pytest

from nodus.inventory.metric_summary import curve_summary, headline, logged_at, summarize
from nodus.ui.charts import ChartOptions, Line, curve_chart, duration_text, ema, log_ticks
from nodus.ui.pages.lineage_models import metrics_words
from nodus.ui.pages.metrics import CSV_HEADER, chart_options, csv_text, step_time
from nodus.ui.pages.runs import zoned
from nodus.ui.server import route


@pytest.mark.parametrize(
    ("values", "weight", "expected"),
    [
        ([1.0, 2.0, 3.0], 0.0, [1.0, 2.0, 3.0]),  # off: the values themselves
        ([5.0, 5.0, 5.0], 0.9, [5.0, 5.0, 5.0]),  # debiased: a flat curve stays flat
        ([1.0, 2.0, 3.0], 0.5, [1.0, 5 / 3, 17 / 7]),  # TensorBoard's debiased EMA
        ([], 0.9, []),
    ],
)
def test_smoothing_is_a_debiased_moving_average(values, weight, expected):
    assert ema(values, weight) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("low", "high", "values"),
    [
        (1e-3, 1.0, [1e-3, 1e-2, 1e-1, 1.0]),  # three decades: the powers of ten
        (0.3, 2.0, [0.5, 1.0, 2.0]),  # under one decade: 1, 2 and 5 times them
        (0.11, 0.19, [0.11, 0.19]),  # no round value fits: the ends
    ],
)
def test_a_log_axis_ticks_at_powers_of_ten_or_their_halves(low, high, values):
    ticks = log_ticks(math.log10(low), math.log10(high))
    assert [10**t for t in ticks] == pytest.approx(values)


@pytest.mark.parametrize(
    ("anchors", "step", "seconds"),
    [
        ([(0, 100.0), (10, 200.0)], 5, 150.0),  # between two saves: their pace
        ([(0, 100.0), (10, 200.0), (20, 220.0)], 15, 210.0),
        ([(0, 100.0), (10, 200.0)], 20, 300.0),  # past the last: the last stretch's pace
        ([(20, 500.0)], 25, 500.0),  # an attempt with no save yet: its start
    ],
)
def test_a_step_is_placed_in_time_between_the_times_nodus_knows(anchors, step, seconds):
    assert step_time(anchors, step) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("query", "options"),
    [
        ({}, ChartOptions()),
        ({"smooth": "0.9", "y": "log", "x": "time"}, ChartOptions(0.9, log=True, time=True)),
        ({"smooth": "0.5"}, ChartOptions()),  # not offered: the default
        ({"smooth": "nan", "y": "LOG", "x": "wall"}, ChartOptions()),
    ],
)
def test_the_readers_choices_come_from_the_query(query, options):
    assert chart_options(query) == options


def test_the_csv_holds_every_value_as_logged():
    rows = [("r1", "main", 1, "loss", 5.0, 0.1 + 0.2), ("r1", "main", 2, "lr", 10.0, 4e-05)]
    read = list(csv.reader(io.StringIO(csv_text(rows))))
    assert read[0] == list(CSV_HEADER)
    assert read[1:] == [
        ["r1", "main", "1", "loss", "5", "0.30000000000000004"],
        ["r1", "main", "2", "lr", "10", "4e-05"],
    ]


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([], None),
        ([(5, {"learning_rate": 0.1})], None),  # nothing to compare runs by
        (
            [(5, {"loss": 0.9}), (10, {"loss": 0.4}), (15, {"loss": 0.6})],
            {"metric": "loss", "newest": 0.6, "newest_step": 15, "best": 0.4, "best_step": 10},
        ),
        (  # a reward method: the highest is the best
            [(5, {"reward": 0.2}), (10, {"reward": 0.7}), (15, {"reward": 0.5})],
            {"metric": "reward", "newest": 0.5, "newest_step": 15, "best": 0.7, "best_step": 10},
        ),
        (  # a NaN loss is no value; a snapshot without the metric is passed over
            [(5, {"loss": 0.9}), (10, {"loss": float("nan")}), (15, {"epoch": 1})],
            {"metric": "loss", "newest": 0.9, "newest_step": 5, "best": 0.9, "best_step": 5},
        ),
    ],
)
def test_a_run_is_compared_by_its_loss_else_its_reward(points, expected):
    assert summarize(points) == expected


def test_loss_is_preferred_to_reward():
    assert headline({"reward", "loss"}) == "loss" and headline({"kl"}) is None


@pytest.mark.parametrize(
    ("stamp", "said"),
    [
        ("2026-12-04T07:31:38.123+00:00", "2026-12-04 07:31:38 UTC"),
        (None, "–"),
    ],
)
def test_times_on_the_runs_page_say_their_zone(stamp, said):
    assert zoned(stamp) == said


@pytest.mark.parametrize(
    ("metrics", "said"),
    [
        ({}, "–"),
        ({"learning_rate": 4e-05, "loss": 0.41234}, "loss 0.4123 · learning_rate 4e-05"),
    ],
)
def test_a_models_metrics_headline_first(metrics, said):
    assert metrics_words(metrics) == said


@pytest.mark.parametrize(
    ("seconds", "span", "said"),
    [(90, None, "90 s"), (150, None, "2.5 min"), (5400, 9000, "1.5 h")],
)
def test_time_ticks_in_the_unit_of_their_span(seconds, span, said):
    assert duration_text(seconds, span) == said


def test_a_log_chart_leaves_out_what_it_cannot_draw_and_says_so():
    line = Line("main attempt 1", 0, [(1.0, 1.0), (2.0, 0.0), (3.0, 0.01)])
    drawn = curve_chart("loss", [line], [], ChartOptions(log=True))
    assert drawn.count('class="pt"') == 2 and "1 point(s) ≤ 0 not drawn" in drawn
    assert '<text class="label y"' in drawn and "loss (log scale)" in drawn


SERIES = [
    {"stage": "sft", "curves": {"loss": [[5, 0.9], [10, 0.5]], "lr": [[10, 1e-4]]}},
    {"stage": "export", "curves": {}},
]


@pytest.mark.parametrize(
    ("stage", "step", "values"),
    [
        ("sft", 7, {"loss": 0.9}),  # the newest point at or before the step
        ("sft", 12, {"loss": 0.5, "lr": 1e-4}),
        ("sft", 3, {}),  # before anything was logged
        ("export", 10, {}),
        ("sft", None, {}),  # a counted snapshot has no step on the curves
    ],
)
def test_what_was_logged_when_a_snapshot_was_saved(stage, step, values):
    assert logged_at(SERIES, stage, step) == values


def test_a_runs_summary_is_its_last_stage_that_logged_a_loss():
    assert curve_summary(SERIES) == {
        "metric": "loss",
        "newest": 0.5,
        "newest_step": 10,
        "best": 0.5,
        "best_step": 10,
        "stage": "sft",
    }
    assert curve_summary([]) is None


@pytest.mark.parametrize(
    ("path", "page"),
    [
        ("/runs/run_1/metrics.csv", ("csv", ("run_1",))),
        ("/runs/run_1/metrics", ("metrics", ("run_1",))),
        ("/runs/run_1/metrics.json", None),
        ("/runs/../metrics.csv", None),
    ],
)
def test_the_csv_has_its_own_route(path, page):
    assert route(path) == page
