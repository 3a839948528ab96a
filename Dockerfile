# StoreTune's image: the REST service (`storetune serve`) and, from the same image, the Ray head and worker
# nodes of docker-compose.yml, with the device runner's tools.
#   docker build --network host -t storetune .         (or: docker-compose build)
# BASE_IMAGE: any Debian bookworm image with Python 3.10+ and its venv module. The official python image by
# default; `make test-deploy`, where no registry is reachable, builds on a local debootstrap of bookworm
# (deploy/base-image.sh).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# EXTRAS: the optional parts installed (pyproject.toml): all by default; service,ray leaves out the DQN tuner's
# torch, several GB.
ARG EXTRAS=all

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/storetune \
    PATH=/opt/storetune/bin:$PATH

# The Debian packages of the device runner: fio, the mkfs tools, losetup/mount/blkid (util-linux), and a C
# compiler with liburing for the trace replayer (compiled on first use).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      fio e2fsprogs xfsprogs btrfs-progs util-linux gcc libc6-dev liburing-dev \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/storetune

# torch comes from PyPI as it is: PyTorch's own CPU-only wheel index (much smaller, no CUDA libraries) is not
# reachable from where this project is built; where it is, add
# `--extra-index-url https://download.pytorch.org/whl/cpu` to shrink the image by several GB.
# The source is installed and removed, but for StoreTune's own datasets (in /app/datasets): a checkout in the
# working folder would shadow the installed package (its storetune/ folder holds only the namespace's top).
COPY . /src
RUN pip install "/src${EXTRAS:+[$EXTRAS]}" \
 && mkdir -p /app && mv /src/datasets /app/datasets && rm -rf /src
WORKDIR /app

# Where docker-compose.yml mounts the datasets (STORETUNE_DATA_DIRS).
RUN mkdir -p /data/datasets /data/shared

# The image runs as root on purpose: the device runner needs root for losetup, mkfs, mount and the
# I/O scheduler (and the container needs --privileged for loop devices). A non-root user is not possible
# for that runner; a deployment that only replays datasets could add one.
EXPOSE 8000

# The health check uses Python's urllib (python:slim has no curl): a non-2xx answer or no answer fails.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; r = urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4); sys.exit(0 if r.status == 200 else 1)"]

ENTRYPOINT ["storetune"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
