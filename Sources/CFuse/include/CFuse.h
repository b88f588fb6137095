// libfuse3's low-level API. FUSE_USE_VERSION must be defined before the include,
// which a module map cannot do. 314 is the API of Debian 12's libfuse 3.14, which Debian
// 13's libfuse 3.17 keeps for a program that asks for it (docs/packaging.md).
#ifndef CFUSE_H
#define CFUSE_H

#define FUSE_USE_VERSION 314
#include <fuse3/fuse_lowlevel.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if FUSE_MAJOR_VERSION != 3 || FUSE_MINOR_VERSION < 14
#error "ContainerFS needs libfuse 3.14 or later (Debian 12: apt-get install libfuse3-dev)"
#endif

/// fuse_session_new. From libfuse 3.17 on it is a macro over an inline function that
/// passes the headers' version to fuse_session_new_versioned: Swift cannot call a macro.
struct fuse_session *cfuse_session_new(struct fuse_args *args, const struct fuse_lowlevel_ops *ops,
                                       size_t ops_size, void *userdata);

/// fuse_session_loop_mt with the loop configuration (fuse_loop_cfg_*). A function in
/// 3.14 and 3.17 as Debian builds them (versioned symbols); a macro over
/// fuse_session_loop_mt_312 where libfuse is built without.
int cfuse_session_loop_mt(struct fuse_session *se, struct fuse_loop_config *config);

/// Replies to a read with `size` bytes of `fd` at `offset`, spliced when the kernel
/// allows (FUSE_BUFVEC_INIT is a macro Swift cannot call).
int cfuse_reply_fd_data(fuse_req_t req, int fd, off_t offset, size_t size);

/// fuse_file_info's bit-fields, set from Swift in one call.
void cfuse_set_open_flags(struct fuse_file_info *fi, bool direct_io, bool keep_cache, bool noflush, bool cache_readdir);

/// The open flags of a request (fi->flags), for symmetry with the setter.
int cfuse_open_flags(const struct fuse_file_info *fi);

/// Builds fuse_args from argv (FUSE_ARGS_INIT is a macro).
struct fuse_args cfuse_args(int argc, char **argv);

/// Turns on the capabilities we want if the kernel offers them; returns the ones taken.
unsigned cfuse_want(struct fuse_conn_info *conn, unsigned capabilities);

/// Sets the connection's limits (max_write, max_readahead, time granularity).
void cfuse_set_limits(struct fuse_conn_info *conn, unsigned max_write, unsigned max_readahead);

// Kernel features libfuse 3.14 predates, added by routing the session's I/O through a
// custom read and writev (fuse_session_custom_io):
// - FUSE passthrough (Linux 6.9+): the reads and writes of an open file go straight to the
//   store's file, in the kernel, without a round trip to the daemon. The writev adds the
//   passthrough flag to the INIT reply and the backing file to OPEN and CREATE replies.
//   The kernel grants it to a daemon with CAP_SYS_ADMIN.
// - FUSE over io_uring (Linux 6.14+, when the fuse module's enable_uring is on, for a
//   daemon running as root): requests come through one ring per CPU instead of /dev/fuse
//   (see ring.h).
// - FUSE_HANDLE_KILLPRIV_V2: the daemon clears set-ID bits when an unprivileged caller
//   writes, truncates or chowns a file; the read hook keeps the request's flag for it.
// - O_TMPFILE (FUSE_TMPFILE, Linux 6.7+): the read hook turns the request into the CREATE
//   it resembles and flags it for the handler.

/// Routes the mounted session's I/O through the hooks. Each feature is asked for in the
/// INIT reply when wanted and offered by the kernel.
int cfuse_use_kernel_features(struct fuse_session *se, bool passthrough, bool uring);

/// Whether the OPEN, CREATE or WRITE this thread serves asks the daemon to clear the
/// file's set-ID bits (FUSE_HANDLE_KILLPRIV_V2: the caller lacks CAP_FSETID), a flag
/// libfuse 3.14 does not pass on. SETATTR carries it in to_set (FUSE_SET_ATTR_KILL_SUID).
bool cfuse_request_kills_suidgid(void);

/// Whether the CREATE this thread serves is the kernel's TMPFILE (open with O_TMPFILE,
/// Linux 6.7+), which libfuse 3.14 does not know: CFuse hands it over as a CREATE of the
/// name "/" in the folder, to be answered as one with an unnamed file.
bool cfuse_request_is_tmpfile(void);

/// Counts every request by opcode from now on (`-o count-requests`); call before the
/// session loop starts. Off, a request costs one test of a flag.
void cfuse_count_requests(bool on);

/// Whether requests are counted.
bool cfuse_counting_requests(void);

/// Requests of `opcode` served so far (0 holds opcodes of 64 and above).
unsigned long cfuse_requests_counted(unsigned opcode);

/// The kernel's name of `opcode` without its FUSE_ prefix ("LOOKUP"), "OTHER" for 0, or
/// NULL for a number FUSE does not use below 64.
const char *cfuse_opcode_name(unsigned opcode);

/// Whether the kernel agreed to passthrough in INIT (and still grants backing files).
bool cfuse_passthrough_active(void);

/// Whether INIT accepted FUSE over io_uring.
bool cfuse_uring_active(void);

/// Requests served through io_uring so far.
unsigned long cfuse_uring_requests(void);

/// Once the loop has ended, before the session is destroyed: stops the rings and the
/// closer; no backing id is opened or closed after this.
void cfuse_end_kernel_features(void);

/// Registers `fd` as a backing file; returns its id (> 0) or -errno.
int cfuse_backing_open(int fd);

/// Drops a backing id (files opened with it keep their backing file).
void cfuse_backing_close(int backing_id);

/// Hands a deleted file's last descriptor and backing id (-1 and 0 for none) to the
/// closer's thread (closer.h), with the bytes its close frees; false when the thread is not
/// running or enough waits already: close them yourself.
bool cfuse_close_later(int fd, int backing_id, uint64_t bytes);

/// fuse_reply_open / fuse_reply_create, with the file's I/O passed through to `backing_id`.
int cfuse_reply_open_backed(fuse_req_t req, const struct fuse_file_info *fi, int backing_id);
int cfuse_reply_create_backed(fuse_req_t req, const struct fuse_entry_param *e,
                              const struct fuse_file_info *fi, int backing_id);

#endif
