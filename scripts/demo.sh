#!/usr/bin/env bash
# The demo of `make demo`: a container is created, mounted, and a program run inside
# it tries everything an iOS app might; each rule answers with its errno, and the
# audit log names the rule. Everything lives under ./demo and is unmounted at the end.
set -euo pipefail
bin=$(realpath "${1:-.build/release/containerfs}")
root=$(pwd)/demo
mnt=$root/mnt
store=$root/Notes.container

cleanup() { "$bin" unmount "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
rm -rf "$root"
mkdir -p "$root/Notes.app/Base.lproj" "$mnt"
printf '<plist><dict><key>CFBundleName</key><string>Notes</string></dict></plist>\n' > "$root/Notes.app/Info.plist"
printf 'Hello from the bundle\n' > "$root/Notes.app/Base.lproj/Welcome.txt"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
try() {  # run a shell line inside the container and show how it went
  printf '$ %s\n' "$1"
  if (cd "$mnt" && bash -c "$1" 2>&1 | sed 's/^/  /'; exit "${PIPESTATUS[0]}"); then
    printf '  \033[32m-> allowed\033[0m\n'
  else
    printf '  \033[31m-> denied\033[0m\n'
  fi
}

step "Create a container from a bundle, and mount it"
"$bin" create "$store" --bundle "$root/Notes.app"
"$bin" mount "$store" "$mnt"
echo "mounted $store on $mnt"
printf 'a mail attachment\n' > "$store/Documents/Inbox/attachment.txt"   # as if another app handed it over
(cd "$mnt" && find . -maxdepth 2 | sort | sed 's/^/  /')

step "The bundle is read-only (EPERM), like a signed app"
try 'cat Notes.app/Base.lproj/Welcome.txt'
try 'echo patched >> Notes.app/Info.plist'
try 'rm Notes.app/Info.plist'
try 'touch Notes.app/new-file'

step "The structure is fixed (EPERM)"
try 'rmdir tmp'
try 'mv Documents MyDocuments'
try 'chmod 777 Library'
try 'mkdir NewTopLevelFolder'

step "Documents, Library, Caches and tmp are the app's to use"
try 'echo "my note" > Documents/note.txt && cat Documents/note.txt'
try 'mkdir -p "Library/Application Support/db" && sqlite3 "Library/Application Support/db/notes.sqlite" "create table n(t); insert into n values (1); select count(*) from n;"'
try 'echo thumbnail > Library/Caches/thumb.png && mv Library/Caches/thumb.png tmp/'
try 'setfattr -n user.containerfs.exclude-from-backup -v 1 Documents/note.txt && getfattr -d Documents/note.txt'

step "The Inbox may be read, emptied and moved out of, never written (EACCES)"
try 'cat Documents/Inbox/attachment.txt'
try 'echo edit >> Documents/Inbox/attachment.txt'
try 'touch Documents/Inbox/new.txt'
try 'mv Documents/Inbox/attachment.txt Documents/attachment.txt && echo edited >> Documents/attachment.txt'

step "Attacks through links fail too; the store's state folder does not exist here"
try 'ln Notes.app/Info.plist Documents/hardlink'
try 'ln -s ../Notes.app/Info.plist Documents/symlink && echo pwned > Documents/symlink'
try 'ls -A && ls .containerfs'   # the state folder is neither listed nor reachable

step "The audit log names every denial and its rule"
"$bin" audit "$store"

step "Unmount"
"$bin" unmount "$mnt"
echo "unmounted"

step "Run an unmodified program confined to the container (bubblewrap)"
printf '$ containerfs run %s -- sh -c ...\n' "$store"
"$bin" run "$store" -- sh -c 'echo "HOME=$HOME TMPDIR=$TMPDIR cwd=$(pwd)"; cat Documents/note.txt; ls /root 2>&1 | head -1; echo hacked >> Notes.app/Info.plist; echo "exit status of the last command: $?"' || true

step "Update the app: version 2 finds version 1's data"
mkdir -p "$root/v2/Notes.app/Base.lproj"
printf '<plist><dict><key>CFBundleName</key><string>Notes 2</string></dict></plist>\n' > "$root/v2/Notes.app/Info.plist"
printf 'Hello from version 2\n' > "$root/v2/Notes.app/Base.lproj/Welcome.txt"
"$bin" update "$store" --bundle "$root/v2/Notes.app"
"$bin" verify "$store"
"$bin" run "$store" -- sh -c 'cat Notes.app/Base.lproj/Welcome.txt; cat Documents/note.txt; sqlite3 "Library/Application Support/db/notes.sqlite" "select count(*) || '"'"' row from version 1'"'"' from n;"'

step "Many launches, caches purged between them, catch an app that needs its cache"
app='if [ -e Documents/initialized ]; then cat Library/Caches/index >/dev/null || exit 3
     else echo built > Library/Caches/index; touch Documents/initialized; fi
     for i in 1 2 3 4 5 6; do echo "$i" > "Library/Caches/thumb$i"; done'
printf '$ containerfs run %s --launches 5 --purge-between random --seed 7 -- sh -c ...\n' "$store"
"$bin" run "$store" --launches 5 --purge-between random --seed 7 -- sh -c "$app" || echo "exit status $?"
trap - EXIT
echo "the store is in $store"
