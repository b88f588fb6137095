#ifndef _GNU_SOURCE
#define _GNU_SOURCE   // splice
#endif
#include "CFuse.h"
#include "kernel_abi.h"
#include "closer.h"
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

struct fuse_session *cfuse_session_new(struct fuse_args *args, const struct fuse_lowlevel_ops *ops,
                                       size_t ops_size, void *userdata) {
    return fuse_session_new(args, ops, ops_size, userdata);
}

int cfuse_session_loop_mt(struct fuse_session *se, struct fuse_loop_config *config) {
    return fuse_session_loop_mt(se, config);
}

int cfuse_reply_fd_data(fuse_req_t req, int fd, off_t offset, size_t size) {
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    buf.buf[0].fd = fd;
    buf.buf[0].pos = offset;
    // A ring's reply is copied to the ring: spliced, it would go to /dev/fuse.
    return fuse_reply_data(req, &buf, ring_serving() ? FUSE_BUF_NO_SPLICE : FUSE_BUF_SPLICE_MOVE);
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

// MARK: Kernel features libfuse 3.14 lacks: passthrough, FUSE over io_uring, KILLPRIV_V2

static bool passthrough_wanted, uring_wanted;
static _Atomic int device_fd = -1;
static struct fuse_session *session;
static _Atomic uint64_t init_unique;         // the INIT request
static _Atomic uint32_t init_offered_flags;  // its flags
static _Atomic uint32_t init_offered;        // its flags2, when flags2 is valid
static atomic_bool passthrough_active, uring_accepted;
static _Thread_local int pending_backing_id; // for the reply this thread is about to send
static _Thread_local bool request_kills_suidgid; // the request this thread serves
static _Thread_local bool request_is_tmpfile;    // the CREATE this thread serves was a TMPFILE

// MARK: Requests counted by opcode (`-o count-requests`, docs/benchmarks.md)

enum { counted_opcodes = 64 };   // FUSE's opcodes are 1-53; CUSE_INIT (4096) and the rest go to 0
static bool counting;            // set before the session starts, never after
static _Atomic unsigned long request_counts[counted_opcodes];

void cfuse_count_requests(bool on) { counting = on; }

bool cfuse_counting_requests(void) { return counting; }

unsigned long cfuse_requests_counted(unsigned opcode) {
    return opcode < counted_opcodes ? atomic_load_explicit(&request_counts[opcode], memory_order_relaxed) : 0;
}

const char *cfuse_opcode_name(unsigned opcode) {
    static const char *const names[] = {
        [1] = "LOOKUP", [2] = "FORGET", [3] = "GETATTR", [4] = "SETATTR", [5] = "READLINK",
        [6] = "SYMLINK", [8] = "MKNOD", [9] = "MKDIR", [10] = "UNLINK", [11] = "RMDIR",
        [12] = "RENAME", [13] = "LINK", [14] = "OPEN", [15] = "READ", [16] = "WRITE",
        [17] = "STATFS", [18] = "RELEASE", [20] = "FSYNC", [21] = "SETXATTR", [22] = "GETXATTR",
        [23] = "LISTXATTR", [24] = "REMOVEXATTR", [25] = "FLUSH", [26] = "INIT", [27] = "OPENDIR",
        [28] = "READDIR", [29] = "RELEASEDIR", [30] = "FSYNCDIR", [31] = "GETLK", [32] = "SETLK",
        [33] = "SETLKW", [34] = "ACCESS", [35] = "CREATE", [36] = "INTERRUPT", [37] = "BMAP",
        [38] = "DESTROY", [39] = "IOCTL", [40] = "POLL", [41] = "NOTIFY_REPLY", [42] = "BATCH_FORGET",
        [43] = "FALLOCATE", [44] = "READDIRPLUS", [45] = "RENAME2", [46] = "LSEEK",
        [47] = "COPY_FILE_RANGE", [48] = "SETUPMAPPING", [49] = "REMOVEMAPPING", [50] = "SYNCFS",
        [51] = "TMPFILE", [52] = "STATX", [53] = "COPY_FILE_RANGE_64",
    };
    if (opcode == 0) return "OTHER";
    return opcode < sizeof names / sizeof names[0] && names[opcode] ? names[opcode] : NULL;
}

void note_request(void *request, size_t size) {
    request_kills_suidgid = false;
    request_is_tmpfile = false;
    struct kernel_in_header *in = request;
    if (size < sizeof *in) return;
    if (counting) {
        unsigned slot = in->opcode < counted_opcodes ? in->opcode : 0;
        atomic_fetch_add_explicit(&request_counts[slot], 1, memory_order_relaxed);
    }
    const void *argument = in + 1;
    size_t argument_size = size - sizeof *in;
    switch (in->opcode) {
    case KERNEL_FUSE_TMPFILE: {
        // open(dir, O_TMPFILE): libfuse 3.14 has no tmpfile operation and would answer
        // ENOSYS (then the kernel gives EOPNOTSUPP). The request is a CREATE in all but
        // its opcode (fuse_create_in, then the name "/"; the reply is an entry and an
        // open file), so libfuse gets it as one, and the handler asks which it was.
        const char *name = (const char *)argument + sizeof(struct kernel_create_in);
        size_t name_size = argument_size > sizeof(struct kernel_create_in) ? argument_size - sizeof(struct kernel_create_in) : 0;
        if (name_size >= 2 && name[0] == '/' && name[1] == '\0') {
            in->opcode = KERNEL_FUSE_CREATE;
            request_is_tmpfile = true;
        }
        break;
    }
    case KERNEL_FUSE_INIT:
        if (argument_size >= sizeof(struct kernel_init_in)) {
            const struct kernel_init_in *init = argument;
            init_offered_flags = init->flags;
            init_offered = (init->flags & KERNEL_INIT_EXT) ? init->flags2 : 0;
            init_unique = in->unique;
        }
        break;
    case KERNEL_FUSE_OPEN:
        request_kills_suidgid = argument_size >= sizeof(struct kernel_open_in)
            && (((const struct kernel_open_in *)argument)->open_flags & KERNEL_OPEN_KILL_SUIDGID);
        break;
    case KERNEL_FUSE_CREATE:
        request_kills_suidgid = argument_size >= sizeof(struct kernel_create_in)
            && (((const struct kernel_create_in *)argument)->open_flags & KERNEL_OPEN_KILL_SUIDGID);
        break;
    case KERNEL_FUSE_WRITE:
        request_kills_suidgid = argument_size >= sizeof(struct kernel_write_in)
            && (((const struct kernel_write_in *)argument)->write_flags & KERNEL_WRITE_KILL_SUIDGID);
        break;
    }
}

bool cfuse_request_kills_suidgid(void) { return request_kills_suidgid; }

bool cfuse_request_is_tmpfile(void) { return request_is_tmpfile; }

static ssize_t session_read(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    ssize_t count = read(fd, buf, len);
    if (count > 0) note_request(buf, (size_t)count);
    return count;
}

/// Adds to the INIT reply what we want of what the kernel offered.
static void patch_init_reply(struct kernel_init_out *init) {
    // The kernel leaves dropping set-ID bits to the daemon (which knows the store file's
    // mode), and can then remember that a file has none: fewer requests per write and
    // chown. libfuse 3.14 cannot ask for it.
    init->flags |= init_offered_flags & KERNEL_HANDLE_KILLPRIV_V2;
    uint32_t offered = init_offered;
    // The kernel refuses passthrough together with the writeback cache.
    if (passthrough_wanted && (offered & KERNEL_PASSTHROUGH_FLAGS2) && !(init->flags & KERNEL_WRITEBACK_CACHE)) {
        init->flags |= KERNEL_INIT_EXT;
        init->flags2 |= KERNEL_PASSTHROUGH_FLAGS2;
        init->max_stack_depth = 1;   // the store is a plain filesystem
        passthrough_active = true;
    }
    if (uring_wanted && (offered & KERNEL_OVER_IO_URING_FLAGS2) && ring_possible()) {
        init->flags |= KERNEL_INIT_EXT;
        init->flags2 |= KERNEL_OVER_IO_URING_FLAGS2;
        uring_accepted = true;
    }
}

/// The largest request or reply body the kernel puts in a ring entry's payload.
static size_t ring_payload_size(const struct kernel_init_out *init) {
    size_t size = init->max_write > KERNEL_MIN_READ_BUFFER ? init->max_write : KERNEL_MIN_READ_BUFFER;
    size_t pages = (size_t)init->max_pages * (size_t)sysconf(_SC_PAGESIZE);
    return pages > size ? pages : size;
}

static ssize_t session_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    const struct kernel_out_header *out = iov[0].iov_base;
    struct iovec *payload = &iov[count > 1 ? count - 1 : 0];
    struct kernel_init_out *init = NULL;
    if (count > 1 && out->error == 0) {
        if (pending_backing_id > 0 && payload->iov_len >= sizeof(struct kernel_open_out)) {
            // The open_out is the end of both replies: alone (OPEN) or after the entry (CREATE).
            struct kernel_open_out *open = (void *)((char *)payload->iov_base + payload->iov_len - sizeof *open);
            open->open_flags |= KERNEL_FOPEN_PASSTHROUGH;
            open->backing_id = pending_backing_id;
        } else if (out->unique == init_unique && init_unique != 0 && payload->iov_len >= sizeof(struct kernel_init_out)) {
            init = payload->iov_base;
            patch_init_reply(init);
        }
    }
    if (ring_take_reply(iov, count)) return (ssize_t)out->len;
    ssize_t written = writev(fd, iov, count);
    // The kernel has taken the INIT reply: the closer can start, the rings can register.
    if (init != NULL && written > 0) {
        closer_start(uring_accepted);
        if (uring_accepted) ring_start(session, device_fd, ring_payload_size(init));
    }
    return written;
}

static ssize_t session_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                   unsigned flags, void *userdata) {
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

int cfuse_use_kernel_features(struct fuse_session *se, bool passthrough, bool uring) {
    static const struct fuse_custom_io io = {
        .writev = session_writev, .read = session_read, .splice_send = session_splice_send,
    };
    passthrough_wanted = passthrough;
    uring_wanted = uring;
    session = se;
    device_fd = fuse_session_fd(se);
    return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

bool cfuse_passthrough_active(void) { return passthrough_active; }

bool cfuse_uring_active(void) { return uring_accepted; }

unsigned long cfuse_uring_requests(void) { return ring_requests_served(); }

void cfuse_end_kernel_features(void) {
    ring_stop();
    closer_stop();
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
