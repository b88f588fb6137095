// Linux calls and constants that Swift's Glibc module does not export: they need
// _GNU_SOURCE (O_PATH, renameat2) or are too new for glibc 2.36 (openat2).
#ifndef CLINUX_H
#define CLINUX_H

#include <fcntl.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/xattr.h>

// Defined in linux.c, where _GNU_SOURCE is in force; Swift's importer does not see it.
extern const int clinux_O_PATH;
extern const int clinux_O_DIRECT;
extern const int clinux_O_TMPFILE;
/// lseek(2) whences for the next data and the next hole (a stable ABI, under _GNU_SOURCE).
extern const int clinux_SEEK_DATA;
extern const int clinux_SEEK_HOLE;
extern const int clinux_AT_EMPTY_PATH;
extern const unsigned clinux_RENAME_NOREPLACE;
extern const unsigned clinux_RENAME_EXCHANGE;
extern const short clinux_POSIX_SPAWN_SETSID;
extern const long clinux_UTIME_NOW;
extern const long clinux_UTIME_OMIT;

/// openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS:
/// `path` is resolved strictly below `dirfd`, following no symlink at any component.
int clinux_open_beneath(int dirfd, const char *path, int flags, mode_t mode);

/// renameat2(2); glibc 2.36 has it only under _GNU_SOURCE.
int clinux_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned flags);

/// fchmodat2(2) with AT_EMPTY_PATH: chmod the node an O_PATH descriptor names.
int clinux_fchmod_path_fd(int fd, mode_t mode);

/// The birth time of `name` in `dirfd` (statx(2) with `flags`; "" and AT_EMPTY_PATH for the
/// node `dirfd` itself), in `seconds` and `nanoseconds`: 0, or 1 when the file system keeps
/// none, or -1 with errno.
int clinux_birth_time(int dirfd, const char *name, int flags, int64_t *seconds, uint32_t *nanoseconds);

/// copy_file_range(2), declared by glibc only under _GNU_SOURCE.
ssize_t clinux_copy_file_range(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len, unsigned flags);

/// syncfs(2), declared by glibc only under _GNU_SOURCE.
int clinux_syncfs(int fd);

/// fallocate(2), declared by glibc only under _GNU_SOURCE.
int clinux_fallocate(int fd, int mode, off_t offset, off_t length);

/// posix_spawn_file_actions_addclosefrom_np: the child closes every descriptor from
/// `from` on, so nothing the parent inherited (pipes of whoever started it) leaks on.
int clinux_spawn_close_from(void *actions, int from);

/// A descriptor of process `pid` (pidfd_open(2)): it polls readable when the process has
/// ended, and signals sent through it can never reach another process that reuses the pid.
int clinux_pidfd_open(int pid);
/// Sends `signal` to the process of the pidfd `fd` (pidfd_send_signal(2)).
int clinux_pidfd_send_signal(int fd, int signal);

/// posix_spawn_file_actions_addchdir_np: the child starts in `path`, the parent's working
/// directory is untouched (glibc declares it only under _GNU_SOURCE for Swift).
int clinux_spawn_chdir(void *actions, const char *path);

// A node of the store is held as an O_PATH descriptor N. /proc/self/fd/N names the node
// itself, wherever it has moved, with no path walk in the store; these reach it through
// a descriptor of /proc/self/fd opened once, so only the last component is looked up.

/// open(2) of the node `fd` names, with `flags`.
int clinux_reopen(int fd, int flags);
/// getxattr(2), setxattr(2), removexattr(2) and listxattr(2) on the node `fd` names
/// (through getxattrat(2) and its kind, Linux 6.13+, or the /proc path before).
ssize_t clinux_node_getxattr(int fd, const char *name, void *value, size_t size);
int clinux_node_setxattr(int fd, const char *name, const void *value, size_t size, int flags);
int clinux_node_removexattr(int fd, const char *name);
ssize_t clinux_node_listxattr(int fd, char *list, size_t size);
/// truncate(2) of the node `fd` names.
int clinux_node_truncate(int fd, off_t length);
/// A new name `name` in `dirfd` for the node `fd` names (linkat(2)).
int clinux_node_link(int fd, int dirfd, const char *name);

/// Room for any file handle (MAX_HANDLE_SZ and struct file_handle's header).
extern const int clinux_MAX_HANDLE_SIZE;
/// name_to_handle_at(2) of the node `fd` names (AT_EMPTY_PATH): writes its struct
/// file_handle into `buffer`; returns its length, or -1 with errno.
int clinux_node_handle(int fd, void *buffer, int capacity);
/// open_by_handle_at(2) of a handle `clinux_node_handle` made, on the file system of
/// `mountfd` (needs CAP_DAC_READ_SEARCH).
int clinux_open_handle(int mountfd, const void *handle, int length, int flags);
/// Sets the umask of the calling thread only: the first call gives the thread its own
/// fs_struct (unshare CLONE_FS: umask, root and working directory), so threads creating
/// files for callers with different umasks do not race over the process's one.
int clinux_use_umask(mode_t mask);

/// Per-thread filesystem identity (setfsuid/setfsgid act on the calling thread only).
int clinux_setfsuid(uid_t uid);
int clinux_setfsgid(gid_t gid);

/// Writes to `fd` the classic-BPF seccomp program that `containerfs run` hands bubblewrap
/// (`--seccomp FD`): ioctl(2) with TIOCSTI or TIOCLINUX fails with EPERM, and add_key,
/// request_key and keyctl fail with ENOSYS, in every ABI of this architecture (x86_64 with i386 and x32; aarch64 with arm). -1 with errno
/// ENOSYS on another architecture, or the write's errno.
int clinux_write_terminal_filter(int fd);

/// Registers the shared file mapping [base, base + length), mapped with `protection`, so
/// that a page of it past the end of its file (someone truncated the file) becomes a
/// private zero-filled page instead of killing the process with SIGBUS (mapping_guard.c).
/// 0, or -1 with errno (ENOSPC: 64 mappings are registered already).
int clinux_guard_mapping(void *base, size_t length, int protection);
/// Forgets a mapping registered with clinux_guard_mapping; call it before munmap(2).
void clinux_unguard_mapping(void *base);

#endif
