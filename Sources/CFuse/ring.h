// FUSE over io_uring (Linux 6.14+, with the fuse module's enable_uring on): one queue per
// possible CPU, each served by threads pinned to that CPU. The kernel hands a request to
// the queue of the CPU its caller runs on, so the daemon wakes on that same CPU: no
// cross-CPU wake-up per request, the cost that bounds small operations on /dev/fuse.
// Requests go through libfuse's fuse_session_process_buf as if read from /dev/fuse; the
// reply libfuse writes is caught by the session's writev and committed to the ring.
#ifndef CFUSE_RING_H
#define CFUSE_RING_H

#include "CFuse.h"
#include <stdbool.h>
#include <sys/uio.h>

/// Whether this daemon can serve rings: it runs as root and the scheduler's statistics
/// are there (see the guard in ring.c).
bool ring_possible(void);

/// Starts the servers once the INIT reply accepting io_uring is written.
void ring_start(struct fuse_session *se, int device_fd, size_t payload_size);

/// Stops and joins the servers (they also end by themselves when the mount goes away).
void ring_stop(void);

/// Takes the reply when it answers the request this thread serves from a ring;
/// false when the message must go to /dev/fuse (a notification, or not on a ring).
bool ring_take_reply(const struct iovec *iov, int count);

/// Whether this thread serves a request from a ring (splice cannot reach it).
bool ring_serving(void);

/// Requests served from a ring so far.
unsigned long ring_requests_served(void);

/// (shim.c) Looks at a request as the kernel sent it, before libfuse decodes it, on the
/// thread that will serve it (and presents a TMPFILE to libfuse as a CREATE).
void note_request(void *request, size_t size);

#endif
