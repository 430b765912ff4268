#!/usr/bin/env bash
# Local deployment: the embedded broker (tansu, memory storage), a generated
# stream, the pipeline on Beam's in-process runner, and the predictions.
#
#   deploy/local/run-local.sh [WORKDIR]        (needs `pip install -e .`)
#
# Everything stays on loopback and under WORKDIR (default: a temp dir); the
# broker is stopped on exit. Replace the produce step with your own events
# (`scinol produce DATA.csv --label y ...`) and drop --bounded to keep running.
set -euo pipefail

WORKDIR="${1:-$(mktemp -d -t scinol-local-XXXXXX)}"
mkdir -p "$WORKDIR"
EVENTS="${SCINOL_EVENTS:-2000}"

scinol broker > "$WORKDIR/broker.addr" 2> "$WORKDIR/broker.log" &
BROKER_PID=$!
trap 'kill "$BROKER_PID" 2>/dev/null || true; wait "$BROKER_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  [ -s "$WORKDIR/broker.addr" ] && break
  kill -0 "$BROKER_PID" 2>/dev/null || { cat "$WORKDIR/broker.log" >&2; exit 1; }
  sleep 0.1
done
BOOTSTRAP="$(head -n 1 "$WORKDIR/broker.addr")"
[ -n "$BOOTSTRAP" ] || { echo "the embedded broker did not start" >&2; exit 1; }
echo "embedded broker at $BOOTSTRAP" >&2

scinol produce --generate toy --n "$EVENTS" --topic events --bootstrap "$BOOTSTRAP" --quiet
scinol run --bootstrap "$BOOTSTRAP" --topic events --predictions-topic predictions \
  --learner scinol2 --loss logistic --checkpoint-dir "$WORKDIR/checkpoints" --checkpoint-every 500 --bounded
scinol tail predictions --bootstrap "$BOOTSTRAP" --max 3 --timeout 5
echo "checkpoints: $WORKDIR/checkpoints/default" >&2
ls "$WORKDIR/checkpoints/default" >&2
