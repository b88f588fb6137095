#include "CFuse.h"

int cfuse_reply_fd_data(fuse_req_t req, int fd, off_t offset, size_t size) {
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    buf.buf[0].fd = fd;
    buf.buf[0].pos = offset;
    return fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void cfuse_set_open_flags(struct fuse_file_info *fi, bool direct_io, bool keep_cache, bool noflush, bool cache_readdir) {
    fi->direct_io = direct_io;
    fi->keep_cache = keep_cache;
    fi->noflush = noflush;
    fi->cache_readdir = cache_readdir;
}

int cfuse_open_flags(const struct fuse_file_info *fi) { return fi->flags; }

struct fuse_args cfuse_args(int argc, char **argv) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    return args;
}

unsigned cfuse_want(struct fuse_conn_info *conn, unsigned capabilities) {
    unsigned taken = conn->capable & capabilities;
    conn->want |= taken;
    return taken;
}

void cfuse_set_limits(struct fuse_conn_info *conn, unsigned max_write, unsigned max_readahead) {
    conn->max_write = max_write;
    conn->max_readahead = max_readahead;
    conn->time_gran = 1;
}
