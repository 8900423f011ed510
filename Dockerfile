# Dots3 NOTE Studio on a GPU host: vLLM's own image plus the studio (README "Deploy").
#   docker build -t dots3-studio .
#   docker run --gpus all --ipc=host -p 7860:7860 -v /models:/models:ro dots3-studio \
#       --model /models/Dots3-NOTE --engine inprocess --tensor-parallel-size 8
# Arguments after the image name replace CMD and go to app.py: every `vllm serve` engine flag
# and the studio's own (`--endpoint`, `--seq`, …). With none, the studio starts in preview mode.

# The same vLLM as requirements.txt (tests/deploy checks it). The image already has vLLM and its
# CUDA torch; we add FFmpeg and the studio's other dependencies and keep vLLM and torch as shipped.
FROM vllm/vllm-openai:v0.32.0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
USER 0

# FFmpeg: torchcodec (vLLM's video and audio decoding) loads its shared libraries. Not pinned:
# the base image's Ubuntu release decides the version, and its security updates should apply.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ffmpeg \
    && rm -rf /var/lib/apt/lists/*

# The runtime part of requirements.txt (everything above its "# tests" line), installed with
# vLLM, torch, torchvision and torchaudio constrained to the versions the image ships, so no
# dependency can replace them (pip fails the build instead).
COPY requirements.txt /tmp/requirements.txt
RUN sed '/^# tests/,$d' /tmp/requirements.txt > /tmp/requirements-runtime.txt \
    && python3 -m pip list --format=freeze \
       | grep -iE '^(vllm|torch|torchvision|torchaudio)==' > /tmp/image-constraints.txt \
    && PIP_ROOT_USER_ACTION=ignore python3 -m pip install --no-cache-dir \
       -c /tmp/image-constraints.txt -r /tmp/requirements-runtime.txt \
    && rm /tmp/requirements.txt /tmp/requirements-runtime.txt /tmp/image-constraints.txt

# Non-root, UID 1000 (what Hugging Face Docker Spaces run as). Newer CUDA base images (Ubuntu
# 24.04) already have a user 1000, "ubuntu": it gives way to ours.
RUN if getent passwd 1000 > /dev/null; then userdel --remove "$(getent passwd 1000 | cut -d: -f1)"; fi \
    && useradd --create-home --uid 1000 --shell /bin/bash studio

# The app: app.py, its package and its assets (the preview profile, the example media). Owned
# by root and read-only for the app; it writes only to /tmp and its home (model and HF caches).
WORKDIR /app
COPY app.py ./
COPY dots3_demo ./dots3_demo
COPY assets ./assets

USER 1000:1000
ENV GRADIO_ANALYTICS_ENABLED=False \
    PYTHONUNBUFFERED=1
EXPOSE 7860

# /readyz: 200 in preview mode or once the engine is ready, 503 while it loads or after it failed
# (its first call starts an idle engine, so the model loads now rather than on the first message).
# Loading a large checkpoint takes long: failures in the first 30 minutes do not count
# (override with `docker run --health-start-period …`). No proxy: HTTP_PROXY must not catch it.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30m --retries=3 \
    CMD ["python3", "-c", "import urllib.request as u; u.build_opener(u.ProxyHandler({})).open('http://127.0.0.1:7860/readyz', timeout=8)"]

ENTRYPOINT ["python3", "app.py", "--host", "0.0.0.0", "--port", "7860"]
CMD []
