#!/usr/bin/env bash
# The static checks, one script for humans and CI (.ci/run calls it before the tests):
# ruff (lint and format), mypy on the package, and import-linter's contracts (pyproject.toml's
# [tool.importlinter]: the families' layers, no import circles, Locust only in the client).
# Needs the test extras: bash scripts/bootstrap.sh --test
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
step() {
  echo "check: $*"
  "$@"
}
step "$bin/ruff" check locust_llm tests bench locustfiles
step "$bin/ruff" format --check locust_llm tests bench locustfiles
step "$bin/mypy" locust_llm
step "$bin/lint-imports"
echo "check: all passed"
