#!/usr/bin/env bash
# The browser tests (tests/browser) drive Debian's `chromium` package through pip's playwright;
# `playwright install` is never used (it downloads a browser build from outside the package
# registries). Installs chromium with apt-get when it is missing, and fails loudly when it
# cannot, so a missing browser never turns into skipped tests.
set -euo pipefail

CHROMIUM=${TRUERUN_CHROMIUM:-/usr/bin/chromium}

works() {
  [ -x "$CHROMIUM" ] && "$CHROMIUM" --version >/dev/null 2>&1
}

if works; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "ensure_chromium: $CHROMIUM is missing and this user cannot install it." >&2
  echo "  Install Debian's chromium package (apt-get install chromium) and run again." >&2
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure_chromium: $CHROMIUM is missing and there is no apt-get to install it." >&2
  exit 1
fi

echo "ensure_chromium: installing Debian's chromium package" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null

if ! works; then
  echo "ensure_chromium: chromium was installed but $CHROMIUM --version fails." >&2
  exit 1
fi
echo "ensure_chromium: $("$CHROMIUM" --version 2>/dev/null)" >&2
