#!/usr/bin/env bash
# Builds containerfs_VERSION+debN_ARCH.deb for `make deb` (and `make deb-other`, in a
# root) from the release build in SCRATCH (made with --static-swift-stdlib, so the
# package needs no Swift): the binary, the mount(8) helper, man pages and shell
# completions generated from the command itself, the docs and the copyright. Depends are computed by dpkg-shlibdeps, plus the programs
# containerfs runs (fusermount3, bwrap). Run on the Debian release the package is for
# (scripts/build-deb-in-root.sh runs it in a root of another): dpkg-shlibdeps names that
# release's packages. VERSION is the binary's version and the release, as 0.1.0+deb12.
#   scripts/build-deb.sh SCRATCH VERSION OUTPUT.deb
set -euo pipefail
scratch=$1 version=$2 output=$3
binary=$scratch/release/containerfs
stage=.build-deb/$(basename "$output" .deb)/stage
work=.build-deb/$(basename "$output" .deb)/work

fail() { echo "build-deb: $*" >&2; exit 1; }
[[ -x $binary ]] || fail "no release build at $binary: run 'make deb'"
[[ $version =~ ^([0-9][A-Za-z0-9.~]*)\+deb([0-9]+)$ ]] ||
  fail "version '$version' is not VERSION+debN (Sources/containerfs/Version.swift, then the Debian release)"
upstream=${BASH_REMATCH[1]} release=${BASH_REMATCH[2]}
[[ $(. /etc/os-release && echo "$VERSION_ID") == "$release" ]] ||
  fail "this is not Debian $release: build the package for Debian $release in its root (make deb-other)"
built=$("$binary" --version)
[[ $built == "$upstream" ]] || fail "$binary says it is $built, not $upstream: rebuild it"
# The point of the package: nothing of Swift on the machine it is installed on.
if ldd "$binary" | grep -E 'libswift|libFoundation|libdispatch|libBlocksRuntime|lib_FoundationICU'; then
  fail "$binary links the Swift runtime dynamically: build it with --static-swift-stdlib"
fi

# Dates come from the last commit, so that the same commit builds the same package.
# In a Debian root, where this checkout's git is not, they are given (SOURCE_DATE_EPOCH,
# CONTAINERFS_COMMIT).
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
commit=${CONTAINERFS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export SOURCE_DATE_EPOCH=$epoch
maintainer="ContainerFS maintainers <maintainers@users.noreply.a-seed-943d4327.example>"

rm -rf "$stage" "$work"
mkdir -p "$stage/DEBIAN" "$work/debian"
doc=$stage/usr/share/doc/containerfs

# The binary, stripped as Debian's dh_strip does (the Swift metadata sections stay:
# they are allocated, and strip removes only symbols and debug sections).
install -D -m 0755 "$binary" "$stage/usr/bin/containerfs"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage/usr/bin/containerfs"

# mount(8) looks for mount.TYPE in /sbin, which on Debian 12 and later (merged /usr) is a
# link to /usr/sbin: the files go to their real place (docs/packaging.md).
install -D -m 0755 mount-helper/mount.containerfs "$stage/usr/sbin/mount.containerfs"
ln -s mount.containerfs "$stage/usr/sbin/mount.fuse.containerfs"

# Man pages: swift-argument-parser's generate-manual (the tool its generate-manual plugin
# runs), one page per command, from the same definitions as --help. `make deb` builds it
# beside the binary: the plugin itself would rebuild the package without
# --static-swift-stdlib, which `swift package` does not take (docs/packaging.md).
# Its multi-page files are named containerfs.run.1; they become containerfs-run.1, as
# git's pages are named (NAME says containerfs-run, for whatis; SYNOPSIS containerfs run).
generator=$scratch/release/generate-manual
[[ -x $generator ]] || fail "no $generator: run 'make deb'"
pages=$work/man
mkdir -p "$pages"
"$generator" "$binary" --multi-page --date "$(date -u -d "@$epoch" +%F)" --authors "$maintainer" \
  --output-directory "$pages" || fail "generate-manual failed"
[[ -f $pages/containerfs.1 ]] || fail "generate-manual wrote no containerfs.1"
mkdir -p "$stage/usr/share/man/man1"
for page in "$pages"/*.1; do
  name=$(basename "$page" .1)
  dashed=${name//./-}
  # Also mended: an empty line of a discussion is a paragraph break (.Pp), not a blank
  # line for groff, and a text line starting with ' is not a groff request.
  awk -v dashed="$dashed" '
    /^$/ { print ".Pp"; next }
    /^\047/ { print "\\&" $0; next }
    /^\.Nm "/ && !named { named = 1; title = substr($0, 5); print ".Nm " dashed; next }
    /^\.Nm$/ && named { print ".Nm " title; next }
    /^\.(Dt|Xr) / { while (match($0, /[^ ]\.[^ ]/)) $0 = substr($0, 1, RSTART) "-" substr($0, RSTART + 2) }
    { print }
  ' "$page" | gzip -9n >"$stage/usr/share/man/man1/$dashed.1.gz"
done
# The helper takes what `containerfs mount` takes (docs/mounting.md).
ln -s containerfs-mount.1.gz "$stage/usr/share/man/man1/mount.containerfs.1.gz"
ln -s containerfs-mount.1.gz "$stage/usr/share/man/man1/mount.fuse.containerfs.1.gz"

# Shell completions, from the command itself, where each shell looks for them (bash
# sources its file: no #! line).
install -d "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
  "$stage/usr/share/fish/vendor_completions.d"
"$binary" --generate-completion-script bash | sed '1{/^#!/d}' >"$stage/usr/share/bash-completion/completions/containerfs"
"$binary" --generate-completion-script zsh >"$stage/usr/share/zsh/vendor-completions/_containerfs"
"$binary" --generate-completion-script fish >"$stage/usr/share/fish/vendor_completions.d/containerfs.fish"

# Docs: the README and docs/, the copyright, and a changelog entry for this version.
install -d "$doc/docs"
install -m 0644 README.md "$doc/"
install -m 0644 docs/*.md "$doc/docs/"
install -m 0644 packaging/debian/copyright "$doc/copyright"
{
  printf 'containerfs (%s) %s; urgency=medium\n\n' "$version" "$(. /etc/os-release && echo "$VERSION_CODENAME")"
  printf '  * Release %s for Debian %s, from commit %s (its history is in git).\n\n' "$upstream" "$release" "$commit"
  printf ' -- %s  %s\n' "$maintainer" "$(date -u -R -d "@$epoch")"
} | gzip -9n >"$doc/changelog.gz"
find "$doc" -name '*.md' -size +4k -exec gzip -9n {} +   # as dh_compress: docs over 4 kB

# Dependencies: what the binary links, from the packages that provide it (dpkg-shlibdeps
# reads a debian/control), and the two programs it runs.
cat >"$work/debian/control" <<EOF
Source: containerfs

Package: containerfs
Architecture: any
EOF
shlibs=$(cd "$work" && dpkg-shlibdeps -O "$OLDPWD/$stage/usr/bin/containerfs" | sed -n 's/^shlibs:Depends=//p')
[[ -n $shlibs ]] || fail "dpkg-shlibdeps found no dependencies"

installed=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: containerfs
Version: $version
Architecture: $(dpkg --print-architecture)
Maintainer: $maintainer
Installed-Size: $installed
Depends: $shlibs, fuse3, bubblewrap, passwd
Section: utils
Priority: optional
Description: iOS-style app containers on Linux, as a FUSE filesystem
 A container is a directory on disk; containerfs mount presents it through FUSE
 with the iOS sandbox rules enforced on every operation: a read-only, signed
 app bundle, a fixed folder structure, an Inbox that may be read and emptied but
 never written, and purgeable caches and tmp. Denials are logged with the rule.
 .
 containerfs run starts an unmodified program confined to its container with
 bubblewrap. The package holds the command, the mount(8) helper (mount -t
 containerfs and /etc/fstab), man pages and bash, zsh and fish completions.
EOF
(cd "$stage" && find usr -type f | LC_ALL=C sort | xargs md5sum) >"$stage/DEBIAN/md5sums"
install -m 0755 packaging/debian/postinst "$stage/DEBIAN/postinst"

find "$stage" -type d -exec chmod 0755 {} +
find "$stage" -exec touch -h -d "@$epoch" {} +
# Written aside and renamed, so that a package by that name is always whole.
dpkg-deb --root-owner-group -Zxz --build "$stage" "$output.partial" >/dev/null
mv "$output.partial" "$output"
echo "built $output ($(du -k "$output" | cut -f1) kB)"
