#include "CLinux.h"
#include <errno.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <spawn.h>
#include <unistd.h>

const int clinux_O_PATH = O_PATH;
const int clinux_O_DIRECT = O_DIRECT;
const int clinux_O_TMPFILE = O_TMPFILE;
const int clinux_SEEK_DATA = SEEK_DATA;
const int clinux_SEEK_HOLE = SEEK_HOLE;
const int clinux_AT_EMPTY_PATH = AT_EMPTY_PATH;
const unsigned clinux_RENAME_NOREPLACE = RENAME_NOREPLACE;
const unsigned clinux_RENAME_EXCHANGE = RENAME_EXCHANGE;
const short clinux_POSIX_SPAWN_SETSID = POSIX_SPAWN_SETSID;
const long clinux_UTIME_NOW = UTIME_NOW;
const long clinux_UTIME_OMIT = UTIME_OMIT;

const int clinux_MAX_HANDLE_SIZE = (int)sizeof(struct file_handle) + MAX_HANDLE_SZ;

int clinux_node_handle(int fd, void *buffer, int capacity) {
    struct file_handle *handle = buffer;
    if (capacity < (int)sizeof(struct file_handle)) { errno = EINVAL; return -1; }
    handle->handle_bytes = (unsigned)capacity - sizeof(struct file_handle);
    int mount_id;
    if (name_to_handle_at(fd, "", handle, &mount_id, AT_EMPTY_PATH) != 0) return -1;
    return (int)(sizeof(struct file_handle) + handle->handle_bytes);
}

int clinux_open_handle(int mountfd, const void *handle, int length, int flags) {
    const struct file_handle *header = handle;
    if (length < (int)sizeof(struct file_handle) || header->handle_bytes != (unsigned)length - sizeof(struct file_handle)) {
        errno = EINVAL;
        return -1;
    }
    return open_by_handle_at(mountfd, (struct file_handle *)handle, flags);
}

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

int clinux_birth_time(int dirfd, const char *name, int flags, int64_t *seconds, uint32_t *nanoseconds) {
    struct statx info;
    if (statx(dirfd, name, flags | AT_STATX_SYNC_AS_STAT, STATX_BTIME, &info) != 0) return -1;
    if (!(info.stx_mask & STATX_BTIME)) return 1;
    *seconds = info.stx_btime.tv_sec;
    *nanoseconds = info.stx_btime.tv_nsec;
    return 0;
}

int clinux_setfsuid(uid_t uid) { return setfsuid(uid); }
int clinux_setfsgid(gid_t gid) { return setfsgid(gid); }

// The umask this thread creates with; -1 while it still shares the process's.
static _Thread_local int thread_umask = -1;

int clinux_use_umask(mode_t mask) {
    mask &= 0777;
    if (thread_umask < 0) {
        // The umask belongs to the fs_struct, which threads share unless one unshares it.
        if (unshare(CLONE_FS) != 0) return -1;
        umask(mask);
        thread_umask = (int)mask;
    } else if ((mode_t)thread_umask != mask) {
        umask(mask);
        thread_umask = (int)mask;
    }
    return 0;
}

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

// MARK: Nodes held as O_PATH descriptors

static atomic_int proc_fd_dir = -1;

// A forked child has its own descriptor table: its /proc/self/fd is another directory.
static void forget_proc_fd_dir(void) {
    int fd = atomic_exchange(&proc_fd_dir, -1);
    if (fd >= 0) close(fd);
}

__attribute__((constructor)) static void forget_proc_fd_dir_on_fork(void) {
    pthread_atfork(NULL, NULL, forget_proc_fd_dir);
}

// The directory /proc/self/fd (of this process), or -1 if /proc is not there.
static int proc_fd_directory(void) {
    int fd = atomic_load(&proc_fd_dir);
    if (fd >= 0) return fd;
    fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int expected = -1;
    if (!atomic_compare_exchange_strong(&proc_fd_dir, &expected, fd)) {
        close(fd); // another thread was first
        return expected;
    }
    return fd;
}

typedef struct { char text[24]; } fd_name;

static fd_name name_of(int fd) {
    fd_name name;
    snprintf(name.text, sizeof name.text, "%d", fd);
    return name;
}

static fd_name path_of(int fd) {
    fd_name path;
    snprintf(path.text, sizeof path.text, "/proc/self/fd/%d", fd);
    return path;
}

int clinux_reopen(int fd, int flags) {
    int directory = proc_fd_directory();
    if (directory < 0) return open(path_of(fd).text, flags);
    return openat(directory, name_of(fd).text, flags);
}

#ifndef SYS_getxattrat
#define SYS_setxattrat 463
#define SYS_getxattrat 464
#define SYS_listxattrat 465
#define SYS_removexattrat 466
#endif

struct clinux_xattr_args { uint64_t value; uint32_t size; uint32_t flags; };

// Cleared when the kernel has no getxattrat (before 6.13): then the /proc path is walked.
static atomic_bool xattrat_works = true;

// /proc/self/fd while getxattrat and its kind can be used with it, else -1.
static int xattrat_directory(void) {
    return atomic_load(&xattrat_works) ? proc_fd_directory() : -1;
}

static bool no_xattrat(long result) {
    if (result < 0 && errno == ENOSYS) { atomic_store(&xattrat_works, false); return true; }
    return false;
}

ssize_t clinux_node_getxattr(int fd, const char *name, void *value, size_t size) {
    int directory = xattrat_directory();
    if (directory >= 0) {
        struct clinux_xattr_args args = { .value = (uintptr_t)value, .size = (uint32_t)size };
        long result = syscall(SYS_getxattrat, directory, name_of(fd).text, 0, name, &args, sizeof args);
        if (!no_xattrat(result)) return result;
    }
    return getxattr(path_of(fd).text, name, value, size);
}

int clinux_node_setxattr(int fd, const char *name, const void *value, size_t size, int flags) {
    int directory = xattrat_directory();
    if (directory >= 0) {
        struct clinux_xattr_args args = { .value = (uintptr_t)value, .size = (uint32_t)size, .flags = (uint32_t)flags };
        long result = syscall(SYS_setxattrat, directory, name_of(fd).text, 0, name, &args, sizeof args);
        if (!no_xattrat(result)) return (int)result;
    }
    return setxattr(path_of(fd).text, name, value, size, flags);
}

int clinux_node_removexattr(int fd, const char *name) {
    int directory = xattrat_directory();
    if (directory >= 0) {
        long result = syscall(SYS_removexattrat, directory, name_of(fd).text, 0, name);
        if (!no_xattrat(result)) return (int)result;
    }
    return removexattr(path_of(fd).text, name);
}

ssize_t clinux_node_listxattr(int fd, char *list, size_t size) {
    int directory = xattrat_directory();
    if (directory >= 0) {
        long result = syscall(SYS_listxattrat, directory, name_of(fd).text, 0, list, size);
        if (!no_xattrat(result)) return result;
    }
    return listxattr(path_of(fd).text, list, size);
}

int clinux_node_truncate(int fd, off_t length) {
    return truncate(path_of(fd).text, length);
}

int clinux_node_link(int fd, int dirfd, const char *name) {
    int directory = proc_fd_directory();
    if (directory < 0) return linkat(AT_FDCWD, path_of(fd).text, dirfd, name, AT_SYMLINK_FOLLOW);
    return linkat(directory, name_of(fd).text, dirfd, name, AT_SYMLINK_FOLLOW);
}

int clinux_pidfd_open(int pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int clinux_pidfd_send_signal(int fd, int signal) {
    return (int)syscall(SYS_pidfd_send_signal, fd, signal, NULL, 0);
}
