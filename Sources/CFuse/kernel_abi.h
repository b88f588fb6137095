// The parts of the kernel's FUSE protocol (7.42, Linux 6.14) that Debian 12's
// linux/fuse.h (7.38) and libfuse 3.14 lack (passthrough and FUSE over io_uring), or that
// libfuse 3.14 does not pass on (the kill-set-ID flags of requests, O_TMPFILE).
#ifndef CFUSE_KERNEL_ABI_H
#define CFUSE_KERNEL_ABI_H

#include <stdint.h>
#include <sys/ioctl.h>

enum {
    KERNEL_FUSE_OPEN = 14,
    KERNEL_FUSE_WRITE = 16,
    KERNEL_FUSE_INIT = 26,
    KERNEL_FUSE_CREATE = 35,
    KERNEL_FUSE_TMPFILE = 51,               // protocol 7.39, Linux 6.7
    KERNEL_HANDLE_KILLPRIV_V2 = 1u << 28,   // flags
    KERNEL_OPEN_KILL_SUIDGID = 1u << 0,     // open_flags of OPEN and CREATE
    KERNEL_WRITE_KILL_SUIDGID = 1u << 2,    // write_flags of WRITE
    KERNEL_INIT_EXT = 1u << 30,             // flags: flags2 is valid
    KERNEL_WRITEBACK_CACHE = 1u << 16,      // flags
    KERNEL_PASSTHROUGH_FLAGS2 = 1u << 5,    // FUSE_PASSTHROUGH, 1ULL << 37, in flags2
    KERNEL_OVER_IO_URING_FLAGS2 = 1u << 9,  // FUSE_OVER_IO_URING, 1ULL << 41, in flags2
    KERNEL_FOPEN_PASSTHROUGH = 1u << 7,
    KERNEL_MIN_READ_BUFFER = 8192,
};
struct kernel_in_header { uint32_t len, opcode; uint64_t unique, nodeid; uint32_t uid, gid, pid; uint16_t extlen, padding; };
struct kernel_out_header { uint32_t len; int32_t error; uint64_t unique; };
struct kernel_init_in { uint32_t major, minor, max_readahead, flags, flags2; };
struct kernel_open_in { uint32_t flags, open_flags; };
struct kernel_create_in { uint32_t flags, mode, umask, open_flags; };
struct kernel_write_in { uint64_t fh, offset; uint32_t size, write_flags; uint64_t lock_owner; uint32_t flags, padding; };
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

// FUSE over io_uring: each ring entry is a header block and a payload buffer.
struct kernel_uring_ent_in_out { uint64_t flags, commit_id; uint32_t payload_sz, padding; uint64_t reserved; };
struct kernel_uring_req_header {
    char in_out[128];   // fuse_in_header on fetch, fuse_out_header on commit
    char op_in[128];    // the opcode's own header (the request's first argument)
    struct kernel_uring_ent_in_out ring_ent_in_out;
};
enum { KERNEL_URING_CMD_REGISTER = 1, KERNEL_URING_CMD_COMMIT_AND_FETCH = 2 };
struct kernel_uring_cmd_req { uint64_t flags, commit_id; uint16_t qid; uint8_t padding[6]; };

#endif
