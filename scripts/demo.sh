#!/usr/bin/env bash
# The embedded default end to end: start `truerun dev` on SQLite in a fresh data directory,
# submit runs, approve one, cancel one, and print display states and events through the CLI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
truerun=.venv/bin/truerun
data="$(mktemp -d)"
log="$data/dev.log"

"$truerun" dev --data-dir "$data" --grpc-addr 127.0.0.1:0 >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$data"' EXIT

for _ in $(seq 100); do
  grep -q '^grpc listening on ' "$log" && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
address="$(sed -n 's/^grpc listening on //p' "$log")"
[ -n "$address" ] || { echo "truerun dev did not start:"; cat "$log"; exit 1; }
export TRUERUN_SERVER="$address"
echo "== truerun dev is serving gRPC on $address (data in $data)"

say() { echo; echo "\$ truerun $*"; "$truerun" "$@"; }

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
echo "== Runs stay queued until a runtime agent claims them (the runtime protocol adds that);"
echo "   nothing here pretends they ran."
