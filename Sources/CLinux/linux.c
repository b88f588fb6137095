#include "CLinux.h"
#include <errno.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <spawn.h>
#include <unistd.h>

const int clinux_O_PATH = O_PATH;
const int clinux_O_DIRECT = O_DIRECT;
const int clinux_AT_EMPTY_PATH = AT_EMPTY_PATH;
const unsigned clinux_RENAME_NOREPLACE = RENAME_NOREPLACE;
const unsigned clinux_RENAME_EXCHANGE = RENAME_EXCHANGE;
const short clinux_POSIX_SPAWN_SETSID = POSIX_SPAWN_SETSID;
const long clinux_UTIME_NOW = UTIME_NOW;
const long clinux_UTIME_OMIT = UTIME_OMIT;

int clinux_open_beneath(int dirfd, const char *path, int flags, mode_t mode) {
    struct open_how how = {
        .flags = (uint64_t)flags,
        .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS,
    };
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

int clinux_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned flags) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif

int clinux_fchmod_path_fd(int fd, mode_t mode) {
    return (int)syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH);
}

int clinux_setfsuid(uid_t uid) { return setfsuid(uid); }
int clinux_setfsgid(gid_t gid) { return setfsgid(gid); }

ssize_t clinux_copy_file_range(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len, unsigned flags) {
    return copy_file_range(fd_in, off_in, fd_out, off_out, len, flags);
}

int clinux_syncfs(int fd) { return syncfs(fd); }

int clinux_fallocate(int fd, int mode, off_t offset, off_t length) {
    return fallocate(fd, mode, offset, length);
}

int clinux_spawn_close_from(void *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np((posix_spawn_file_actions_t *)actions, from);
}

int clinux_spawn_chdir(void *actions, const char *path) {
    return posix_spawn_file_actions_addchdir_np((posix_spawn_file_actions_t *)actions, path);
}
