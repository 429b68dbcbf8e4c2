#!/usr/bin/env bash
# Build Seaway's image (and, on a machine that cannot pull images, its base and a Prometheus
# image) without pulling anything:
#
#   bash compose/build-image.sh            # seaway:latest from a Debian base made here
#   bash compose/build-image.sh --pull     # seaway:latest FROM python:3.11-slim (needs a registry)
#
# Without --pull:
#   1. seaway-base:bookworm: Debian bookworm (python3, venv) made with debootstrap from the
#      Debian mirror this machine's apt uses, then `docker import`ed. Made once; kept.
#   2. a wheelhouse of Seaway and its dependencies, built on the host with pip (build/wheelhouse).
#   3. seaway:latest: compose/Dockerfile on that base, installing only from the wheelhouse
#      (pip --no-index: the build itself downloads nothing).
#   4. seaway-prometheus:local: the base with this machine's Debian prometheus and promtool,
#      for compose's PROMETHEUS_IMAGE where prom/prometheus cannot be pulled. compose/.env
#      names it, so `docker compose -f compose/two-regions.yml up` uses it without more ado.
# Prints each step's time and the image sizes. Needs docker, and root for debootstrap (which it
# installs from Debian when it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=${SEAWAY_BASE_IMAGE:-seaway-base:bookworm}
IMAGE=${SEAWAY_IMAGE:-seaway:latest}
PROMETHEUS_IMAGE=${SEAWAY_PROMETHEUS_IMAGE:-seaway-prometheus:local}
WHEELHOUSE=build/wheelhouse
pull=false
[ "${1:-}" = "--pull" ] && pull=true

step() { echo "build-image: $*" >&2; }
now() { date +%s.%N; }
took() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}s')" "$1" "$(now)"; }

if $pull; then
    t=$(now)
    docker build --force-rm -f compose/Dockerfile -t "$IMAGE" .
    step "$IMAGE built in $(took "$t") from python:3.11-slim"
    docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$IMAGE"
    exit 0
fi

debian_mirror() {
    # The first Debian archive this machine's apt is set up with (deb822 or one-line format).
    local m
    m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n 1)
    [ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
                        | awk '{print $2}' | grep -v security | head -n 1)
    [ -n "$m" ] || { echo "build-image: no Debian mirror found in /etc/apt/sources.list*" >&2; exit 1; }
    echo "$m"
}

apt_install() {
    # A fresh machine has neither debootstrap nor prometheus; Debian has both.
    [ "$(id -u)" = 0 ] || { echo "build-image: $1 is missing: apt-get install $1 (as root)" >&2; exit 1; }
    step "apt-get install $1"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" >/dev/null
}

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || apt_install debootstrap
    t=$(now)
    root=$(mktemp -d /tmp/seaway-rootfs.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    step "debootstrap bookworm from $(debian_mirror) into $root"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$root" "$(debian_mirror)" >/dev/null
    # What an image needs no more of: apt's lists and caches, docs and man pages.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
           "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
    tar -C "$root" -c . | docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
        -c 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
    rm -rf "$root"
    trap - EXIT
    step "$BASE_IMAGE imported in $(took "$t")"
fi

t=$(now)
rm -rf "$WHEELHOUSE"
python3 -m pip wheel -q --wheel-dir "$WHEELHOUSE" . 
step "wheelhouse ($(ls "$WHEELHOUSE" | wc -l) wheels) in $(took "$t")"

t=$(now)
docker build -q --force-rm -f compose/Dockerfile --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --build-arg "WHEELHOUSE=$WHEELHOUSE" -t "$IMAGE" . >/dev/null
step "$IMAGE built in $(took "$t") (base $BASE_IMAGE, wheelhouse $WHEELHOUSE)"

# Debian's prometheus package, unpacked (not installed) unless this machine has it already.
prometheus_bin=$(command -v prometheus || true)
promtool_bin=$(command -v promtool || true)
if [ -z "$prometheus_bin" ] || [ -z "$promtool_bin" ]; then
    unpacked=$(mktemp -d)
    if (cd "$unpacked" && apt-get download prometheus >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get download prometheus >/dev/null; }) 2>/dev/null; then
        dpkg-deb -x "$unpacked"/prometheus_*.deb "$unpacked/root"
        prometheus_bin=$unpacked/root/usr/bin/prometheus promtool_bin=$unpacked/root/usr/bin/promtool
        step "unpacked Debian's $(basename "$unpacked"/prometheus_*.deb)"
    fi
fi
if [ -x "$prometheus_bin" ] && [ -x "$promtool_bin" ]; then
    ctx=$(mktemp -d)
    cp "$prometheus_bin" "$promtool_bin" "$ctx/"
    printf 'ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY prometheus promtool /bin/\nRUN mkdir -p /prometheus && chown 65534:65534 /prometheus\nUSER 65534\nENTRYPOINT ["/bin/prometheus"]\n' > "$ctx/Dockerfile"
    docker build -q --force-rm --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$PROMETHEUS_IMAGE" "$ctx" >/dev/null
    rm -rf "$ctx"
    step "$PROMETHEUS_IMAGE built from Debian's prometheus $("$prometheus_bin" --version 2>&1 | head -n 1 | awk '{print $3}')"
    if [ -z "${SEAWAY_PROMETHEUS_IMAGE:-}" ]; then
        # Compose reads .env beside the compose file; the tests name their own images instead.
        printf '# Written by compose/build-image.sh: no image can be pulled here.\nPROMETHEUS_IMAGE=%s\n' \
            "$PROMETHEUS_IMAGE" > compose/.env
        step "compose/.env: PROMETHEUS_IMAGE=$PROMETHEUS_IMAGE"
    fi
else
    step "no prometheus package to be had: compose will pull prom/prometheus"
fi
[ -n "${unpacked:-}" ] && rm -rf "$unpacked"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^(${IMAGE%%:*}|${BASE_IMAGE%%:*}|${PROMETHEUS_IMAGE%%:*}):" || true
