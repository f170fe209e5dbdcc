/*
 * The no-log baseline of `rewind bench overhead` as the plainest C loop,
 * to check that the Rust baseline (`persist-nolog`) does no more work than
 * the operations themselves: for each transaction, for each of its K
 * updates, one 8-byte store and a write-back of its cache line; then one
 * store fence per transaction. Durable at the fence, not atomic.
 *
 * The write-back is `clwb` (compiled with -mclwb by build.rs; this
 * machine's /proc/cpuinfo lists clwb), as rewind's Pmem backend uses when
 * the CPU has it. nolog_run is the plain loop; nolog_run_counted adds the
 * counter stores the Rust baseline makes.
 */
#include <stdint.h>
#include <immintrin.h>

/*
 * arr: the mapped array; idx: n*k element indices, transaction t's updates
 * at idx[t*k .. t*k+k); k: updates per transaction; n: transactions.
 * Transaction t stores the value t.
 */
void nolog_run(uint64_t *arr, const uint64_t *idx, uint64_t k, uint64_t n)
{
	for (uint64_t t = 0; t < n; t++) {
		const uint64_t *ix = idx + t * k;
		for (uint64_t j = 0; j < k; j++) {
			uint64_t *p = &arr[ix[j]];
			*p = t;
			_mm_clwb(p);
		}
		_mm_sfence();
	}
}

/*
 * The same loop with the two counter stores rewind's persist::Domain makes:
 * before each line's clwb it adds to its flushed-lines counter, and before
 * each sfence to its fence counter (a plain load and store each, to a line
 * that stays in cache). counts[0] counts lines, counts[1] fences; volatile
 * so that each increment is a store where the Domain makes one.
 *
 * Each store of a counter queues in the store buffer behind the array's
 * stores, most of which miss the cache: on the project's VM this loop takes
 * 1.1-1.3x nolog_run's time at K = 64 (`rewind bench overhead --quick`).
 */
void nolog_run_counted(uint64_t *arr, const uint64_t *idx, uint64_t k, uint64_t n,
		       volatile uint64_t *counts)
{
	for (uint64_t t = 0; t < n; t++) {
		const uint64_t *ix = idx + t * k;
		for (uint64_t j = 0; j < k; j++) {
			uint64_t *p = &arr[ix[j]];
			*p = t;
			counts[0] = counts[0] + 1;
			_mm_clwb(p);
		}
		counts[1] = counts[1] + 1;
		_mm_sfence();
	}
}
