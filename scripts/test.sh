#!/usr/bin/env bash
# The one command that runs the whole test suite: it first installs what the tests
# need beyond the Rust toolchain (scripts/test-deps.sh, a no-op once done), then runs
# the unit tests, the integration tests over the wire (including the layer-rule
# check, tests/it/layers.rs) and the sqllogictest files, through cargo-nextest when
# present.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/test-deps.sh
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast --test-threads 2 "$@"
else
  cargo test --no-fail-fast "$@"
fi
