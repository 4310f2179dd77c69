#!/usr/bin/env bash
# Installs the Debian packages pkv needs that are missing. Extra package names may be given.
set -euo pipefail
pkgs=(meson ninja-build pkg-config g++ libxxhash-dev nlohmann-json3-dev libssl-dev libhiredis-dev libzmq3-dev libmsgpack-dev libucx-dev python3 "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
echo "pkv: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
