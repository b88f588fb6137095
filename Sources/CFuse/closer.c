#include "closer.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <unistd.h>

enum {
    CLOSER_QUEUE = 64,                  // closes waiting at most
    CLOSER_BYTES = 16 << 20,            // and blocks they free at most
};

struct pending_close { int fd, backing_id; uint64_t bytes; };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static struct pending_close queue[CLOSER_QUEUE];
static int waiting;                     // entries of `queue` in use, taken from the end
static uint64_t waiting_bytes;
static bool running, stopping, idle_policy;
static pthread_t thread;

static void close_now(struct pending_close close_) {
    if (close_.fd >= 0) close(close_.fd);
    if (close_.backing_id > 0) cfuse_backing_close(close_.backing_id);
}

static void *closer(void *argument) {
    (void)argument;
    if (idle_policy) {
        struct sched_param none = { 0 };
        sched_setscheduler(0, SCHED_IDLE, &none);
    }
    pthread_mutex_lock(&lock);
    while (!stopping) {
        if (waiting == 0) {
            pthread_cond_wait(&wake, &lock);
            continue;
        }
        struct pending_close next = queue[--waiting];
        waiting_bytes -= next.bytes;
        pthread_mutex_unlock(&lock);
        close_now(next);
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

void closer_start(bool idle) {
    if (running) return;
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);   // the main thread takes the signals
    idle_policy = idle;
    pthread_mutex_lock(&lock);
    stopping = false;
    running = pthread_create(&thread, NULL, closer, NULL) == 0;
    pthread_mutex_unlock(&lock);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
}

void closer_stop(void) {
    if (!running) return;
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
    // What the thread left is closed here, before the device's backing ids go.
    pthread_mutex_lock(&lock);
    running = false;
    while (waiting > 0) close_now(queue[--waiting]);
    waiting_bytes = 0;
    pthread_mutex_unlock(&lock);
}

bool cfuse_close_later(int fd, int backing_id, uint64_t bytes) {
    pthread_mutex_lock(&lock);
    bool queued = running && !stopping && waiting < CLOSER_QUEUE && bytes <= CLOSER_BYTES - waiting_bytes;
    if (queued) {
        queue[waiting++] = (struct pending_close){ fd, backing_id, bytes };
        waiting_bytes += bytes;
        pthread_cond_signal(&wake);
    }
    pthread_mutex_unlock(&lock);
    return queued;
}
