#!/usr/bin/env bash
# Install what the tests need (Debian FFmpeg for torchcodec, Debian Chromium for the browser
# tests, the Python requirements), then run the whole suite. README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v ffmpeg >/dev/null 2>&1 || need_apt+=(ffmpeg)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v espeak-ng >/dev/null 2>&1 || need_apt+=(espeak-ng)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" fonts-dejavu-core fonts-noto-color-emoji
fi

python -m pip install -q -r requirements.txt

export GRADIO_ANALYTICS_ENABLED=False
python -m pytest -q "$@"
