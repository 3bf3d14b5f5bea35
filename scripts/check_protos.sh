#!/usr/bin/env bash
# Checks the gRPC contracts, offline:
#   1. protos/gen is what protos/generate.py makes from protos/truerun (regenerates and
#      fails if any file under protos/gen changed, was added or was deleted);
#   2. `buf format` finds nothing to change in the .proto files;
#   3. `buf lint` passes with protos/buf.yaml.
# buf never fetches googleapis from the network: generate.py compiles the protos with the
# include paths of the installed googleapis-common-protos and grpc_tools wheels into a
# self-contained FileDescriptorSet (an "image"), and buf lints that image, limited to our
# own files (--path truerun).
#
# Environment: PYTHON (default: .venv/bin/python if present, else python3). buf comes from
# node_modules/.bin (package.json pins @bufbuild/buf; `npm ci` runs when it is missing).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Hashes of every file under protos/gen except bytecode caches, in a stable order.
hash_gen() {
  find protos/gen -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 \
    | LC_ALL=C sort -z | xargs -0 -r sha256sum
}

status=0

hash_gen >"$work/before"
"$PYTHON" protos/generate.py --quiet --descriptor-set "$work/truerun.binpb"
hash_gen >"$work/after"
if ! diff -u "$work/before" "$work/after" >"$work/gen.diff"; then
  echo "check_protos: protos/gen was out of date; regenerated it. Commit these changes:" >&2
  cat "$work/gen.diff" >&2
  status=1
fi

# In a git checkout on CI (a fresh clone), protos/gen must also be exactly what is
# committed: no modified, deleted or untracked generated files.
if [[ -n "${CI:-}" ]] && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  dirty="$(git status --porcelain --untracked-files=all -- protos/gen)"
  if [[ -n "$dirty" ]]; then
    echo "check_protos: protos/gen differs from the commit:" >&2
    echo "$dirty" >&2
    status=1
  fi
fi

buf=node_modules/.bin/buf
if [[ ! -x "$buf" ]]; then
  npm ci --no-audit --no-fund
fi

if ! (cd protos && "../$buf" format --diff --exit-code); then
  echo "check_protos: run 'node_modules/.bin/buf format -w protos'" >&2
  status=1
fi

if ! "$buf" lint "$work/truerun.binpb" --config protos/buf.yaml --path truerun; then
  echo "check_protos: buf lint failed" >&2
  status=1
fi

if [[ $status -eq 0 ]]; then
  echo "check_protos: OK (protos/gen up to date, buf format and buf lint clean)"
fi
exit $status
