#!/usr/bin/env bash
# The one command that runs the whole test suite: unit tests, integration tests over
# the wire, and the sqllogictest files, all through cargo-nextest when present.
set -euo pipefail
cd "$(dirname "$0")/.."
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast --test-threads 2 "$@"
else
  cargo test --no-fail-fast "$@"
fi
