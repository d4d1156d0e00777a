#!/usr/bin/env bash
# The quick start: validate the workload, run it under nodus, list the snapshots retention kept.
# Uses a private NODUS_HOME under .nodus-demo/ so it never touches ~/.nodus.
set -euo pipefail
cd "$(dirname "$0")/../.."
export NODUS_HOME="${NODUS_HOME:-$PWD/.nodus-demo}"
export PATH="$PWD/.venv/bin:$PATH"   # the workload's `python` is the venv's
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

workload=examples/quickstart/workload.toml
nodus validate "$workload"
nodus run "$workload"
run=$(nodus runs list --json | python -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
echo
echo "== snapshots of $run, as retention left them ([execution] of $workload)"
nodus runs snapshots "$run"
