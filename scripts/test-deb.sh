#!/usr/bin/env bash
# Tests of a Debian package (`make test`, after the Swift tests, once for the package of
# each Debian release; docs/packaging.md):
#  1. the package: its control data (the dependencies of its release), its file list, a
#     binary with no Swift in it, lintian;
#  2. in a clean root of the package's Debian release made with debootstrap (no Swift
#     there): apt installs it with its dependencies; --version, create, verify, the man
#     pages and bash completion work; in the root's own mount namespace, with /dev/fuse, a
#     mount serves the container (a denial, audit, unmount); apt removes it;
#  3. on this machine, for the package of this machine's release: the package installed,
#     `mount -t containerfs` through the installed helper and binary (a denial, audit,
#     unmount), then the Smoke suite with the installed binary; the package is removed
#     again unless it was installed before.
# The roots are made once per machine (scripts/debian-root.sh) and apt's downloads kept in
# .build-deb/, so a second run takes seconds. Prints `N passed, M failed`; exits 1 on any
# failure.
#   scripts/test-deb.sh containerfs_VERSION+debN_ARCH.deb
set -uo pipefail
deb=$(realpath "${1:?usage: scripts/test-deb.sh PACKAGE.deb}")
swift=${SWIFT:-swift}
source "$(dirname "$0")/debian-root.sh"
version=$(sed -n 's/^let containerfsVersion = "\(.*\)"$/\1/p' Sources/containerfs/Version.swift)
arch=$(dpkg --print-architecture)
host_release=$(. /etc/os-release && echo "$VERSION_ID")
# The release the package is for, from its version (0.1.0+deb13).
release=$(dpkg-deb --field "$deb" Version 2>/dev/null | sed -n 's/.*+deb\([0-9]*\)$/\1/p')
cache=$(pwd)/.build-deb
work=$(mktemp -d /tmp/containerfs-test-deb.XXXXXX)
chroot=$work/root                         # this run's copy of the release's root
archives=$cache/apt-archives-deb$release  # the debs apt downloads inside it, kept between runs
passed=0 failed=0
trap 'rm -rf "$work"' EXIT

check() {  # check NAME COMMAND…: runs COMMAND, counts it, shows its output on failure
  local name=$1 output
  shift
  if output=$("$@" 2>&1); then
    passed=$((passed + 1)); echo "ok   $name"
  else
    failed=$((failed + 1)); echo "FAIL $name"; printf '%s\n' "$output" | tail -20 | sed 's/^/     /'
  fi
}
finish() {
  echo "$passed passed, $failed failed"
  ((failed == 0)) || exit 1
  exit 0
}

echo "== the package: $(basename "$deb")"
[[ -f $deb ]] || { echo "FAIL no package at $deb: run 'make deb' (or 'make deb-other')"; failed=1; finish; }
suite=$(debian_suite "$release") || { echo "FAIL its version names no known Debian release"; failed=1; finish; }
field() { dpkg-deb --field "$deb" "$1"; }
check "its name is containerfs_${version}+deb${release}_$arch.deb" test "$(basename "$deb")" = "containerfs_${version}+deb${release}_$arch.deb"
check "control: Package, Version (Version.swift, +deb$release), Architecture" \
  test "$(field Package) $(field Version) $(field Architecture)" = "containerfs $version+deb$release $arch"
described() { [[ $(field Section) == utils && $(field Priority) == optional && -n $(field Maintainer) && $(field Description) == *FUSE* ]]; }
check "control: Section utils, Priority optional, a Maintainer, a Description" described
depends=$(field Depends)
echo "     Depends: $depends"
# Each release's names: Debian 13 has libfuse 3.17 as libfuse3-4, and the 64-bit time_t
# libraries as …t64.
case $release in
12) libraries="libfuse3-3 libarchive13 libcurl4" ;;
*) libraries="libfuse3-4 libarchive13t64 libcurl4t64" ;;
esac
for package in libc6 $libraries liburing2 fuse3 bubblewrap; do
  check "depends on $package" grep -qE "(^|, )$package( |,|$)" <<<"$depends"
done
no_swift_depends() { ! grep -i swift <<<"$depends"; }
check "depends on nothing of Swift" no_swift_depends
sized() { local size; size=$(field Installed-Size); [[ $size =~ ^[0-9]+$ ]] && ((size > 1000)); }
check "Installed-Size, in kB" sized

dpkg-deb --extract "$deb" "$work/pkg"
dpkg-deb --contents "$deb" | awk '{print $6 ($7 == "->" ? " -> " $8 : "")}' | sed 's|^\./||' >"$work/files"
has() { grep -qxF "$1" "$work/files" || { echo "missing: $1"; return 1; }; }
for file in usr/bin/containerfs usr/sbin/mount.containerfs "usr/sbin/mount.fuse.containerfs -> mount.containerfs" \
  usr/share/bash-completion/completions/containerfs usr/share/zsh/vendor-completions/_containerfs \
  usr/share/fish/vendor_completions.d/containerfs.fish usr/share/man/man1/containerfs.1.gz \
  usr/share/doc/containerfs/copyright usr/share/doc/containerfs/changelog.gz usr/share/doc/containerfs/README.md.gz; do
  check "holds /${file}" has "$file"
done
# A man page for each subcommand, as the command itself lists them (its
# --experimental-dump-help on stdin). The binary of another release runs in its root
# only: then this is done there.
check_man_pages() {
  subcommands=$(python3 -c 'import json, sys; print("\n".join(c["commandName"] for c in json.load(sys.stdin)["command"]["subcommands"] if c["commandName"] != "help"))')
  check "the command lists its subcommands" test "$(wc -l <<<"$subcommands")" -ge 10
  local name
  for name in $subcommands; do
    check "holds the man page containerfs-$name" has "usr/share/man/man1/containerfs-$name.1.gz"
  done
}
[[ $release == "$host_release" ]] && check_man_pages < <("$work/pkg/usr/bin/containerfs" --experimental-dump-help)
all_docs() { local doc; for doc in docs/*.md; do grep -qxE "usr/share/doc/containerfs/docs/$(basename "$doc")(.gz)?" "$work/files" || { echo "missing $doc"; return 1; }; done; }
check "every doc of docs/ is there" all_docs
only_usr() { ! grep -vE '^$|^usr/' "$work/files" && ! grep -E '\.build|/local/' "$work/files"; }
check "nothing outside /usr, nothing of the build" only_usr
root_owned() { ! dpkg-deb --contents "$deb" | awk '{print $2}' | grep -vx root/root; }
check "files are root's" root_owned
binary=$work/pkg/usr/bin/containerfs
no_swift_linked() { ldd "$binary" && ! ldd "$binary" | grep -E 'libswift|libFoundation|libdispatch'; }
check "the binary links no Swift runtime" no_swift_linked
stripped() { ! readelf -S "$binary" | grep -F .symtab; }
check "the binary is stripped" stripped
check "copyright is machine-readable (DEP-5)" \
  grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' "$work/pkg/usr/share/doc/containerfs/copyright"
run_page() { zcat "$work/pkg/usr/share/man/man1/containerfs-run.1.gz"; }
from_help() { run_page | grep -qx '.Dt CONTAINERFS-RUN 1' && run_page | grep -q -- no-network; }
check "man pages are made from --help" from_help

lintian --fail-on error --tag-display-limit 0 "$deb" >"$work/lintian" 2>&1
lintian_status=$?
echo "     lintian: $(grep -c . "$work/lintian") lines"; sed 's/^/     /' "$work/lintian"
check "lintian: no errors" test "$lintian_status" -eq 0
explained() { local tag; for tag in $(awk '/^W: /{print $3}' "$work/lintian" | sort -u); do grep -q -- "$tag" docs/packaging.md || { echo "unexplained: $tag"; return 1; }; done; }
check "lintian: every warning is explained in docs/packaging.md" explained

echo "== in a clean Debian $release ($suite) root, without Swift"
# in_root SCRIPT: runs bash SCRIPT as root in this run's copy of the root, with apt's cache.
in_root() { in_debian_root "$chroot" "$1" "$archives:/var/cache/apt/archives"; }
pristine=$(debian_root "$suite")
check "a Debian $release root made with debootstrap" test -f "$pristine/.made"
if [[ -f $pristine/.made ]]; then
  cp -a "$pristine" "$chroot" && mkdir -p "$archives/partial"
  cp /etc/resolv.conf "$chroot/etc/resolv.conf"
  cp "$deb" "$chroot/tmp/"
  package=/tmp/$(basename "$deb")
  check "the root is Debian $release" in_root "grep -qx 'VERSION_ID=\"$release\"' /etc/os-release"
  check "no Swift in it" in_root '! command -v swift && ! find / -xdev \( -name "libswift*" -o -name "libFoundation*" -o -name "libdispatch*" \) -print | grep .'
  # The lists kept in the root may be older than the mirror: then apt asks again once.
  check "apt installs the package and its dependencies" in_root "
    install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $package; }
    install || { apt-get update -qq && install; }"
  check "the package made _containerfs, a system user owning nothing (docs/run.md)" in_root 'id=$(getent passwd _containerfs | cut -d: -f3) && test "$id" -gt 0 && test "$id" -lt 1000 && test "$(getent passwd _containerfs | cut -d: -f4)" -ne 0 && ! find / -xdev -user _containerfs -print | grep .'
  check "containerfs is on PATH, and mount.containerfs in /sbin" in_root 'test "$(command -v containerfs)" = /usr/bin/containerfs && test -x /sbin/mount.containerfs && test -x /sbin/mount.fuse.containerfs'
  check "every library it links is there" in_root '! ldd /usr/bin/containerfs | grep "not found"'
  [[ $release == "$host_release" ]] || check_man_pages < <(in_root 'containerfs --experimental-dump-help')
  check "containerfs --version says $version" in_root "test \"\$(containerfs --version)\" = '$version'"
  check "containerfs create, then verify" in_root '
    mkdir -p /tmp/Notes.app/res && echo "<plist/>" >/tmp/Notes.app/Info.plist && echo data >/tmp/Notes.app/res/data.txt
    containerfs create /tmp/Notes.container --bundle /tmp/Notes.app
    test -d /tmp/Notes.container/Documents/Inbox
    containerfs verify /tmp/Notes.container'
  check "verify names a changed bundle file, exit 1" in_root '
    echo changed >>/tmp/Notes.container/Notes.app/res/data.txt
    set +e; out=$(containerfs verify /tmp/Notes.container 2>&1); status=$?; set -e
    echo "$out"; test "$status" -eq 1 && grep -q "res/data.txt" <<<"$out"'
  check "man containerfs-run" in_root 'man -P cat containerfs-run | grep -q -- "--no-network" && man -P cat containerfs | grep -q "containerfs-purge"'
  check "man finds a page for every subcommand" in_root "for name in $(echo $subcommands); do man -w containerfs-\$name; done"
  check "bash completes 'containerfs pu<TAB>' to purge" in_root '
    source /usr/share/bash-completion/completions/containerfs
    function=$(complete -p containerfs | sed -n "s/.* -F \([^ ]*\) .*/\1/p")
    COMP_LINE="containerfs pu"; COMP_POINT=${#COMP_LINE}; COMP_WORDS=(containerfs pu); COMP_CWORD=1
    "$function" containerfs pu containerfs
    echo "offered: ${COMPREPLY[*]}"; test "${COMPREPLY[*]}" = purge'
  # FUSE in the root: /dev/fuse bound in, the mount made in the root's own namespace (it
  # vanishes with it), served by the package's binary linked against this release's libfuse.
  in_root_with_fuse() { timeout --kill-after=10 120 bash -c "$(declare -f in_debian_root); in_debian_root \"\$@\"" \
    sh "$chroot" "$1" "$archives:/var/cache/apt/archives" /dev/fuse; }
  check "in the root: mount -t containerfs, a write to the bundle denied (EPERM), audit, unmount" in_root_with_fuse '
    mkdir -p /tmp/Mounted.app /tmp/mnt && echo "<plist/>" >/tmp/Mounted.app/Info.plist
    containerfs create /tmp/Mounted.container --bundle /tmp/Mounted.app
    mount -t containerfs /tmp/Mounted.container /tmp/mnt
    awk "\$2 == \"/tmp/mnt\" {print \$3}" /proc/mounts | grep -qx fuse.containerfs
    set +e; error=$( (echo x >>/tmp/mnt/Mounted.app/Info.plist) 2>&1); status=$?; set -e
    echo "$error"; test "$status" -ne 0 && grep -q "Operation not permitted" <<<"$error"
    test "$(cat /tmp/mnt/Mounted.app/Info.plist)" = "<plist/>" && test -d /tmp/mnt/Documents/Inbox
    containerfs audit /tmp/Mounted.container | grep -q Mounted.app/Info.plist
    containerfs unmount /tmp/mnt
    ! awk "{print \$2}" /proc/mounts | grep -qx /tmp/mnt'
  check "apt removes it, leaving nothing" in_root '
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -q containerfs >/dev/null
    ! test -e /usr/bin/containerfs && ! test -e /usr/sbin/mount.containerfs && ! test -e /usr/share/doc/containerfs'
  rm -rf "$chroot"
fi

if [[ $release != "$host_release" ]]; then
  echo "== on this machine: not for the package of Debian $release (this is Debian $host_release)"
  finish
fi
echo "== on this machine, installed"
installed_before=$(dpkg-query -W -f='${Status}' containerfs 2>/dev/null | grep -c 'install ok installed')
check "apt installs the package" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$deb"
mnt=$work/mnt store=$work/Notes.container
cleanup_host() {
  fusermount3 -uz "$mnt" 2>/dev/null
  ((installed_before)) || DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 purge -y -q containerfs >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup_host EXIT
mkdir -p "$mnt" "$work/Notes.app" && echo '<plist/>' >"$work/Notes.app/Info.plist"
# Only the installed program and helper: PATH without /usr/local, no CONTAINERFS.
host() { env -u CONTAINERFS PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
check "create with the installed binary" host containerfs create "$store" --bundle "$work/Notes.app"
mounted_by_helper() {
  host mount -t containerfs "$store" "$mnt" &&
    awk -v mnt="$mnt" '$2 == mnt {print $3}' /proc/mounts | grep -qx fuse.containerfs &&
    test "$(readlink "/proc/$(head -1 "$store/.containerfs/mount.lock")/exe")" = /usr/bin/containerfs
}
check "mount -t containerfs, through the installed helper and binary" mounted_by_helper
bundle_write_denied() { local error; ! error=$( (echo x >>"$mnt/Notes.app/Info.plist") 2>&1) && grep -q 'Operation not permitted' <<<"$error"; }
check "a write to the bundle is denied (EPERM)" bundle_write_denied
audited() { host containerfs audit "$store" | grep 'Notes.app/Info.plist'; }
check "audit names the denial" audited
unmounted() { host containerfs unmount "$mnt" && ! awk '{print $2}' /proc/mounts | grep -qxF "$mnt"; }
check "containerfs unmount" unmounted
# The Smoke suite (mount, the layout, a denial with EPERM, audit, unmount) run on the
# installed binary: the harness runs \$CONTAINERFS_BIN instead of the one it built.
CONTAINERFS_BIN=/usr/bin/containerfs timeout --kill-after=30 900 "$swift" test --no-parallel --filter SmokeTests >"$work/smoke" 2>&1
smoke_status=$?
grep -E 'Test run with|✘' "$work/smoke" | sed 's/^/     /'
smoke_passed() { ((smoke_status == 0)) && grep -q 'Test run with .* passed' "$work/smoke"; }
check "the Smoke suite passes with /usr/bin/containerfs" smoke_passed
finish
