/* fsbench: the timed loops of the metadata and tree workloads, in C so that neither
 * process start-up nor an interpreter's per-call cost is part of what is measured.
 * bench/bench.py compiles it with `cc -O2` into its temporary directory at run time.
 *
 *   fsbench create DIR N SIZE   create DIR/f00000.. with SIZE bytes each (open, write, close)
 *   fsbench stat   DIR N        stat(2) each of those files
 *   fsbench list   DIR          opendir/readdir the folder to the end (no stat)
 *   fsbench unlink DIR N        unlink(2) each of those files
 *   fsbench readall DIR         read every regular file below DIR to the end (nftw, no symlinks followed)
 *
 * Each prints one line: `seconds=S count=C bytes=B`, timed with CLOCK_MONOTONIC around
 * the loop only. Any failed call aborts with a message naming the path and errno, so a
 * target that answers wrongly fails loudly instead of looking fast.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char buffer[1 << 20];
static long long total_count, total_bytes;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what, const char *path) {
  fprintf(stderr, "fsbench: %s %s: %s\n", what, path, strerror(errno));
  exit(1);
}

/* File names are relative to DIR, the working directory: every target then walks one
 * component per call, wherever its folder sits (a container's is two or three folders
 * deeper than bindfs's). */
static void name(char *out, size_t size, long i) {
  snprintf(out, size, "f%05ld", i);
}

static void report(double seconds) {
  printf("seconds=%.6f count=%lld bytes=%lld\n", seconds, total_count, total_bytes);
}

static int read_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  if (type != FTW_F) return 0;
  int fd = open(path + ftw->base, O_RDONLY | O_CLOEXEC);   /* FTW_CHDIR: relative to its folder */
  if (fd < 0) die("open", path);
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("read", path);
    }
    if (n == 0) break;
    total_bytes += n;
  }
  close(fd);
  total_count++;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: fsbench create|stat|writestat|list|unlink|readall DIR [N [SIZE]]\n");
    return 64;
  }
  const char *op = argv[1], *dir = argv[2];
  long n = argc > 3 ? atol(argv[3]) : 0;
  long size = argc > 4 ? atol(argv[4]) : 0;
  if (size > (long)sizeof buffer) size = sizeof buffer;
  memset(buffer, 'x', sizeof buffer);
  char path[4096];
  if (strcmp(op, "readall") != 0 && chdir(dir) != 0) die("chdir", dir);
  double start = now();

  if (strcmp(op, "create") == 0) {
    for (long i = 0; i < n; i++) {
      name(path, sizeof path, i);
      int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) die("create", path);
      if (size > 0 && write(fd, buffer, (size_t)size) != size) die("write", path);
      if (close(fd) != 0) die("close", path);
      total_count++;
      total_bytes += size;
    }
  } else if (strcmp(op, "stat") == 0) {
    struct stat st;
    for (long i = 0; i < n; i++) {
      name(path, sizeof path, i);
      if (stat(path, &st) != 0) die("stat", path);
      total_count++;
      total_bytes += st.st_size;
    }
  } else if (strcmp(op, "writestat") == 0) {
    /* A write, then a stat of the file, N times: after a write the kernel no longer
     * trusts its cached size and times, so through FUSE each stat is a GETATTR. */
    struct stat st;
    int fd = open("written", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die("create", "written");
    for (long i = 0; i < n; i++) {
      if (pwrite(fd, buffer, (size_t)size, (off_t)(i % 256) * size) != size) die("write", "written");
      if (stat("written", &st) != 0) die("stat", "written");
      total_count++;
      total_bytes += size;
    }
    if (close(fd) != 0 || unlink("written") != 0) die("close or unlink", "written");
  } else if (strcmp(op, "list") == 0) {
    DIR *d = opendir(".");
    if (!d) die("opendir", dir);
    struct dirent *entry;
    errno = 0;
    while ((entry = readdir(d)) != NULL) {
      if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) total_count++;
      errno = 0;
    }
    if (errno != 0) die("readdir", dir);
    closedir(d);
  } else if (strcmp(op, "unlink") == 0) {
    for (long i = 0; i < n; i++) {
      name(path, sizeof path, i);
      if (unlink(path) != 0) die("unlink", path);
      total_count++;
    }
  } else if (strcmp(op, "readall") == 0) {
    if (nftw(dir, read_one, 64, FTW_PHYS | FTW_CHDIR) != 0) die("nftw", dir);
  } else {
    fprintf(stderr, "fsbench: unknown operation %s\n", op);
    return 64;
  }
  report(now() - start);
  return 0;
}
