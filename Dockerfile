# The image of cluster/rayjob.yaml: the sweeper and its pinned dependencies on CUDA 13.0, the CUDA
# version of PyPI's torch==2.13.0 Linux wheel (flash-attn is compiled here with the matching nvcc).
# Build and push it from the repository root (docs/cluster.md, "Run on a cluster"):
#   docker build -t $REGISTRY/sweeper:0.1.0 . && docker push $REGISTRY/sweeper:0.1.0
# The install steps are docs/cluster.md's, in its order: torch, then the project, then flash-attn.
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu22.04
FROM ${CUDA_IMAGE}

# Python 3.11 (the pinned numpy needs it; Ubuntu 22.04's python3 is 3.10), from Ubuntu's universe.
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends python3.11 python3.11-venv python3.11-dev git \
 && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /app
# torch first: from PyPI, its Linux wheel is the CUDA 13.0 build.
RUN pip install "torch==2.13.0"
# Then the project with the versions the tests passed with (a layer of its own: code edits below
# do not reinstall torch).
COPY pyproject.toml constraints.txt README.md ./
COPY sweeper sweeper
COPY trainables trainables
COPY search_spaces search_spaces
RUN pip install -c constraints.txt -e ".[gpu,tracking]"
# flash-attn last, compiled against the torch above: outside pip's build isolation, where its
# build could not import torch. MAX_JOBS bounds the compiler's memory (~4 GB a job).
ARG MAX_JOBS=8
RUN MAX_JOBS=${MAX_JOBS} pip install --no-build-isolation "flash-attn>=2.7"

# KubeRay starts Ray itself (`ray start` in the container's command); no ENTRYPOINT here.
