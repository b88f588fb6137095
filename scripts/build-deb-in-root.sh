#!/usr/bin/env bash
# Builds the package for another Debian release (`make deb-other`; docs/packaging.md):
# the same static build and scripts/build-deb.sh as `make deb`, run in a clean root of
# that release (scripts/debian-root.sh) that has its libfuse, libarchive, libcurl and
# liburing headers, with this machine's Swift toolchain, the source and SwiftPM's cache of
# the dependencies bound into it. So the binary is linked against that release's libraries,
# and dpkg-shlibdeps there names that release's packages (libfuse3-4, libcurl4t64…).
# The build has a scratch folder of its own, .build-static-debN, kept between runs.
#   scripts/build-deb-in-root.sh RELEASE VERSION OUTPUT.deb     (RELEASE: 12, 13)
set -euo pipefail
release=$1 version=$2 output=$3
source "$(dirname "$0")/debian-root.sh"
fail() { echo "build-deb-in-root: $*" >&2; exit 1; }

suite=$(debian_suite "$release")
# What the build needs there: the C libraries' headers, a C toolchain for clang to link with
# (crt files, libstdc++), dpkg-dev and binutils for build-deb.sh, git for SwiftPM, and the
# libraries the Swift toolchain itself links (swift-build: libcurl, libxml2, sqlite, ncurses).
root=$(debian_root "$suite" libfuse3-dev liburing-dev libarchive-dev libcurl4-openssl-dev pkg-config \
  gcc g++ libc6-dev binutils binutils-gold dpkg-dev git libxml2 libsqlite3-0 libncurses6 zlib1g libuuid1 tzdata) ||
  fail "no Debian $release ($suite) root"

# The toolchain: the folder above usr/bin/swift, bound at its own path.
swift_binary=$(readlink -f "$(command -v "${SWIFT:-swift}")") || fail "no Swift toolchain on PATH"
toolchain=${swift_binary%/usr/bin/*}
[[ -x $toolchain/usr/bin/swift-frontend ]] || fail "cannot find the toolchain of $swift_binary"
# SwiftPM's shared cache of the dependencies' repositories: the root resolves from it, as
# this machine does.
# A /tmp of its own, so that the kept root stays as it was made.
temporary=$(mktemp -d /tmp/containerfs-build-deb.XXXXXX)
trap 'rm -rf "$temporary"' EXIT
binds=("$toolchain" "$PWD" "$temporary:/tmp")
cache=${HOME:-/root}/.cache/org.swift.swiftpm
[[ -d $cache ]] && binds+=("$cache:/root/.cache/org.swift.swiftpm")

scratch=.build-static-deb$release
flags="-c release --static-swift-stdlib --scratch-path $scratch -Xlinker -z -Xlinker now ${BUILD_FLAGS:-}"
# The dates and the commit of the package come from git here (the root has no .git of
# this checkout's worktree).
export IN_ROOT_ENV="SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) CONTAINERFS_COMMIT=$(git rev-parse --short HEAD)"
echo "building $output in $root (Debian $release), Swift from $toolchain"
in_debian_root "$root" "
  export PATH=$toolchain/usr/bin:\$PATH
  cd '$PWD'
  swift build $flags
  swift build $flags --product generate-manual
  scripts/build-deb.sh $scratch '$version' '$output'
" "${binds[@]}" || fail "the build in the Debian $release root failed"
