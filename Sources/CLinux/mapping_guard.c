// Shared file mappings that survive the file being truncated by someone else.
//
// A page of a MAP_SHARED mapping that lies past the end of its file faults with SIGBUS,
// and the default action kills the process. The daemon maps a store file (the use table,
// `.containerfs/uses`), which the store's owner can truncate at any time: checking the
// size before each access would still race with the truncation. Instead a SIGBUS handler
// replaces the faulting page of a registered mapping with a private zero-filled page and
// returns, and the access that faulted runs again on it. What is written there is not
// kept, which only costs the use table some records. A SIGBUS anywhere else goes to the
// handler that was installed before (or the default action), as if this one were not
// there. Everything the handler calls is async-signal-safe.
#include "CLinux.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

enum { guarded_capacity = 64 };

static struct {
    atomic_bool taken;
    _Atomic uintptr_t start;  // 0: not in use (written last when registering, first when not)
    _Atomic uintptr_t end;
    _Atomic int protection;
} guarded[guarded_capacity];

static struct sigaction previous_handler;
static pthread_once_t installed = PTHREAD_ONCE_INIT;
static int install_error;
static uintptr_t page_size;

static void on_sigbus(int signal, siginfo_t *info, void *context) {
    (void)context;
    uintptr_t address = (uintptr_t)info->si_addr;
    if (info->si_code > 0) {  // a fault, not a signal sent by kill(2) or the like
        for (int i = 0; i < guarded_capacity; i++) {
            uintptr_t start = atomic_load(&guarded[i].start);
            if (start == 0 || address < start || address >= atomic_load(&guarded[i].end)) continue;
            int saved = errno;
            void *page = (void *)(address & ~(page_size - 1));
            void *mapped = mmap(page, page_size, atomic_load(&guarded[i].protection),
                                MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            errno = saved;
            if (mapped != MAP_FAILED) return;
            break;
        }
    }
    // Not ours: hand it on. A fault happens again on return and reaches that handler; a
    // signal that was sent is raised again.
    sigaction(SIGBUS, &previous_handler, NULL);
    if (info->si_code <= 0) raise(signal);
}

static void install(void) {
    page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct sigaction action = {0};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous_handler) != 0) install_error = errno;
}

int clinux_guard_mapping(void *base, size_t length, int protection) {
    pthread_once(&installed, install);
    if (install_error != 0) {
        errno = install_error;
        return -1;
    }
    for (int i = 0; i < guarded_capacity; i++) {
        bool expected = false;
        if (!atomic_compare_exchange_strong(&guarded[i].taken, &expected, true)) continue;
        atomic_store(&guarded[i].protection, protection);
        atomic_store(&guarded[i].end, (uintptr_t)base + length);
        atomic_store(&guarded[i].start, (uintptr_t)base);
        return 0;
    }
    errno = ENOSPC;
    return -1;
}

void clinux_unguard_mapping(void *base) {
    for (int i = 0; i < guarded_capacity; i++) {
        if (atomic_load(&guarded[i].start) != (uintptr_t)base) continue;
        atomic_store(&guarded[i].start, 0);
        atomic_store(&guarded[i].end, 0);
        atomic_store(&guarded[i].taken, false);
        return;
    }
}
