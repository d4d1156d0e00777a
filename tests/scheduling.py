"""How the suite's tests are spread over pytest-xdist's workers (three on two cores: Makefile).

The heaviest tests are sent first, and the quick tests that import the Transformers stack into
pytest's own process share one worker.

Under ``-n 3 --dist loadgroup`` pytest-xdist hands out work units (an ``xdist_group``, or one
test) in collection order, after putting the units of several tests first (largest first). A
minute-long test collected late starts when the other workers have little left, which then idle
until it ends. So the collection is ordered longest first (the classic longest-processing-time
rule): the tests below by their seconds, then the other slow tests, then the quick ones, each
in its usual order. The quick tests (under a second or two each) come last and fill in while
the other workers end their last long tests. The figures are those of the last whole run
(docs/benchmarks.md, "The test suite"); a test missing from here only runs later, never less,
so the table need not be exact or complete.
"""

from __future__ import annotations

import pytest

ML_IN_PROCESS = pytest.mark.xdist_group("ml_in_process")
"""The quick tests that import Transformers, Datasets or TRL into pytest's own process (not a
program they start): about 9 s of CPU for the first in a worker. On one worker, the other never
pays it, and their module-scoped fixtures (a pipeline, a quick-start copy) are made once."""

SECONDS: dict[str, dict[str, float]] = {
    # the whole suite's slowest in its last run (the example READMEs' blocks: alone, 2026-12-06),
    # then the quick tier's (`-m "not slow"`)
    "tests/hf/test_ext_trl.py": {
        "test_nodus_qualify_extension_trl_passes_for_sft_and_dpo": 138,
        "test_trl_script_killed_twice_ends_bit_identical_to_an_uninterrupted_run[sft-lora]": 82,
        "test_trl_script_killed_twice_ends_bit_identical_to_an_uninterrupted_run[dpo-full]": 66,
    },
    "tests/hf/test_ext_processes.py": {
        "test_nodus_qualify_extension_processes_passes_killing_one_rank_at_a_time": 105,
        "test_a_killed_rank_and_a_killed_runner_end_bit_identical_to_the_bare_world": 73,
        "test_a_paused_world_resumes_under_tight_retention_and_its_branch_ends_bit_identical": 66,
        "test_a_notice_saves_a_bf16_world_at_one_step_and_it_resumes_bit_identically": 50,
    },
    "tests/runner/test_directory_programs.py": {
        "test_torch_save_in_place_killed_fifteen_times_half_mid_write_ends_as_uninterrupted": 91,
    },
    "tests/hf/test_ext_precision.py": {
        "test_unqualified_bf16_is_refused_with_the_hint_until_nodus_qualify_passes": 89,
    },
    "tests/methods/test_recovery.py": {
        "test_dpo_killed_twice_and_stopped_resumes_to_the_same_adapter": 78,
        "test_grpo_killed_twice_and_stopped_regenerates_the_same_rollouts_and_adapter": 76,
    },
    "tests/hf/test_ext_data.py": {
        "test_masked_lm_killed_twice_paused_and_resumed_ends_bit_identical": 68,
        "test_persistent_workers_killed_twice_and_stopped_by_a_notice_end_bit_identical": 58,
    },
    "tests/hf/test_qualify.py": {
        "test_nodus_qualify_passes_here_and_records_the_result": 64,
    },
    "tests/hf/test_launchers.py": {
        "test_accelerate_launch_of_one_process_saves_at_a_notice_and_resumes_bit_identically": 55,
    },
    "tests/test_readme_blocks.py": {
        "test_a_runnable_block_runs_as_written[README.md]": 49,
    },
    "tests/slurm/test_slurm_hf.py": {
        "test_a_two_node_hf_world_killed_then_noticed_resumes_bit_identical": 41,
    },
    "tests/slurm/test_slurm_backend.py": {
        "test_a_two_node_world_with_a_rank_killed_resumes_bit_identical": 20,
    },
    "tests/hf/test_example_programs.py": {
        "test_json_lines_file_with_an_explicit_padding_collator_recovers_bit_identically": 38,
        "test_the_text_program_under_torchrun_recovers_from_worker_kills_bit_identically": 36,
        "test_text_file_mapped_and_grouped_recovers_bit_identically_reusing_its_cache": 36,
    },
    "tests/hf/test_hf_retention.py": {
        "test_killed_four_times_under_keep_one_ends_bit_identical": 38,
    },
    "tests/hf/test_under_runner.py": {
        "test_program_sigkilled_three_times_once_mid_save_recovers_to_the_bare_weights": 36,
    },
    "tests/schemas/test_schema_fuzz.py": {
        "test_python_values_from_the_sdk_never_escape_as_other_errors": 6,
    },
    "tests/inventory/test_store_unreachable.py": {
        "test_an_unreachable_store_is_named_as_such_never_as_a_library_exception": 4,
    },
    "tests/hf/test_bootstrap.py": {
        "test_without_integration_settings_the_bootstrap_does_nothing": 3,
        "test_bootstrap_chains_to_the_next_sitecustomize_and_installs_the_hook": 3,
    },
    "tests/test_error_tree.py": {
        "test_the_scan_finds_the_tree_and_the_exceptions_outside_it": 3,
    },
    "tests/test_docs_events.py": {
        "test_every_listed_type_is_recorded_somewhere": 3,
    },
}
"""Seconds of each heavy test, by file and test (a parametrized test's id names its case)."""


def seconds(nodeid: str) -> float:
    """The table's figure for a node id (xdist's ``@group`` suffix aside); 0 when not listed."""
    path, _, test = nodeid.split("@", 1)[0].partition("::")
    return SECONDS.get(path, {}).get(test, 0)


def longest_first(items: list) -> list:
    """``items`` with the listed tests first, longest first, then the other slow tests, then
    the quick ones; each kind keeps its order."""
    return sorted(
        items,
        key=lambda item: (-seconds(item.nodeid), item.get_closest_marker("slow") is None),
    )
