#ifndef _GNU_SOURCE
#define _GNU_SOURCE   // splice
#endif
#include "CFuse.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

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

// MARK: Passthrough

// The kernel ABI of protocol 7.40, which Debian 12's linux/fuse.h (7.38) lacks.
enum {
    KERNEL_FUSE_INIT = 26,
    KERNEL_INIT_EXT = 1u << 30,             // flags: flags2 is valid
    KERNEL_WRITEBACK_CACHE = 1u << 16,      // flags
    KERNEL_PASSTHROUGH_FLAGS2 = 1u << 5,    // FUSE_PASSTHROUGH, 1ULL << 37, in flags2
    KERNEL_FOPEN_PASSTHROUGH = 1u << 7,
};
struct kernel_in_header { uint32_t len, opcode; uint64_t unique, nodeid; uint32_t uid, gid, pid; uint16_t extlen, padding; };
struct kernel_out_header { uint32_t len; int32_t error; uint64_t unique; };
struct kernel_init_in { uint32_t major, minor, max_readahead, flags, flags2; };
struct kernel_init_out {
    uint32_t major, minor, max_readahead, flags;
    uint16_t max_background, congestion_threshold;
    uint32_t max_write, time_gran;
    uint16_t max_pages, map_alignment;
    uint32_t flags2, max_stack_depth;
};
struct kernel_open_out { uint64_t fh; uint32_t open_flags; int32_t backing_id; };
struct kernel_backing_map { int32_t fd; uint32_t flags; uint64_t padding; };
#define KERNEL_DEV_IOC_BACKING_OPEN _IOW(229, 1, struct kernel_backing_map)
#define KERNEL_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

static bool passthrough_wanted;
static _Atomic int device_fd = -1;
static _Atomic uint64_t init_unique;         // the INIT request, when the kernel offers passthrough
static atomic_bool passthrough_active;
static _Thread_local int pending_backing_id; // for the reply this thread is about to send

static ssize_t passthrough_read(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    ssize_t count = read(fd, buf, len);
    const struct kernel_in_header *in = buf;
    if (count >= (ssize_t)(sizeof *in + sizeof(struct kernel_init_in)) && in->opcode == KERNEL_FUSE_INIT) {
        const struct kernel_init_in *init = (const void *)(in + 1);
        if ((init->flags & KERNEL_INIT_EXT) && (init->flags2 & KERNEL_PASSTHROUGH_FLAGS2)) init_unique = in->unique;
    }
    return count;
}

static ssize_t passthrough_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    const struct kernel_out_header *out = iov[0].iov_base;
    struct iovec *payload = &iov[count > 1 ? count - 1 : 0];
    if (count > 1 && out->error == 0) {
        if (pending_backing_id > 0 && payload->iov_len >= sizeof(struct kernel_open_out)) {
            // The open_out is the end of both replies: alone (OPEN) or after the entry (CREATE).
            struct kernel_open_out *open = (void *)((char *)payload->iov_base + payload->iov_len - sizeof *open);
            open->open_flags |= KERNEL_FOPEN_PASSTHROUGH;
            open->backing_id = pending_backing_id;
        } else if (passthrough_wanted && out->unique == init_unique && init_unique != 0
                   && payload->iov_len >= sizeof(struct kernel_init_out)) {
            struct kernel_init_out *init = payload->iov_base;
            // The kernel refuses passthrough together with the writeback cache.
            if (!(init->flags & KERNEL_WRITEBACK_CACHE)) {
                init->flags |= KERNEL_INIT_EXT;
                init->flags2 |= KERNEL_PASSTHROUGH_FLAGS2;
                init->max_stack_depth = 1;   // the store is a plain filesystem
                passthrough_active = true;
            }
        }
    }
    return writev(fd, iov, count);
}

static ssize_t passthrough_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                       unsigned flags, void *userdata) {
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

int cfuse_enable_passthrough(struct fuse_session *se, bool wanted) {
    static const struct fuse_custom_io io = {
        .writev = passthrough_writev, .read = passthrough_read, .splice_send = passthrough_splice_send,
    };
    passthrough_wanted = wanted;
    device_fd = fuse_session_fd(se);
    return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

bool cfuse_passthrough_active(void) { return passthrough_active; }

void cfuse_end_passthrough(void) {
    passthrough_active = false;
    device_fd = -1;
}

int cfuse_backing_open(int fd) {
    struct kernel_backing_map map = { .fd = fd };
    int id = ioctl(device_fd, KERNEL_DEV_IOC_BACKING_OPEN, &map);
    if (id >= 0) return id;
    int error = errno;
    // Without CAP_SYS_ADMIN no backing file is ever granted: stop asking.
    if (error == EPERM) passthrough_active = false;
    return -error;
}

void cfuse_backing_close(int backing_id) {
    uint32_t id = (uint32_t)backing_id;
    if (device_fd >= 0) ioctl(device_fd, KERNEL_DEV_IOC_BACKING_CLOSE, &id);
}

int cfuse_reply_open_backed(fuse_req_t req, const struct fuse_file_info *fi, int backing_id) {
    pending_backing_id = backing_id;
    int result = fuse_reply_open(req, fi);
    pending_backing_id = 0;
    return result;
}

int cfuse_reply_create_backed(fuse_req_t req, const struct fuse_entry_param *e,
                              const struct fuse_file_info *fi, int backing_id) {
    pending_backing_id = backing_id;
    int result = fuse_reply_create(req, e, fi);
    pending_backing_id = 0;
    return result;
}
