// Why one benchmark run of a tree differs from the next on a shared VM
// (BENCHMARKS.md, "Noise"): the latency of dependent random reads over a
// few MiB of a fresh tmpfs file, the working set of `bench btree`'s trees.
// For each of F fresh files (one process) it times reads over S MiB, R
// times on the same file. On the 2-core VM: at 2 MiB 25-39 ns a read (the
// last-level cache), at 4 MiB 66-155 ns, differing between files and
// between repeats on one file, at 8 MiB 123-183 ns (memory). The share of
// the shared cache the other tenants leave moves the cliff between 2 and
// 4 MiB, where a 50,000-entry tree and its engine's structures sit.
// Build and run:
//   gcc -O2 scripts/mem-placement.c -o /tmp/mem-placement
//   for s in 2 4 8; do /tmp/mem-placement $s 5 3; done
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
int main(int argc, char **argv) {
  size_t mib = argc > 1 ? atol(argv[1]) : 8;
  int files = argc > 2 ? atoi(argv[2]) : 6, reps = argc > 3 ? atoi(argv[3]) : 3;
  size_t n = (mib << 20) / 8, reads = 2000000;
  uint64_t x = 88172645463325252ull, sink = 0;
  for (int f = 0; f < files; f++) {
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/mem-placement-%d-%d", getpid(), f);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, n * 8) != 0) { perror(path); return 1; }
    uint64_t *a = mmap(0, n * 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    unlink(path);
    if (a == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t i = 0; i < n; i++) a[i] = i;
    printf("file %d:", f);
    for (int r = 0; r < reps; r++) {
      double t0 = now();
      for (size_t i = 0; i < reads; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        x += a[x % n] & 1; // the next index depends on this read
      }
      sink ^= x;
      printf(" %.0f", (now() - t0) / reads);
    }
    printf(" ns/read\n");
    munmap(a, n * 8);
    close(fd);
  }
  // The reads' result used, so that the compiler keeps the loops.
  if (sink == 42) printf("(%llu)\n", (unsigned long long)sink);
  return 0;
}
