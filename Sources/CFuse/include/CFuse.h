// libfuse3's low-level API. FUSE_USE_VERSION must be defined before the include,
// which a module map cannot do; 314 makes fuse_session_loop_mt a real function.
#ifndef CFUSE_H
#define CFUSE_H

#define FUSE_USE_VERSION 314
#include <fuse3/fuse_lowlevel.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

#endif
