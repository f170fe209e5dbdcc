// Where a locked instruction sits after a commit's fence, and what it
// costs: why a one-word commit stays above the floor of `rewind bench
// overhead` (see docs/design.md, the commit ring). Each "transaction": the previous
// one's data line written back (clwb, deferred as rewind defers it), one
// log line by non-temporal stores, one sfence, then the in-place store of
// this one's value, and W units of other work.
//   mode 0: no locked instruction
//   mode 2: a locked instruction right after the fence, then the work
//   mode 3: the work, then the locked instruction (before the next fence)
// Build and run (tmpfs for the pool file):
//   gcc -O2 -mclwb scripts/fence-overlap.c -o /tmp/fence-overlap
//   for w in 0 100 200; do for m in 0 2 3; do /tmp/fence-overlap $m $w 2000000; done; done
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
volatile uint64_t dummy; volatile uint64_t sink;
static inline void work(int w){ uint64_t a=sink; for(int i=0;i<w;i++){ a = a*6364136223846793005ull + 1442695040888963407ull; __asm__ volatile("" : "+r"(a)); } sink=a; }
int main(int argc,char**argv){
  int mode=atoi(argv[1]); int w=atoi(argv[2]); long n=atol(argv[3]);
  int fd=open("/dev/shm/flo2",O_RDWR|O_CREAT|O_TRUNC,0644); size_t L=64<<20; ftruncate(fd,L);
  char*m=mmap(0,L,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0); for(size_t i=0;i<L;i+=4096)m[i]=0;
  uint64_t x=88172645463325252ull; uint64_t *prev=0; double t0=now();
  for(long i=0;i<n;i++){
    x^=x<<13;x^=x>>7;x^=x<<17; uint64_t *d=(uint64_t*)(m+(8<<20)+(x%(1<<20))*8);
    if(mode==3){ work(w); __atomic_fetch_add(&dummy,1,__ATOMIC_SEQ_CST); }
    long long *lg=(long long*)(m+(i%4096)*64);
    if(prev) _mm_clwb(prev);
    _mm_stream_si64(lg,i); _mm_stream_si64(lg+1,(long long)d); _mm_stream_si64(lg+2,i);
    _mm_sfence();
    if(mode==1 || mode==2) __atomic_fetch_add(&dummy,1,__ATOMIC_SEQ_CST);
    *d=i; prev=d;
    if(mode==2 || mode==0) work(w);
  }
  printf("mode %d work %d: %.1f ns/tx\n",mode,w,(now()-t0)/n); unlink("/dev/shm/flo2"); return 0;}
