#!/bin/sh
# Installs the Debian packages the training tools need (no PyPI). Run as root or via sudo.
# Usage: sh tools/train/setup.sh
set -eu

packages="python3-torch python3-numpy python3-regex libopenblas0-pthread"
missing=""
for pkg in $packages; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $pkg"
    fi
done

if [ -z "$missing" ]; then
    echo "setup.sh: all packages present ($packages)"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    apt_get="apt-get"
else
    apt_get="sudo apt-get"
fi
echo "setup.sh: installing$missing"
$apt_get update
# shellcheck disable=SC2086  # word splitting of the package list is intended
DEBIAN_FRONTEND=noninteractive $apt_get install -y --no-install-recommends $missing
