#!/usr/bin/env bash
# A simulated cluster on this machine: N node containers, each with its own Docker engine and
# SSH server, on the bridge network tierbench-lab (198.18.16.0/24); node n is
# root@198.18.16.(10+n), Docker context tierbench-node<n>. (--privileged fails on some hosts: the
# flags below are the narrowest set measured to run dockerd inside a container. Disk systems on a
# node add /dev/loop-control and the device rule 'b 7:* rmw': losetup gets a free loop device
# from the kernel and tierbench makes its /dev/loopN node there with mknod, since a container's
# /dev has none. Loop devices are the kernel's, shared with the host and the other nodes:
# tierbench names a node's images tierbench-disk@NODE-... and only ever detaches its own.)
#
#   setup/lab.sh up N     start (or complete) an N-node lab, ship the tierbench images into every
#                         node, write lab/cluster.yml (idempotent; extra nodes of a bigger lab
#                         are removed)
#   setup/lab.sh down     remove the nodes, their volumes, the network, the contexts and the
#                         SSH include (the key pair in lab/ is kept)
#   setup/lab.sh status   the nodes, whether sshd and dockerd answer, memory and images
#
# State lives in lab/ (git-ignored; TIERBENCH_LAB_DIR overrides): the SSH key pair (made once),
# known_hosts (the nodes' host keys, read with docker exec: no trust on first use), ssh_config
# and cluster.yml. Docker's ssh helper reads no per-context SSH options, so
# /etc/ssh/ssh_config.d/tierbench-lab.conf includes lab/ssh_config, whose only block is
# `Host 198.18.16.*`: nothing changes for any other host.
# Settings: TIERBENCH_TAG (0.1.0), LAB_IMAGES (images to ship, default every tierbench image of
# the tag; `none`: none, `tierbench run --cluster` ships what each node needs), LAB_NODE_MEM_MB (memory to keep free per node, 512), BASE_IMAGE.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

NET=tierbench-lab
SUBNET=198.18.16.0/24
PREFIX=198.18.16
LABEL=org.tierbench.lab
TAG=${TIERBENCH_TAG:-0.1.0}
NODE_IMAGE=tierbench-node:$TAG
LAB=${TIERBENCH_LAB_DIR:-$here/lab}
DROPIN=/etc/ssh/ssh_config.d/tierbench-lab.conf
MAX_NODES=64
NODE_MEM_MB=${LAB_NODE_MEM_MB:-512}

say() { printf 'lab: %s\n' "$*" >&2; }
die() { printf 'lab: %s\n' "$*" >&2; exit 1; }
usage() { echo "usage: $0 up N | down | status" >&2; exit 2; }

addr() { echo "$PREFIX.$((10 + $1))"; }
lab_nodes() {  # names of this lab's node containers, any state, sorted by number
  docker ps -a --filter "label=$LABEL" --format '{{.Names}}' | grep -E '^tierbench-node[0-9]+$' \
    | sort -V || true
}
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
human() { numfmt --to=si --suffix=B "$1" 2>/dev/null || echo "${1} bytes"; }

require_host() {
  [ "$(id -u)" = 0 ] || die "the lab needs root (it runs node containers with all capabilities but one and writes $DROPIN)"
  command -v docker >/dev/null && docker info >/dev/null 2>&1 \
    || die "no Docker engine answers here: run setup/docker.sh (or make setup) first"
  docker compose version >/dev/null 2>&1 || die "Docker Compose v2 is missing: run setup/docker.sh (or make setup) first"
  command -v ssh >/dev/null && command -v ssh-keygen >/dev/null \
    || die "the OpenSSH client is missing: install openssh-client"
  grep -qE '^[[:space:]]*Include[[:space:]]+/etc/ssh/ssh_config\.d/\*\.conf' /etc/ssh/ssh_config 2>/dev/null \
    || die "/etc/ssh/ssh_config does not include /etc/ssh/ssh_config.d/*.conf, so docker's ssh helper could not find the lab's key: add 'Include /etc/ssh/ssh_config.d/*.conf' at its top"
}

# Images to ship: LAB_IMAGES, else every tierbench image of the tag but the node image itself and
# the build-only bases (their layers travel inside the images built on them).
ship_list() {
  if [ "${LAB_IMAGES:-}" = none ]; then return; fi
  if [ -n "${LAB_IMAGES:-}" ]; then printf '%s\n' $LAB_IMAGES; return; fi
  docker images --format '{{.Repository}}:{{.Tag}}' \
    | grep -E "^tierbench-[a-z0-9-]+:$TAG\$" \
    | grep -vE '^tierbench-(node|apache|base):' | sort || true
}

image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
image_size() { docker image inspect --format '{{.Size}}' "$1" 2>/dev/null || echo 0; }

check_resources() {  # $1: how many nodes will be created
  local new=$1 images bytes=0 img root avail mem need_disk need_mem
  [ "$new" -gt 0 ] || return 0
  images=$(ship_list)
  for img in $images; do bytes=$((bytes + $(image_size "$img"))); done
  # each node: its engine's own files (about 300 MB) + the images unpacked (shared layers counted
  # once per image: an upper bound), and 2 GiB left for the host
  need_disk=$(( new * (bytes + 300 * 1024 * 1024) + 2 * 1024 * 1024 * 1024 ))
  root=$(docker info --format '{{.DockerRootDir}}')
  avail=$(df -PB1 "$root" | awk 'NR == 2 {print $4}')
  [ "$avail" -ge "$need_disk" ] \
    || die "too little disk for $new new node(s): they need about $(human "$need_disk") in $root (images $(human "$bytes") per node, 2 GiB kept for the host) and $(human "$avail") is free"
  mem=$(awk '/^MemAvailable:/ {printf "%.0f\n", $2 * 1024}' /proc/meminfo)
  need_mem=$(( new * NODE_MEM_MB * 1024 * 1024 ))
  [ "$mem" -ge "$need_mem" ] \
    || die "too little memory for $new new node(s): they need about $(human "$need_mem") ($NODE_MEM_MB MB each, LAB_NODE_MEM_MB) and $(human "$mem") is available"
}

build_node_image() {
  local base mirror
  base=$(setup/base-image.sh)
  # with a snapshot, Compose comes from the snapshot's trixie (the base's own apt sources)
  mirror=
  [ -n "${DEBIAN_SNAPSHOT:-}" ] || mirror=$(setup/apt-mirror.sh 2>/dev/null || true)
  say "building $NODE_IMAGE from $base (seconds when nothing changed)"
  mkdir -p "$LAB"; chmod 700 "$LAB"
  setup/docker-build.sh -q -t "$NODE_IMAGE" --build-arg BASE_IMAGE="$base" \
    --build-arg DEBIAN_MIRROR="$mirror" --label org.tierbench.base="$base" \
    --label org.tierbench.debian-snapshot="${DEBIAN_SNAPSHOT:-}" images/node >"$LAB/node-build.log" 2>&1 \
    || { tail -n 20 "$LAB/node-build.log" >&2; die "building $NODE_IMAGE failed (log: $LAB/node-build.log)"; }
}

ensure_key() {
  mkdir -p "$LAB"; chmod 700 "$LAB"
  if [ ! -f "$LAB/id_ed25519" ]; then
    ssh-keygen -q -t ed25519 -N '' -C "tierbench-lab@$(hostname)" -f "$LAB/id_ed25519"
    say "made the lab's SSH key pair $LAB/id_ed25519"
  fi
}

ensure_network() {
  local subnet
  if subnet=$(docker network inspect --format '{{range .IPAM.Config}}{{.Subnet}}{{end}}' "$NET" 2>/dev/null); then
    [ "$subnet" = "$SUBNET" ] || die "a network $NET exists with subnet $subnet, not $SUBNET: remove it (setup/lab.sh down)"
  else
    docker network create --driver bridge --subnet "$SUBNET" --label "$LABEL=1" "$NET" >/dev/null
    say "created network $NET ($SUBNET)"
  fi
}

start_node() {  # $1: node number
  local n=$1 name=tierbench-node$1 state
  state=$(docker inspect --format '{{.State.Status}}' "$name" 2>/dev/null || true)
  case $state in
    running) ;;
    "")
      docker run -d --name "$name" --hostname "node$n" --label "$LABEL=1" \
        --cap-add ALL --cap-drop SYS_RESOURCE \
        --security-opt apparmor=unconfined --security-opt seccomp=unconfined \
        --device /dev/fuse --device /dev/loop-control --device-cgroup-rule 'b 7:* rmw' \
        -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run \
        -v "$name-docker:/var/lib/docker" --network "$NET" --ip "$(addr "$n")" \
        -e AUTHORIZED_KEYS="$(cat "$LAB/id_ed25519.pub")" "$NODE_IMAGE" >/dev/null
      say "started $name ($(addr "$n"))" ;;
    *)
      docker start "$name" >/dev/null
      say "restarted $name ($(addr "$n"), was $state)" ;;
  esac
}

wait_healthy() {  # $1: node number; runs the image's health probe (sshd and dockerd answer)
  local name=tierbench-node$1
  for _ in $(seq 1 120); do
    docker exec "$name" /usr/local/bin/node-start --healthcheck >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  die "$name did not become ready (sshd and dockerd) within 60 s: see docker logs $name"
}

write_ssh_files() {  # $1: N
  local n key
  : >"$LAB/known_hosts.new"
  for n in $(seq 1 "$1"); do
    docker exec -i "tierbench-node$n" sh -c 'cat >/root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys' \
      <"$LAB/id_ed25519.pub"
    key=$(docker exec "tierbench-node$n" cat /etc/ssh/ssh_host_ed25519_key.pub | awk '{print $1, $2}')
    echo "$(addr "$n") $key" >>"$LAB/known_hosts.new"
  done
  mv "$LAB/known_hosts.new" "$LAB/known_hosts"
  cat >"$LAB/ssh_config" <<EOF
# Written by setup/lab.sh: how to reach the lab's nodes. tierbench uses it with ssh -F (the
# cluster file's ssh_config); docker's ssh helper reads it through $DROPIN.
# Host keys come from the nodes themselves (docker exec), so checking stays strict.
Host $PREFIX.*
  User root
  IdentityFile "$LAB/id_ed25519"
  IdentitiesOnly yes
  UserKnownHostsFile "$LAB/known_hosts"
  StrictHostKeyChecking yes
  ConnectTimeout 10
  LogLevel ERROR
EOF
  printf '# Written by %s/setup/lab.sh (removed by lab down): the lab nodes %s.*\nInclude "%s"\n' \
    "$here" "$PREFIX" "$LAB/ssh_config" >"$DROPIN"
}

ensure_context() {  # $1: node number
  local ctx=tierbench-node$1 want="ssh://root@$(addr "$1")" have
  have=$(docker context inspect --format '{{.Endpoints.docker.Host}}' "$ctx" 2>/dev/null || true)
  if [ -z "$have" ]; then
    docker context create "$ctx" --description "tierbench lab node$1" --docker "host=$want" >/dev/null 2>&1
    say "created Docker context $ctx ($want)"
  elif [ "$have" != "$want" ]; then
    docker context update "$ctx" --docker "host=$want" >/dev/null 2>&1
  fi
}

ship_images() {  # $1: node number; ships the images whose ID differs on the node
  local ctx=tierbench-node$1 img want missing=() bytes=0 t0 t1 sent
  for img in $(ship_list); do
    want=$(image_id "$img")
    [ -n "$want" ] || die "LAB_IMAGES names $img, which is not an image here: make images"
    if [ "$(docker --context "$ctx" image inspect --format '{{.Id}}' "$img" 2>/dev/null || true)" != "$want" ]; then
      missing+=("$img"); bytes=$((bytes + $(image_size "$img")))
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then say "node$1: images up to date"; return 0; fi
  say "node$1: shipping ${#missing[@]} image(s) ($(human "$bytes") unpacked): ${missing[*]}"
  t0=$(date +%s.%N)
  # One stream per node, so layers shared between images travel once. dd reports progress.
  docker save "${missing[@]}" \
    | dd bs=1M iflag=fullblock status=progress 2>"$LAB/ship-node$1.progress" \
    | docker --context "$ctx" load -q >/dev/null &
  local pid=$! ticks=0
  while kill -0 "$pid" 2>/dev/null; do  # progress: a live line on a terminal, else every 10 s
    sleep 1; ticks=$((ticks + 1))
    sent=$(tr '\r' '\n' <"$LAB/ship-node$1.progress" | grep copied | tail -n 1 | cut -d' ' -f1 || true)
    [ -n "$sent" ] || continue
    if [ -t 2 ]; then printf '\rlab: node%s: %s sent ' "$1" "$(human "$sent")" >&2
    elif [ $((ticks % 10)) = 0 ]; then say "node$1: $(human "$sent") sent"; fi
  done
  if [ -t 2 ]; then printf '\n' >&2; fi
  wait "$pid" || die "node$1: shipping the images failed (docker save | docker --context $ctx load)"
  t1=$(date +%s.%N)
  sent=$(tr '\r' '\n' <"$LAB/ship-node$1.progress" | grep copied | tail -n 1 | cut -d' ' -f1)
  rm -f "$LAB/ship-node$1.progress"
  for img in "${missing[@]}"; do
    [ "$(docker --context "$ctx" image inspect --format '{{.Id}}' "$img" 2>/dev/null || true)" = "$(image_id "$img")" ] \
      || die "node$1: $img is not on the node after loading it"
  done
  say "node$1: shipped $(human "${sent:-0}") in $(elapsed "$t0" "$t1") s"
}

# Roles: node1 drives the load; the servers go on the others (see cluster.example.yml).
write_cluster() {  # $1: N
  local n=$1 i client=node1 proxy web db pfs_io
  case $n in
    1) proxy=node1 web=node1 db=node1 ;;
    2) proxy=node2 web=node2 db=node2 ;;
    3) proxy=node2 web=node3 db=node3 ;;
    *) proxy=node2 web=node3 db=node4 ;;
  esac
  pfs_io=$db
  for i in $(seq 5 "$n"); do pfs_io="$pfs_io, node$i"; done
  {
    echo "# Written by setup/lab.sh up $n: the lab cluster on this machine (tierbench/placement/clusterfile.py schema)."
    echo "# Each node is a container with its own Docker engine and sshd; eth0 is its NIC."
    echo "version: 1"
    echo "ssh_config: ssh_config"
    echo "clock_bound_ms: 50"
    echo "# eth0 carries both SSH and the tiers' traffic: modes change it, under the rollback guard"
    echo "allow_management_changes: true"
    echo "rollback_timeout_s: 30"
    echo "nodes:"
    for i in $(seq 1 "$n"); do
      echo "  - name: node$i"
      echo "    address: $(addr "$i")"
      echo "    user: root"
      echo "    context: tierbench-node$i"
      echo "    interfaces:"
      echo "      - {name: eth0, address: $(addr "$i")/24}"
    done
    echo "roles:"
    echo "  loadgen: $client"
    echo "  loadgen_workers: [$client]"
    echo "  proxy: $proxy"
    echo "  web: $web"
    echo "  app: $web"
    echo "  db: $db"
    echo "  pfs_meta: $db"
    echo "  pfs_io: [$pfs_io]"
    echo "  pfs_clients: [$client]"
    echo "  net_server: $web"
    echo "  net_client: $client"
    echo "  fs_server: $proxy"
    # the file-server clients (fs.clients) go round two nodes where there are three or more
    if [ "$n" -ge 3 ]; then echo "  fs_client: [$client, $web]"; else echo "  fs_client: $client"; fi
    echo "  disk: $web"
  } >"$LAB/cluster.yml.new"
  mv "$LAB/cluster.yml.new" "$LAB/cluster.yml"
}

remove_node() {  # $1: container name
  local name=$1
  docker rm -f "$name" >/dev/null
  docker volume rm "$name-docker" >/dev/null 2>&1 || true
  docker context rm -f "$name" >/dev/null 2>&1 || true
  say "removed $name"
}

cmd_up() {
  local n=${1:-} name num new=0 t0 i
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le $MAX_NODES ] \
    || die "NODES must be a whole number from 1 to $MAX_NODES, got '${n}'"
  t0=$(date +%s.%N)
  require_host
  for i in $(seq 1 "$n"); do
    docker inspect "tierbench-node$i" >/dev/null 2>&1 || new=$((new + 1))
  done
  check_resources "$new"
  build_node_image
  ensure_key
  for name in $(lab_nodes); do  # a bigger lab before: keep exactly N nodes
    num=${name#tierbench-node}
    [ "$num" -le "$n" ] || remove_node "$name"
  done
  ensure_network
  for i in $(seq 1 "$n"); do start_node "$i"; done
  for i in $(seq 1 "$n"); do wait_healthy "$i"; done
  write_ssh_files "$n"
  for i in $(seq 1 "$n"); do
    ensure_context "$i"
    docker --context "tierbench-node$i" version --format '{{.Server.Version}}' >/dev/null 2>&1 \
      || die "node$i: docker --context tierbench-node$i cannot reach the node's engine over SSH (ssh -F $LAB/ssh_config root@$(addr "$i") to see why)"
  done
  for i in $(seq 1 "$n"); do ship_images "$i"; done
  write_cluster "$n"
  say "$n node(s) up in $(elapsed "$t0" "$(date +%s.%N)") s; cluster file $LAB/cluster.yml"
  if [ -x .venv/bin/python ]; then
    .venv/bin/tierbench nodes check "$LAB/cluster.yml"
  fi
}

cmd_down() {
  local name ctx
  for name in $(lab_nodes); do remove_node "$name"; done
  # contexts and volumes left behind by a node removed by hand
  for ctx in $(docker context ls --format '{{.Name}}' | grep -E '^tierbench-node[0-9]+$' || true); do
    docker context rm -f "$ctx" >/dev/null && say "removed context $ctx"
  done
  for name in $(docker volume ls -q | grep -E '^tierbench-node[0-9]+-docker$' || true); do
    docker volume rm "$name" >/dev/null && say "removed volume $name"
  done
  if docker network inspect "$NET" >/dev/null 2>&1; then
    docker network rm "$NET" >/dev/null && say "removed network $NET"
  fi
  rm -f "$DROPIN" "$LAB/known_hosts" "$LAB/ssh_config" "$LAB/cluster.yml"
  say "lab down (the key pair in $LAB is kept for the next lab)"
}

cmd_status() {
  local names name n
  names=$(lab_nodes)
  if [ -z "$names" ]; then echo "lab: no nodes (make lab-up NODES=N)"; return 0; fi
  printf '%-16s %-14s %-10s %-9s %-8s %s\n' NODE ADDRESS STATE READY MEMORY IMAGES
  for name in $names; do
    n=${name#tierbench-node}
    printf '%-16s %-14s %-10s %-9s %-8s %s\n' "$name" "$(addr "$n")" \
      "$(docker inspect --format '{{.State.Status}}' "$name")" \
      "$(docker exec "$name" /usr/local/bin/node-start --healthcheck >/dev/null 2>&1 && echo ready || echo no)" \
      "$(docker stats --no-stream --format '{{.MemUsage}}' "$name" | cut -d/ -f1 | tr -d ' ')" \
      "$(docker exec "$name" docker images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | paste -sd' ' -)"
  done
  [ -f "$LAB/cluster.yml" ] && echo "cluster file: $LAB/cluster.yml"
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) usage ;;
esac
