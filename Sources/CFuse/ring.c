#ifndef _GNU_SOURCE
#define _GNU_SOURCE   // pthread_setaffinity_np
#endif
#include "ring.h"
#include "kernel_abi.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum {
    // Servers per CPU queue. Each has one ring entry, so the kernel hands a request only
    // to an idle server, and a slow request (an fsync) holds up no other: with a single
    // server per CPU, a getxattr beside an fsync loop on the same CPU took 210 µs.
    RING_SERVERS_PER_QUEUE = 4,
    RING_HEADROOM = 4096,    // before the payload: room to put the headers back in front
};

struct ring_entry {
    struct kernel_uring_req_header header;
    struct iovec iov[2];
    char *buffer;            // RING_HEADROOM bytes, then the payload
    uint64_t unique;         // the request being served
    bool replied;
};

/// A thread serving one queue (the requests from one CPU) through its own io_uring.
struct ring_server {
    uint16_t qid;
    pthread_t thread;
    _Atomic pid_t tid;
    uint64_t run_delay;      // nanoseconds spent runnable but not running, at the guard's last look
    int boost_ticks;         // guard ticks left under the normal policy
    struct io_uring ring;
    struct ring_entry entry;
};

static struct fuse_session *ring_session;
static int ring_device_fd = -1;
static size_t ring_payload_size;
static _Atomic int server_count;
static struct ring_server *servers;
static int ring_stop_fd = -1;                     // eventfd (semaphore): one count stops one server
static pthread_t guard_thread;
static atomic_bool stopping;
static atomic_ulong served;                       // requests served from a ring, for -o debug
static _Thread_local struct ring_entry *serving;  // the entry whose request this thread serves

static char *payload_of(struct ring_entry *entry) { return entry->buffer + RING_HEADROOM; }

static void prepare_command(struct ring_server *server, uint32_t command, uint64_t commit_id) {
    struct ring_entry *entry = &server->entry;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&server->ring);   // never full: one command at a time
    memset(sqe, 0, 128);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = ring_device_fd;
    sqe->cmd_op = command;
    sqe->addr = (uintptr_t)entry->iov;
    sqe->len = 2;
    struct kernel_uring_cmd_req *request = (void *)sqe->cmd;
    request->qid = server->qid;
    request->commit_id = commit_id;
    io_uring_sqe_set_data(sqe, entry);
}

static void reply_error(struct ring_entry *entry, uint64_t unique, int error) {
    struct kernel_out_header out = { .len = sizeof out, .error = -error, .unique = unique };
    memcpy(entry->header.in_out, &out, sizeof out);
    entry->header.ring_ent_in_out.payload_sz = 0;
}

/// Serves the request in `entry`: the kernel split it into header, opcode header and
/// payload; put back together in front of the payload, it is what /dev/fuse delivers.
static void serve_request(struct ring_server *server) {
    struct ring_entry *entry = &server->entry;
    struct kernel_in_header in;
    memcpy(&in, entry->header.in_out, sizeof in);
    uint32_t payload_size = entry->header.ring_ent_in_out.payload_sz;
    uint64_t commit_id = entry->header.ring_ent_in_out.commit_id;
    size_t op_size = in.len - sizeof in - payload_size;
    if (in.len < sizeof in + payload_size || op_size > sizeof entry->header.op_in || payload_size > ring_payload_size) {
        reply_error(entry, in.unique, EIO);
    } else {
        char *start = payload_of(entry) - op_size - sizeof in;
        memcpy(start, &in, sizeof in);
        memcpy(start + sizeof in, entry->header.op_in, op_size);
        struct fuse_buf buf = { .size = in.len, .mem = start };
        entry->unique = in.unique;
        entry->replied = false;
        serving = entry;
        note_request(start, in.len);
        fuse_session_process_buf(ring_session, &buf);
        serving = NULL;
        // Every callback replies before it returns; a request left unanswered would hang.
        if (!entry->replied) reply_error(entry, in.unique, EIO);
    }
    prepare_command(server, KERNEL_URING_CMD_COMMIT_AND_FETCH, commit_id);
}

static void set_policy(pid_t tid, int policy) {
    struct sched_param none = { 0 };
    sched_setscheduler(tid, policy, &none);
}

// Why SCHED_IDLE: a server wakes the caller when it commits the reply. The
// scheduler keeps the caller on its own CPU only if that CPU counts as idle; with the
// server still running there, it moves the caller to the other CPU, and waking a
// halted vCPU costs more here than the whole request (14,765 of 20,000 getxattr calls
// migrated). A CPU running only SCHED_IDLE threads counts as idle, so the caller stays
// and preempts the server: a request takes 17 µs instead of 28 µs on /dev/fuse.
//
// The price: a SCHED_IDLE thread pinned to a CPU that a busy program also uses gets
// almost no time there (500 creates beside a busy loop took 134 s). So a guard looks
// every GUARD_TICK_MS at how long each server waited to run; one that waited more than
// half the tick runs under the normal policy for the next GUARD_BOOST_TICKS.
enum { GUARD_TICK_MS = 10, GUARD_BOOST_TICKS = 100 };

/// Nanoseconds `tid` has spent runnable but waiting for a CPU (second field of schedstat).
static bool read_run_delay(pid_t tid, uint64_t *delay) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tid);
    FILE *file = fopen(path, "r");
    if (file == NULL) return false;
    unsigned long long running, waiting;
    bool read = fscanf(file, "%llu %llu", &running, &waiting) == 2;
    fclose(file);
    if (read) *delay = waiting;
    return read;
}

static void *guard(void *argument) {
    (void)argument;
    while (!atomic_load(&stopping)) {
        usleep(GUARD_TICK_MS * 1000);
        for (int i = 0; i < server_count; i++) {
            struct ring_server *server = &servers[i];
            uint64_t delay;
            pid_t tid = atomic_load(&server->tid);
            if (tid == 0 || !read_run_delay(tid, &delay)) continue;
            if (delay - server->run_delay > GUARD_TICK_MS * 1000000ull / 2) {
                if (server->boost_ticks == 0) set_policy(tid, SCHED_OTHER);
                server->boost_ticks = GUARD_BOOST_TICKS;
            } else if (server->boost_ticks > 0 && --server->boost_ticks == 0) {
                set_policy(tid, SCHED_IDLE);
            }
            server->run_delay = delay;
        }
    }
    return NULL;
}

static void *run_server(void *argument) {
    struct ring_server *server = argument;
    // Requests from this CPU come to this queue: served here, the reply wakes the caller here.
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(server->qid, &cpus);
    pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
    set_policy(gettid(), SCHED_IDLE);
    server->tid = gettid();

    // SQE128: a command's request is 40 bytes, beyond a plain entry's 16.
    struct io_uring_params params = {
        .flags = IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
    };
    int status = io_uring_queue_init_params(4, &server->ring, &params);
    if (status < 0) {
        fprintf(stderr, "containerfs: io_uring for CPU %u: %s; requests stay on /dev/fuse\n", server->qid, strerror(-status));
        return NULL;
    }
    uint64_t stop_count;
    struct io_uring_sqe *stop = io_uring_get_sqe(&server->ring);
    io_uring_prep_read(stop, ring_stop_fd, &stop_count, sizeof stop_count, 0);
    io_uring_sqe_set_data(stop, NULL);
    prepare_command(server, KERNEL_URING_CMD_REGISTER, 0);

    bool live = true, stopping = false;
    while (live && !stopping) {
        status = io_uring_submit_and_wait(&server->ring, 1);
        if (status < 0 && status != -EINTR) break;
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&server->ring, head, cqe) {
            seen++;
            if (io_uring_cqe_get_data(cqe) == NULL) {
                stopping = true;
            } else if (cqe->res < 0) {
                // ENOTCONN: the mount is gone. Anything else (a refused REGISTER) ends the server too.
                if (cqe->res != -ENOTCONN) fprintf(stderr, "containerfs: io_uring for CPU %u: %s\n", server->qid, strerror(-cqe->res));
                live = false;
            } else {
                serve_request(server);
                atomic_fetch_add_explicit(&served, 1, memory_order_relaxed);
            }
        }
        io_uring_cq_advance(&server->ring, seen);
    }
    io_uring_submit(&server->ring);   // the reply of a request served along with the stop
    io_uring_queue_exit(&server->ring);
    return NULL;
}

/// The number of CPUs the kernel may run on, one queue each ("0-N" in sysfs).
static int possible_cpus(void) {
    FILE *file = fopen("/sys/devices/system/cpu/possible", "r");
    int first = 0, last = -1;
    if (file) {
        if (fscanf(file, "%d-%d", &first, &last) == 1) last = first;
        fclose(file);
    }
    return last >= 0 ? last + 1 : 0;
}

void ring_start(struct fuse_session *se, int device_fd, size_t payload_size) {
    int count = possible_cpus() * RING_SERVERS_PER_QUEUE;
    if (count <= 0 || servers != NULL) return;
    ring_stop_fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
    servers = calloc((size_t)count, sizeof *servers);
    if (ring_stop_fd < 0 || servers == NULL) return;
    ring_session = se;
    ring_device_fd = device_fd;
    ring_payload_size = payload_size;
    // The threads take no signals: the daemon's main thread handles them. Except those a
    // fault raises in the thread itself: blocked, the kernel kills the process instead of
    // running their handler (the use table's SIGBUS guard, mapping_guard.c).
    sigset_t all, previous;
    sigfillset(&all);
    for (int fault = 0, faults[] = { SIGBUS, SIGSEGV, SIGFPE, SIGILL, SIGTRAP, SIGSYS }; fault < 6; fault++) {
        sigdelset(&all, faults[fault]);
    }
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    server_count = count;   // the guard watches the servers whose thread has started
    if (pthread_create(&guard_thread, NULL, guard, NULL) != 0) server_count = count = 0;
    for (int i = 0; i < count; i++) {
        struct ring_server *server = &servers[i];
        struct ring_entry *entry = &server->entry;
        server->qid = (uint16_t)(i / RING_SERVERS_PER_QUEUE);
        entry->buffer = aligned_alloc(4096, RING_HEADROOM + payload_size);
        entry->iov[0] = (struct iovec){ &entry->header, sizeof entry->header };
        entry->iov[1] = (struct iovec){ payload_of(entry), payload_size };
        if (entry->buffer == NULL || pthread_create(&server->thread, NULL, run_server, server) != 0) {
            free(entry->buffer);
            server_count = i;
            break;
        }
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
}

void ring_stop(void) {
    if (servers == NULL) return;
    atomic_store(&stopping, true);
    pthread_join(guard_thread, NULL);
    uint64_t count = (uint64_t)server_count;
    if (write(ring_stop_fd, &count, sizeof count) < 0) perror("containerfs: io_uring stop");
    for (int i = 0; i < server_count; i++) {
        pthread_join(servers[i].thread, NULL);
        free(servers[i].entry.buffer);
    }
    free(servers);
    servers = NULL;
    close(ring_stop_fd);
    ring_stop_fd = -1;
}

bool ring_possible(void) {
    // Only root may put a thread back under the normal policy once it is SCHED_IDLE, and
    // the guard needs the scheduler's statistics.
    uint64_t delay;
    return geteuid() == 0 && read_run_delay(gettid(), &delay);
}

bool ring_serving(void) { return serving != NULL; }

unsigned long ring_requests_served(void) { return atomic_load(&served); }

bool ring_take_reply(const struct iovec *iov, int count) {
    struct ring_entry *entry = serving;
    if (entry == NULL || count < 1 || iov[0].iov_len < sizeof(struct kernel_out_header)) return false;
    struct kernel_out_header out;
    memcpy(&out, iov[0].iov_base, sizeof out);
    if (out.unique != entry->unique) return false;
    // The header goes to the header block, everything after it to the payload.
    char *payload = payload_of(entry);
    size_t size = 0;
    for (int i = 0; i < count; i++) {
        const char *base = iov[i].iov_base;
        size_t length = iov[i].iov_len;
        if (i == 0) { base += sizeof out; length -= sizeof out; }
        if (size + length > ring_payload_size) {
            reply_error(entry, out.unique, EIO);
            entry->replied = true;
            return true;
        }
        memmove(payload + size, base, length);
        size += length;
    }
    memcpy(entry->header.in_out, &out, sizeof out);
    entry->header.ring_ent_in_out.payload_sz = (uint32_t)size;
    entry->replied = true;
    return true;
}
