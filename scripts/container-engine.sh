# Sourced by scripts/image.sh and scripts/image-test.sh: sets `engine` to podman or
# docker, whichever is installed and works (`ENGINE=docker` chooses), and, for podman,
# `CONTAINERS_CONF` to deploy/podman-containers.conf unless one is set (podman inside a
# container: no systemd for cgroups, no rlimits to raise).
engine=${ENGINE:-}
if [ -z "$engine" ]; then
  if command -v podman >/dev/null; then
    engine=podman
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    engine=docker
  else
    echo "$(basename "$0"): neither podman nor a running docker is installed" >&2
    exit 1
  fi
fi
if [ "$engine" = podman ]; then
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$(pwd)/deploy/podman-containers.conf}
fi
