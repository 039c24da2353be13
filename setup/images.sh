#!/usr/bin/env bash
# Build every image of the stack: choose or bootstrap the base image, fetch the load generator's
# wheels, build the shared Apache base, then the Compose services. Docker's layer cache makes a
# second run take seconds. Extra arguments go to `docker compose` (e.g. -f compose/haproxy.yml).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
BASE_IMAGE=$(setup/base-image.sh)
export BASE_IMAGE
tag=${TIERBENCH_TAG:-0.1.0}
setup/wheelhouse.sh
echo "setup: building images from $BASE_IMAGE" >&2
docker build -q --force-rm -t "tierbench-apache:$tag" --build-arg BASE_IMAGE="$BASE_IMAGE" images/apache >/dev/null
docker compose "$@" build -q
# The network micro-benchmark tier (compose/net.yml, profile net): iperf 2, iperf3, sockperf.
docker build -q --force-rm -t "tierbench-net:$tag" --build-arg BASE_IMAGE="$BASE_IMAGE" images/net >/dev/null
# The disk-system benchmark (compose/disk.yml, profile disk): fio.
docker build -q --force-rm -t "tierbench-disk:$tag" --build-arg BASE_IMAGE="$BASE_IMAGE" images/disk >/dev/null
# The file-server tier (compose/fs.yml, profile fs): Samba, smbnetfs, dbench, fio, the CPU hog.
docker build -q --force-rm -t "tierbench-fs:$tag" --build-arg BASE_IMAGE="$BASE_IMAGE" images/fs >/dev/null
docker compose -f docker-compose.yml -f compose/haproxy.yml build -q proxy
# The application and database tiers (compose/app-db.yml): PHP-FPM and PostgreSQL.
docker compose -f docker-compose.yml -f compose/app-db.yml build -q app db
# The OrangeFS tier's image, when a source tarball is at hand (never downloads here: that is
# `make orangefs-image`).
setup/orangefs-image.sh --offline --optional
