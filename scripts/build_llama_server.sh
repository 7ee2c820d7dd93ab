#!/usr/bin/env bash
# Builds llama.cpp's llama-server (CPU only) from the llama.cpp sources that ship inside the PyPI
# sdist of llama-cpp-python, once per machine, into ~/.cache/locust-llm/llama-server-<version>/.
#   bash scripts/build_llama_server.sh           -> builds when missing, prints the binary's path
#   bash scripts/build_llama_server.sh --python  -> also llama-cpp-python[server] from the same
#                                                   sdist, in ~/.cache/locust-llm/llama-cpp-python-<version>-venv
#   LLAMA_SERVER_JOBS=4 bash scripts/build_llama_server.sh   -> more compile jobs (default 2)
# The conformance tests (tests/test_llamacpp_*.py) run against what this script leaves. Each
# build takes about 8 minutes on 2 cores and prints a progress line every 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(cat tests/llamacpp/LLAMA_CPP_PYTHON_VERSION)
cache_root=${LOCUST_LLM_CACHE:-$HOME/.cache/locust-llm}
binary="$cache_root/llama-server-$version/bin/llama-server"
venv="$cache_root/llama-cpp-python-$version-venv"
want_python=0
[ "${1:-}" = "--python" ] && want_python=1

done_already() { [ -x "$binary" ] && { [ $want_python = 0 ] || [ -f "$venv/.installed" ]; }; }
if done_already; then
  echo "$binary"
  exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/llama-server-$version.lock"
flock 9 # a second build (another checkout, another bootstrap) waits for this one
if done_already; then
  echo "$binary"
  exit 0
fi

python=${PYTHON:-python3}
[ -x .venv/bin/python ] && python=.venv/bin/python
work="$cache_root/build-llama-server-$version"
mkdir -p "$work"
log() { echo "build_llama_server: $(date -u +%H:%M:%S) $*" >&2; }

# follow <pid> <log file> <what>: a progress line every 30 s while <pid> runs; its exit code
follow() {
  local pid=$1 file=$2 what=$3 ticks=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    ticks=$((ticks + 1))
    if [ $((ticks % 15)) = 0 ] && kill -0 "$pid" 2>/dev/null; then
      log "$what $(grep -o '\[[0-9]*/[0-9]*\]' "$file" | tail -1)"
    fi
  done
  wait "$pid" || { tail -30 "$file" >&2; return 1; }
}

sdist="$work/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  log "downloading the llama-cpp-python $version sdist from PyPI"
  "$python" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$work" >&2
fi
flags=(-DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
       -DGGML_OPENMP=OFF)

if [ ! -x "$binary" ]; then
  src="$work/llama_cpp_python-$version/vendor/llama.cpp"
  if [ ! -f "$src/CMakeLists.txt" ]; then
    log "unpacking $sdist"
    tar -xzf "$sdist" -C "$work"
  fi
  log "configuring llama-server (CPU only, no OpenSSL, no web UI download)"
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}" \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF >"$work/configure.log" 2>&1 || {
    tail -30 "$work/configure.log" >&2
    exit 1
  }
  jobs=${LLAMA_SERVER_JOBS:-2}
  log "compiling llama-server with $jobs jobs (about 8 minutes on 2 cores)"
  cmake --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 &
  follow $! "$work/build.log" "compiling llama-server"
  mkdir -p "$(dirname "$binary").tmp"
  cp "$work/build/bin/llama-server" "$(dirname "$binary").tmp/llama-server"
  rm -rf "$(dirname "$binary")"
  mv "$(dirname "$binary").tmp" "$(dirname "$binary")"
  log "built $binary"
fi

if [ $want_python = 1 ] && [ ! -f "$venv/.installed" ]; then
  log "building llama-cpp-python[server] $version into $venv (about 8 minutes on 2 cores)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  CMAKE_ARGS="${flags[*]}" CMAKE_BUILD_PARALLEL_LEVEL=${LLAMA_SERVER_JOBS:-2} \
    "$venv/bin/python" -m pip install -v "$sdist[server]" >"$work/python-build.log" 2>&1 &
  follow $! "$work/python-build.log" "compiling llama-cpp-python"
  touch "$venv/.installed"
  log "built $venv"
fi
echo "$binary"
