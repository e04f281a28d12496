# The LoopDrive image: the suite, its command line and Ray, for every service of docker-compose.yml
# except carla (its own image) and critic (an OpenAI-compatible LLM server).
#   docker build -t loopdrive .                                   # CPU torch
#   docker build -t loopdrive --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
FROM python:3.11-slim

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HF_HUB_OFFLINE=1 RAY_AUTH_MODE=disabled \
    NUMBA_CACHE_DIR=/tmp/numba
RUN apt-get update && apt-get install -y --no-install-recommends curl procps && rm -rf /var/lib/apt/lists/*
WORKDIR /app

# torch first, pinned (constraints.txt keeps every later step on it)
COPY constraints.txt pyproject.toml README.md ./
RUN pip install torch==2.13.0 --index-url ${TORCH_INDEX}
COPY . .
RUN pip install -c constraints.txt '.[carla]'

CMD ["loopdrive", "--help"]
