#!/usr/bin/env bash
# Builds libfuse's own fast example, passthrough_hp (C++, low-level API), from Debian's
# source package of the libfuse installed here, so that the bench measures the peer the
# speed goals name in the same run. Prints the binary's path; builds only once.
#
#   bench/passthrough_hp.sh [DIR]      (default DIR: /var/tmp/cfs-bench-peers)
set -euo pipefail

dir=${1:-/var/tmp/cfs-bench-peers}
version=$(dpkg-query -W -f='${Version}' libfuse3-dev 2>/dev/null) ||
  { echo "passthrough_hp: libfuse3-dev is not installed (scripts/install-deps.sh)" >&2; exit 1; }
binary="$dir/passthrough_hp-$version"
if [[ -x "$binary" ]]; then echo "$binary"; exit 0; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The machine's apt sources may list binary packages only: fetch the source through a
# private list of deb-src entries, without touching the system's apt configuration.
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
echo "deb-src http://deb.debian.org/debian $codename main" >"$work/sources.list"
mkdir -p "$work/lists/partial"
apt=(apt-get -qq -o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
     -o Dir::State::Lists="$work/lists" -o APT::Sandbox::User=root)
if ! "${apt[@]}" update >"$work/log" 2>&1 ||
   ! (cd "$work" && "${apt[@]}" source --download-only "fuse3=$version" >>"$work/log" 2>&1); then
  echo "passthrough_hp: cannot fetch Debian's fuse3 $version source package:" >&2
  tail -n 3 "$work/log" >&2
  exit 1
fi
tar -C "$work" -xf "$(ls "$work"/fuse3_*.orig.tar.* | grep -v "\.asc$")"
example=$(echo "$work"/fuse-*/example)
mkdir -p "$dir"
# The defines are what libfuse's own build (meson) finds on Linux.
c++ -O2 -std=c++17 -DHAVE_UTIMENSAT -DHAVE_POSIX_FALLOCATE -DHAVE_SETXATTR \
  $(pkg-config --cflags fuse3) "$example/passthrough_hp.cc" -o "$binary.tmp" \
  $(pkg-config --libs fuse3) -lpthread
mv "$binary.tmp" "$binary"
echo "$binary"
