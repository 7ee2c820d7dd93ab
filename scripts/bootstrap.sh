#!/usr/bin/env bash
# Sets up everything locust-llm needs on a fresh machine; safe to run again (it skips what is there).
#   bash scripts/bootstrap.sh          -> .venv with the package (enough for `locust-llm demo`)
#   bash scripts/bootstrap.sh --test   -> also the test extras and the system packages the tests
#                                         use for real: prometheus, chromium + chromium-driver,
#                                         nginx, docker-compose (config check only), iproute2,
#                                         cmake + ninja + g++, and llama.cpp's llama-server and
#                                         llama-cpp-python's server (built once per machine)
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
extras=""
[ $want_test = 1 ] && extras="[test]"
stamp=".venv/.installed${extras:+-test}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -e ".${extras}"
  touch "$stamp"
fi

if [ $want_test = 1 ]; then
  need=()
  command -v prometheus >/dev/null || need+=(prometheus)
  command -v promtool >/dev/null || need+=(prometheus)
  command -v chromium >/dev/null || need+=(chromium)
  command -v chromedriver >/dev/null || need+=(chromium-driver)
  command -v nginx >/dev/null || need+=(nginx)
  command -v docker-compose >/dev/null || need+=(docker-compose)
  command -v ip >/dev/null || need+=(iproute2)
  command -v cmake >/dev/null || need+=(cmake) # the llama.cpp builds below
  command -v ninja >/dev/null || need+=(ninja-build)
  command -v g++ >/dev/null || need+=(g++)
  if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" != 0 ] && sudo="sudo"
    echo "bootstrap: installing system packages: ${need[*]}" >&2
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
  fi
fi

# llama.cpp's llama-server and llama-cpp-python's server for tests/test_llamacpp_*.py: built from
# the PyPI sdist's sources once per machine (about 8 minutes each on 2 cores), cached under
# ~/.cache/locust-llm/
if [ $want_test = 1 ]; then
  bash scripts/build_llama_server.sh --python >/dev/null
fi
