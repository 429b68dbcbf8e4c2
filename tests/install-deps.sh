#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine (run as root):
# kcat and prometheus from Debian, the Python package with its test extra, and kafkajs from npm.
# Each step is skipped when its result is already there.
set -euo pipefail

cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

apt_packages=()
command -v kcat >/dev/null 2>&1 || apt_packages+=(kcat)
command -v node >/dev/null 2>&1 || apt_packages+=(nodejs)
command -v npm >/dev/null 2>&1 || apt_packages+=(npm)
command -v prometheus >/dev/null 2>&1 || apt_packages+=(prometheus)
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
    echo "install-deps: npm ci (tests/js)"
    (cd tests/js && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
