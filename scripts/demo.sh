#!/usr/bin/env bash
# The embedded default end to end: start `truerun dev` on SQLite in a fresh data directory,
# submit runs, approve one, cancel one, and print display states and events through the CLI.
# Then start the reference runtime agent (limit D=2) and let it run real commands: succeeded,
# failed, and one cancelled while it runs. Then a schedule fires every 2 seconds into runs
# the agent runs, and is paused with a note. Last, a long task of two declared steps waits
# for an approval, is granted it, and completes on its evidence. Every process started here
# is stopped on exit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${VENV:-.venv}" # `make demo` passes its VENV
truerun="$venv/bin/truerun"
python="$venv/bin/python"
data="$(mktemp -d)"
log="$data/dev.log"
state="$data/agent"
agent_log="$data/agent.log"
server=""
agent=""

# Stop the agent, then whatever commands and supervisors outlived it (they run in sessions of
# their own by design; only processes the state dir's handle files prove are signalled), then
# the server.
cleanup() {
  set +e
  if [ -n "$agent" ]; then
    kill -TERM "$agent" 2>/dev/null
    wait "$agent" 2>/dev/null
  fi
  if [ -d "$state/tasks" ]; then
    "$python" - "$state" <<'PY'
import os, signal, sys
from pathlib import Path
from truerun_runtime.agent.procfs import Proof, prove, read_json
for name in ("handle.json", "supervisor.json"):
    for path in Path(sys.argv[1]).glob(f"tasks/*/{name}"):
        record = read_json(path) or {}
        if prove(record) is not Proof.GONE:
            try:
                os.killpg(int(record["pgid"]), signal.SIGKILL)
            except OSError:
                pass
PY
  fi
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
  fi
  rm -rf "$data"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

TRUERUN_GRACE_SECONDS=2 "$truerun" dev --data-dir "$data" --grpc-addr 127.0.0.1:0 >"$log" 2>&1 &
server=$!

for _ in $(seq 100); do
  grep -q '^grpc listening on ' "$log" && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
address="$(sed -n 's/^grpc listening on //p' "$log")"
[ -n "$address" ] || { echo "truerun dev did not start:"; cat "$log"; exit 1; }
export TRUERUN_SERVER="$address"
# the CLI's API token: the one truerun dev wrote for its user (every project, operator)
TRUERUN_API_TOKEN="$(cat "$data/api.token")"
export TRUERUN_API_TOKEN
echo "== truerun dev is serving gRPC on $address (data in $data)"
for _ in $(seq 100); do
  grep -q '^dashboard ' "$log" && break
  sleep 0.1
done
dashboard="$(sed -n 's/^dashboard //p' "$log")"
[ -n "$dashboard" ] || { echo "truerun dev did not serve the dashboard:"; cat "$log"; exit 1; }
echo "== Dashboard (while the demo runs; the link carries the all-projects token): $dashboard"

say() {
  local shown="" arg
  for arg in "$@"; do
    case "$arg" in *[[:space:]\;\$]*) shown+=" '$arg'" ;; *) shown+=" $arg" ;; esac
  done
  echo
  echo "\$ truerun$shown"
  "$truerun" "$@"
}

say submit nightly-report --project demo --command "python report.py" --idempotency-key nightly-2026-11-29
say submit nightly-report --project demo --command "python report.py" --idempotency-key nightly-2026-11-29
say submit deploy-staging --project demo --requires-approval --command "make deploy"
say submit reindex --project demo --priority 5 --command "reindex --all"
deploy="$("$truerun" ls --project demo | awk '/deploy-staging/ {print $1}')"
reindex="$("$truerun" ls --project demo | awk '/reindex/ {print $1}')"
say approve "$deploy"
say cancel "$reindex"
say cancel "$reindex"
say retry "$reindex"
say ls --project demo
say show "$deploy"
say show "$reindex"
echo
echo "== No runtime serves owner ${USER:-me}: those runs stay queued; nothing pretends they ran."

# -- Part 2: a reference runtime agent runs real commands -----------------------------------
owner=ops
echo
echo "== Real commands for owner $owner, submitted before any runtime is connected"
say submit compile --project ci --owner "$owner" --command "echo compiling; sleep 2; echo compiled"
say submit unit-tests --project ci --owner "$owner" --command "echo testing; sleep 3; echo 12 passed"
say submit lint --project ci --owner "$owner" --command "echo lint: 1 problem; exit 2"
say submit soak --project ci --owner "$owner" --command "echo soaking; sleep 60; echo soaked"
run_id() { "$truerun" ls --project ci | awk -v task="$1" '$2 == task {print $1}'; }
state_of() { "$truerun" ls --project ci | awk -v id="$1" '$1 == id {print $3}'; }
compile="$(run_id compile)"
tests="$(run_id unit-tests)"
lint="$(run_id lint)"
soak="$(run_id soak)"
say ls --project ci

# Wait (bounded) until run $1 shows one of the states $2...
wait_for() {
  local id="$1" now=""
  shift
  for _ in $(seq 150); do
    now="$(state_of "$id")"
    for want in "$@"; do [ "$now" = "$want" ] && return 0; done
    sleep 0.1
  done
  echo "timed out: run $id is $now, expected one of: $*"
  cat "$agent_log"
  exit 1
}

echo
echo "\$ TRUERUN_TOKEN=\$(cat $data/runtime.token) truerun agent --owner $owner --limit 2 --state-dir $state"
TRUERUN_TOKEN="$(cat "$data/runtime.token")" "$truerun" agent --server "$address" \
  --owner "$owner" --limit 2 --state-dir "$state" >"$agent_log" 2>&1 &
agent=$!
for _ in $(seq 100); do
  grep -q 'runtime stream to .* open' "$agent_log" && break
  kill -0 "$agent" 2>/dev/null || { cat "$agent_log"; exit 1; }
  sleep 0.1
done
grep -q 'runtime stream to .* open' "$agent_log" || { cat "$agent_log"; exit 1; }

wait_for "$compile" running
wait_for "$tests" running
echo
echo "== D=2 is full: two commands run, the others wait (truerun sends no Start beyond free slots)"
say ls --project ci
echo
echo "\$ truerun agent status --state-dir $state"
"$truerun" agent status --state-dir "$state" | tr -d '\n ' | sed 's/,"/, "/g'
echo

wait_for "$soak" running
echo
echo "== soak is running; cancel it (SIGTERM to its process group, SIGKILL after the grace)"
say cancel "$soak"
for id in "$compile" "$tests" "$lint" "$soak"; do
  wait_for "$id" succeeded failed cancelled timed_out lost
done
echo
echo "== Everything has ended"
say ls --project ci
say show "$compile"
say show "$soak"

# Each run's path through the display states, from its committed events.
echo
echo "== Display states each run went through (from the committed events)"
for id in "$compile" "$tests" "$lint" "$soak"; do
  "$truerun" show "$id" | awk '
    $1 == "task" { task = $2 }
    $1 ~ /^[0-9]+$/ {
      s = ""
      if ($2 == "run.queued") s = "queued"
      else if ($2 == "run.dispatching") s = "starting"
      else if ($2 == "attempt.accepted") s = "waiting_runtime"
      else if ($2 == "run.running") s = "running"
      else if ($2 == "run.cancel_requested") s = "cancelling"
      else if ($2 ~ /^run\.(succeeded|failed|cancelled|timed_out|lost|retry_wait)$/) s = substr($2, 5)
      if (s != "") path = path (path == "" ? "" : " -> ") s
    }
    END { printf "  %-12s %s\n", task, path }'
done

# -- Part 3: a schedule ---------------------------------------------------------------------
echo
echo "== A schedule: every 2 seconds a run of the same template, run by the same agent"
say schedule create heartbeat --project ci --owner "$owner" --task heartbeat --every 2s \
  --command "echo tick" --name "Heartbeat every 2 s"
# Wait (bounded) until it has fired 3 times: its events, read back as JSON.
fires=0
for _ in $(seq 100); do
  fires="$("$truerun" schedule show heartbeat --project ci -o json | "$python" -c \
    'import json, sys; print(sum(e["type"] == "fired" for e in json.load(sys.stdin)["events"]))')"
  [ "$fires" -ge 3 ] && break
  sleep 0.2
done
[ "$fires" -ge 3 ] || { echo "timed out: the schedule fired $fires time(s), expected 3"; exit 1; }
say schedule ls --project ci
say schedule show heartbeat --project ci
say schedule pause heartbeat --project ci --note "demo over"
say schedule ls --project ci
# -- Part 4: a long task ------------------------------------------------------------------
echo
echo "== A long task: a goal over declared steps, an approval, completed only on evidence"
lt="$data/long-task"
mkdir -p "$lt"
cat > "$lt/task.yaml" <<TASK
id: weekly-summary
goal: Publish this week's summary
owner: $owner
project: ci
steps:
  - id: collect
    title: Collect this week's numbers
    class: pure  # no outside effect: safe to run again
    run: "date -u +%F > $lt/numbers.txt"
    writes: $lt/numbers.txt
  - id: publish
    title: Publish the summary
    class: non_idempotent  # may not repeat: its intent is recorded before it runs
    approval: "publish $lt/published.txt"  # a person approves this exact action first
    run: >-
      cp $lt/numbers.txt $lt/published.txt &&
      printf '{"external_id": "pub-1", "target": "$lt/published.txt", "summary": "published", "at_ms": %s}\n' "\$(date +%s000)"
    receipt: json  # the command's last line is the outside world's receipt
criteria:
  - id: published
    text: The summary is published
    checker: {kind: file_exists, path: $lt/published.txt}
  - id: receipted
    text: The publish step has its receipt
    checker: {kind: receipt_present, step_id: publish}
TASK
say task create --file "$lt/task.yaml" --start
# Read the task back as JSON: its state, or its open decision's id.
task_field() {
  "$truerun" task show weekly-summary --project ci -o json | "$python" -c '
import json, sys
task = json.load(sys.stdin)
if sys.argv[1] == "state":
    print(task.get("state", "").removeprefix("LONG_TASK_STATE_").lower())
else:
    print(next((d["decisionId"] for d in task.get("decisions", []) if d.get("state") == "open"), ""))
' "$1"
}
# Wait (bounded) until the long task is in state $1.
wait_task() {
  local now=""
  for _ in $(seq 150); do
    now="$(task_field state)"
    [ "$now" = "$1" ] && return 0
    sleep 0.2
  done
  echo "timed out: the long task is $now, expected $1"
  cat "$agent_log"
  exit 1
}
wait_task waiting_for_approval
say task show weekly-summary --project ci
say task answer weekly-summary "$(task_field decision)" grant --project ci --note "looks right"
wait_task completed
say task show weekly-summary --project ci
echo
echo "\$ truerun task export weekly-summary --project ci | head -12"
"$truerun" task export weekly-summary --project ci | head -12

echo
echo "== The dashboard at $dashboard closes with this demo; \`make dev\` (truerun dev) prints a lasting link"
