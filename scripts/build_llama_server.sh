#!/usr/bin/env bash
# Builds llama.cpp's llama-server (CPU only) from the llama.cpp sources that ship inside the PyPI
# sdist of llama-cpp-python, once per machine, into ~/.cache/locust-llm/llama-server-<version>/.
#   bash scripts/build_llama_server.sh          -> builds when missing, prints the binary's path
#   LLAMA_SERVER_JOBS=4 bash scripts/build_llama_server.sh   -> more compile jobs (default 2)
# The conformance tests (tests/test_llamacpp_*.py) run against the binary this script leaves.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(cat tests/llamacpp/LLAMA_CPP_PYTHON_VERSION)
cache_root=${LOCUST_LLM_CACHE:-$HOME/.cache/locust-llm}
dest="$cache_root/llama-server-$version"
binary="$dest/bin/llama-server"
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/llama-server-$version.lock"
flock 9 # a second build (another checkout, another bootstrap) waits for this one
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi

python=${PYTHON:-python3}
[ -x .venv/bin/python ] && python=.venv/bin/python
work="$cache_root/build-llama-server-$version"
mkdir -p "$work"
log() { echo "build_llama_server: $(date -u +%H:%M:%S) $*" >&2; }

sdist="$work/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  log "downloading the llama-cpp-python $version sdist from PyPI"
  "$python" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$work" >&2
fi
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
if [ ! -f "$src/CMakeLists.txt" ]; then
  log "unpacking $sdist"
  tar -xzf "$sdist" -C "$work"
fi

log "configuring (CPU only, no OpenSSL, no web UI download)"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_OPENMP=OFF >"$work/configure.log" 2>&1 || {
  tail -30 "$work/configure.log" >&2
  exit 1
}

jobs=${LLAMA_SERVER_JOBS:-2}
log "compiling llama-server with $jobs jobs (about 10 minutes on 2 cores); progress every 30 s"
cmake --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 &
build_pid=$!
ticks=0
while kill -0 "$build_pid" 2>/dev/null; do
  sleep 2
  ticks=$((ticks + 1))
  if [ $((ticks % 15)) = 0 ] && kill -0 "$build_pid" 2>/dev/null; then
    log "$(grep -o '^\[[0-9]*/[0-9]*\]' "$work/build.log" | tail -1) compiling"
  fi
done
if ! wait "$build_pid"; then
  tail -30 "$work/build.log" >&2
  exit 1
fi

mkdir -p "$dest/bin.tmp"
cp "$work/build/bin/llama-server" "$dest/bin.tmp/llama-server"
rm -rf "$dest/bin"
mv "$dest/bin.tmp" "$dest/bin"
log "built $binary"
echo "$binary"
