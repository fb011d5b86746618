#!/usr/bin/env bash
# Installs the Debian packages deepinfer builds and tests with (only those missing): the build,
# and for the server's end-to-end tests Python's venv, Selenium and headless Chromium.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libutf8proc-dev libpcre2-dev libboost-dev clang-14 libclang-rt-14-dev clang-format time
          python3 python3-venv python3-jsonschema python3-selenium chromium chromium-driver)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "installing: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
