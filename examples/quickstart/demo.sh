#!/usr/bin/env bash
# The quick start: validate the workload, run it under nodus, kill its training program once
# after the first snapshot (nodus restores it and goes on), run it again uninterrupted, and show
# that both runs end with the same model. Then the snapshots retention kept, and what to try next.
# Uses a private NODUS_HOME under .nodus-demo/ so it never touches ~/.nodus.
set -euo pipefail
cd "$(dirname "$0")/../.."
export NODUS_HOME="${NODUS_HOME:-$PWD/.nodus-demo}"
# the workload's `python` is the venv's: `make demo`'s (VENV=…), else this checkout's .venv
export PATH="${NODUS_DEMO_VENV:-$PWD/.venv}/bin:$PATH"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

# The tiny model trains 48 steps in well under a second: the integration holds each save half a
# second before publishing it (a knob for tests and `nodus qualify`, never set in normal use), so
# the kill below lands mid-training, after the first snapshot and long before the last.
export NODUS_HF_WRITE_DELAY_S=0.5

workload=examples/quickstart/workload.toml
key="demo-$(date +%s)"                 # each demo is new runs, never a rerun of the last one
field_of() {  # field_of COMMAND KEY EXPRESSION: a value of `nodus runs COMMAND KEY --json`
    # ('' while unknown: a run not accepted yet prints no JSON, and that is no error to show)
    nodus runs "$1" "$2" --json 2>/dev/null | python -c "
import json, sys
try:
    r = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
print($3)" 2>/dev/null || true
}
field() {  # field KEY EXPRESSION: a value of `nodus runs get KEY --json` ('' while unknown)
    field_of get "$1" "$2"
}
model_hash() {  # the sha256 of a run's final model, downloaded from its outputs
    rm -rf "$NODUS_HOME/demo-outputs/$1"
    nodus runs outputs "$1" --to "$NODUS_HOME/demo-outputs/$1" >/dev/null 2>&1
    sha256sum "$NODUS_HOME/demo-outputs/$1/out/model/model.safetensors" | cut -c1-16
}

echo "== nodus validate $workload"
nodus validate "$workload"

echo
echo "== nodus run $workload   (its training program is killed with SIGKILL after the first snapshot)"
nodus run "$workload" --key "$key" &
runner=$!
# until the first snapshot: while the run is not accepted yet, `runs snapshots` prints nothing
# (its error silenced), which is "none yet", never a parse error
until [ "$(field_of snapshots "$key" "len(r)")" -gt 0 ] 2>/dev/null; do
    kill -0 "$runner" 2>/dev/null || break
    sleep 0.5
done
pid=$(field "$key" "r['stages'][0]['attempts'][-1]['pid'] or ''")
[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null && echo "   (demo: sent SIGKILL to the training program, pid $pid)"
wait "$runner"

echo
echo "== the same workload again, uninterrupted, to compare"
nodus run "$workload" --key "$key-bare" --quiet >/dev/null
recovered=$(model_hash "$key")
bare=$(model_hash "$key-bare")
echo "   model of the recovered run:     sha256 $recovered…"
echo "   model of the uninterrupted run: sha256 $bare…"
if [ "$recovered" = "$bare" ]; then echo "   identical: the recovery lost and repeated nothing"; else echo "   DIFFERENT"; exit 1; fi

echo
echo "== nodus runs snapshots $key"
nodus runs snapshots "$key"
echo "   (\"deleted\": retention freed those kinds; [execution] keep_recoverable = 1 keeps training state"
echo "    in the newest snapshot and one more, keep_adapters = 3 keeps weights in three more and"
echo "    in each epoch-end save)"

cat <<EOF

Next steps (this demo's runs are in $NODUS_HOME: export NODUS_HOME=$NODUS_HOME to see them):
  nodus runs get $key            # stages, attempts, the recovery, events
  nodus snapshots download $key@24 --artifact model --to /tmp/m24    # an epoch-end save as a model
  nodus runs branch $key@42 --from weights --set env.QUICKSTART_EPOCHS=1    # a warm start from it
README.md walks through the rest: pause and resume, the model registry, logs, plots, gc.
EOF
