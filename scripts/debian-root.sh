# Clean Debian roots for building and testing the package of each release
# (docs/packaging.md). Sourced by scripts/test-deb.sh and scripts/build-deb-in-root.sh.
#
#   debian_root SUITE [PACKAGE…]   prints the path of a root of SUITE (bookworm, trixie):
#       debootstrap --variant=minbase with man-db, then PACKAGE… installed. Made once per
#       machine and kept in $DEBIAN_ROOTS (/var/cache/containerfs by default), one root per
#       suite and package list, never changed after it is made: use it through a copy, or
#       through in_debian_root with the changing folders bound in.
#   in_debian_root ROOT SCRIPT [HOST_PATH[:ROOT_PATH]…]   runs bash SCRIPT as root in ROOT,
#       in a mount namespace of its own (whatever is mounted there vanishes with it), with
#       /proc and each HOST_PATH (a folder, or a file such as /dev/fuse) bound at ROOT_PATH
#       (by default its own path). IN_ROOT_ENV (NAME=VALUE…, no spaces) is passed in.
#   debian_suite RELEASE   the suite of a Debian release number (12 → bookworm).
DEBIAN_ROOTS=${DEBIAN_ROOTS:-/var/cache/containerfs}

debian_suite() {
  case $1 in
  12) echo bookworm ;;
  13) echo trixie ;;
  *) echo "debian-root: no Debian release $1 known (12 bookworm, 13 trixie)" >&2; return 1 ;;
  esac
}

debian_root() {
  local suite=$1 mirror root log status=0
  shift
  local key
  key=$(printf '%s\n' "$@" | md5sum | cut -c1-8)
  root=$DEBIAN_ROOTS/$suite-$( (($#)) && echo "$key" || echo minbase)
  # The machine's own Debian mirror (apt's sources), for every suite.
  mirror=$(apt-get indextargets --format '$(SITE)' 'Identifier: Packages' | grep -m1 '/debian$')
  mirror=${mirror:-http://deb.debian.org/debian}
  mkdir -p "$DEBIAN_ROOTS/debootstrap"
  # One maker at a time per machine; a second waits, then finds it made.
  exec {lock}>"$DEBIAN_ROOTS/$suite.lock"
  flock "$lock"
  if [[ ! -f $root/.made ]]; then
    echo "debian-root: making $root ($mirror $suite, minbase, man-db${*:+, $*}), once: it is kept" >&2
    log=$(mktemp)
    rm -rf "$root.new"
    if debootstrap --variant=minbase --include=man-db --cache-dir="$DEBIAN_ROOTS/debootstrap" \
      "$suite" "$root.new" "$mirror" >"$log" 2>&1 &&
      printf 'deb %s %s main\n' "$mirror" "$suite" >"$root.new/etc/apt/sources.list" &&
      cp /etc/resolv.conf "$root.new/etc/resolv.conf" &&
      chroot "$root.new" apt-get update -qq >>"$log" 2>&1 &&
      { (($# == 0)) || chroot "$root.new" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "$@" >>"$log" 2>&1; }; then
      chroot "$root.new" apt-get clean
      touch "$root.new/.made" && mv "$root.new" "$root"
    else
      status=1
      tail -20 "$log" >&2
    fi
    rm -f "$log"
  fi
  flock -u "$lock"
  exec {lock}>&-
  ((status == 0)) && echo "$root"
}

in_debian_root() {
  local root=$1 script=$2
  shift 2
  local binds=() bind
  for bind in "$@"; do
    [[ $bind == *:* ]] || bind=$bind:$bind
    binds+=("$bind")
  done
  unshare --mount --propagation private -- bash -c '
    root=$1 script=$2; shift 2
    mount -t proc proc "$root/proc" || exit 1
    for bind in "$@"; do
      host=${bind%%:*} target=$root${bind#*:}
      if [[ -d $host ]]; then mkdir -p "$target"; else [[ -e $target ]] || touch "$target"; fi
      mount --bind "$host" "$target" || exit 1
    done
    exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb \
      ${IN_ROOT_ENV:-} /bin/bash -euo pipefail -c "$script"
  ' sh "$root" "$script" "${binds[@]}"
}
