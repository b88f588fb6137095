/* roundtrip: what one synchronous hop between two processes costs on this machine,
 * the floor under every FUSE request that a program waits for (lookup, create,
 * getattr, setattr, open). bench/run.sh prints it after the table.
 *
 *   roundtrip pipe CPU_A CPU_B N   N one-byte ping-pongs over two pipes between a
 *                                  process pinned to CPU_A and one pinned to CPU_B
 *   roundtrip getxattr PATH N      N getxattr(PATH, "user.roundtrip") calls (ENODATA):
 *                                  through a FUSE mount, one request each
 *
 * Prints `microseconds=M` per round trip, timed with CLOCK_MONOTONIC.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    perror("roundtrip: sched_setaffinity");
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "pipe") == 0) {
    long n = atol(argv[4]);
    int there[2], back[2];
    char byte = 0;
    if (pipe(there) != 0 || pipe(back) != 0) return perror("roundtrip: pipe"), 1;
    pid_t child = fork();
    if (child == 0) {
      pin(atoi(argv[3]));
      for (long i = 0; i < n; i++)
        if (read(there[0], &byte, 1) != 1 || write(back[1], &byte, 1) != 1) _exit(1);
      _exit(0);
    }
    pin(atoi(argv[2]));
    double start = now();
    for (long i = 0; i < n; i++)
      if (write(there[1], &byte, 1) != 1 || read(back[0], &byte, 1) != 1) return perror("roundtrip: pipe"), 1;
    double seconds = now() - start;
    waitpid(child, NULL, 0);
    printf("microseconds=%.2f\n", seconds / n * 1e6);
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "getxattr") == 0) {
    long n = atol(argv[3]);
    char value[64];
    double start = now();
    for (long i = 0; i < n; i++)
      if (getxattr(argv[2], "user.roundtrip", value, sizeof value) >= 0 || errno != ENODATA)
        return fprintf(stderr, "roundtrip: getxattr %s: expected ENODATA\n", argv[2]), 1;
    printf("microseconds=%.2f\n", (now() - start) / n * 1e6);
    return 0;
  }
  fprintf(stderr, "usage: roundtrip pipe CPU_A CPU_B N | roundtrip getxattr PATH N\n");
  return 64;
}
