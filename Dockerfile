# StoreTune's service image: the REST service (`storetune serve`) with the device runner's tools.
#   docker build -t storetune .        (or: docker-compose build, see docker-compose.yml)
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The Debian packages of the device runner: fio, the mkfs tools, losetup/mount/blkid (util-linux), and a C
# compiler with liburing for the trace replayer (compiled on first use).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      fio e2fsprogs xfsprogs btrfs-progs util-linux gcc libc6-dev liburing-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY . /app

# The project with the `rl` extra (the DQN tuner). torch comes from PyPI as it is: PyTorch's own
# CPU-only wheel index (much smaller, no CUDA libraries) is not reachable from where this project is
# built, so plain pip is used; where that index is reachable, add
# `--extra-index-url https://download.pytorch.org/whl/cpu` to shrink the image by several GB.
RUN pip install '.[rl]'

# Where docker-compose.yml mounts the datasets (STORETUNE_DATA_DIRS).
RUN mkdir -p /data/datasets /data/shared

# The image runs as root on purpose: the device runner needs root for losetup, mkfs, mount and the
# I/O scheduler (and the container needs --privileged for loop devices). A non-root user is not possible
# for that runner; a deployment that only replays datasets could add one.
EXPOSE 8000

# python:slim has no curl: the health check uses Python's urllib (a non-2xx answer or no answer fails).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; r = urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4); sys.exit(0 if r.status == 200 else 1)"]

ENTRYPOINT ["storetune"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
