// Where a commit's other stores fall against its fence, and whether the
// data line's clwb is issued at once or deferred to the next fence: why a
// write-back of many lines is issued at once (`DEFERRED_MAX` in
// crates/rewind/src/persist/mod.rs; docs/design.md). Each "transaction":
// one log line by non-temporal stores, one sfence, one random data word
// stored in place and written back, and N other stores (kind 1) or N
// steps of arithmetic (kind 0), placed by `where`:
//   where 0: the other work before the log line (after the last clwb)
//   where 1: between the log line and the sfence
//   where 2: after the sfence, before the data store and its clwb
//   where 3: the data store right after the sfence, then the work, its
//            clwb deferred to just before the next sfence (rewind's way)
// On the 2-core VM (AMD EPYC, tmpfs), ns per transaction, where 0 / 1 /
// 2 / 3: 200 other stores 175 / 180 / 312 / 195; 400 stores 218 / 209 /
// 361 / 248 (two runs: 170 / 178 / 269 / 189 and 191 / 190 / 328 / 238).
// 300 steps of arithmetic cost 294 wherever they are. Stores after an
// sfence wait for its drain, and stores queued before the data line's
// clwb delay it too.
// Build and run (tmpfs for the file):
//   gcc -O2 -mclwb scripts/write-back-order.c -o /tmp/write-back-order
//   for n in 100 200 400; do for w in 0 1 2 3; do /tmp/write-back-order $w $n 1; done; done
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <x86intrin.h>
#include <time.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static volatile uint64_t sinkv;
__attribute__((noinline)) static uint64_t alu(int n, uint64_t x){ for(int i=0;i<n;i++){ x = x*0x9e3779b97f4a7c15ULL + i; __asm__ volatile("" : "+r"(x)); } return x; }
__attribute__((noinline)) static void stores(int n, uint64_t *s){ for(int i=0;i<n;i++){ s[i&63]=i; __asm__ volatile("" ::: "memory"); } }
int main(int argc,char**argv){
  int where=atoi(argv[1]); int n=atoi(argv[2]); int kind=argc>3?atoi(argv[3]):0;
  int fd=open("/dev/shm/write-back-order.bin",O_RDWR|O_CREAT|O_TRUNC,0644); size_t sz=64<<20; ftruncate(fd,sz);
  char*m=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0); memset(m,0,sz);
  uint64_t *ring=(uint64_t*)m, *data=(uint64_t*)(m+(16<<20)); uint64_t st[64];
  uint64_t x=1; int N=2000000; size_t M=(8<<20)/8;
  uint64_t r=12345; size_t prevj=0;
  double t0=now();
  for(int i=0;i<N;i++){
    r = r*6364136223846793005ULL+1442695040888963407ULL; size_t j=(r>>20)%M;
    if(where==0){ if(kind) stores(n,st); else x=alu(n,x);} 
    __m128i v=_mm_set1_epi64x(i); char*l=(char*)ring+((size_t)i%4096)*64;
    _mm_stream_si128((__m128i*)l,v);_mm_stream_si128((__m128i*)(l+16),v);_mm_stream_si128((__m128i*)(l+32),v);_mm_stream_si128((__m128i*)(l+48),v);
    if(where==1){ if(kind) stores(n,st); else x=alu(n,x);}
    if(where==3) _mm_clwb(&data[prevj]);
    _mm_sfence();
    if(where==2){ if(kind) stores(n,st); else x=alu(n,x);}
    if(where==3){ data[j]=i; if(kind) stores(n,st); else x=alu(n,x); prevj=j; continue; }
    data[j]=i; _mm_clwb(&data[j]);
  }
  double t=(now()-t0)/N; sinkv=x; printf("where %d n %d kind %d: %.1f ns/tx\n",where,n,kind,t);
  unlink("/dev/shm/write-back-order.bin");
}
