# Dots3 NOTE Studio on a GPU host (first draft; hardened in the deployment issue).
#   docker build -t dots3-studio .
#   docker run --gpus all -p 7860:7860 -v /models:/models dots3-studio --model /models/Dots3-NOTE
# Same vLLM as requirements.txt (0.32.0); the image already carries vLLM's CUDA torch.
FROM vllm/vllm-openai:v0.32.0

USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends ffmpeg \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt

COPY app.py ./
COPY dots3_demo ./dots3_demo
COPY assets ./assets

RUN useradd --create-home --uid 1000 studio && chown -R studio /app
USER studio
ENV GRADIO_ANALYTICS_ENABLED=False
EXPOSE 7860
# Any further arguments (engine flags) pass straight through to app.py.
ENTRYPOINT ["python3", "app.py", "--host", "0.0.0.0", "--port", "7860"]
