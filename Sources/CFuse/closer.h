// The last close of a deleted file frees its blocks, and on a disk mounted with `discard`
// ext4 waits there for the discard. The callbacks close after the reply, so the program
// does not wait for it; but the thread that closes does, and that thread is the one the
// program's next request needs: the ring server of its CPU, or the /dev/fuse worker the
// pool would otherwise not have to replace. So one thread of its own takes these closes.
// Beside rings it runs under SCHED_IDLE, only when a CPU would idle, so that it never
// takes a CPU from the program or moves it (ring.c says why that matters); beside
// /dev/fuse, whose workers run on the other CPU anyway, under the normal policy.
// 5,000 unlinks: io_uring 0.53-0.55 s -> 0.27-0.29 s, /dev/fuse 0.52 -> 0.43 s (medians);
// docs/benchmarks.md has the figures.
//
// At most CLOSER_QUEUE closes freeing CLOSER_BYTES wait: past that the caller closes
// itself, so the store's own free space trails the deletes by a bounded amount.
#ifndef CFUSE_CLOSER_H
#define CFUSE_CLOSER_H

#include "CFuse.h"
#include <stdbool.h>

/// Starts the thread once INIT is answered; `idle` when requests come through rings.
void closer_start(bool idle);

/// Stops the thread and closes what still waits (before backing ids can no longer be closed).
void closer_stop(void);

#endif
