/*
 * The redo commit's physical floor (Ramalhete et al., PPoPP'21: one fence
 * per transaction, one write-back per modified line) as the plainest C
 * loop: for each transaction of K 8-byte updates, the same log lines
 * rewind's commit ring writes (a 32-byte group header, then per update an
 * 8-byte word of target and length and the 8-byte value, padded to whole
 * 64-byte lines), stored with non-temporal stores (movnti) into a circular
 * log; one sfence; then each value stored in place and its line written
 * back (clwb) with no fence of its own. No checksum, no sequence check, no
 * reclamation bookkeeping: only the stores, write-backs and fence.
 *
 * Compiled with -mclwb by build.rs, as nolog.c.
 */
#include <stdint.h>
#include <immintrin.h>

/*
 * arr: the mapped array; ring: the mapped log of ring_words u64 (a whole
 * number of 64-byte lines, at least one transaction's group); idx: n*k
 * element indices, transaction t's at idx[t*k .. t*k+k). Transaction t
 * stores the value t.
 */
void floor_run(uint64_t *arr, uint64_t *ring, uint64_t ring_words, const uint64_t *idx,
	       uint64_t k, uint64_t n)
{
	uint64_t pos = 0;
	for (uint64_t t = 0; t < n; t++) {
		const uint64_t *ix = idx + t * k;
		uint64_t words = 4 + 2 * k;
		uint64_t size = (words + 7) / 8 * 8;
		if (pos + size > ring_words)
			pos = 0;
		long long *g = (long long *)(ring + pos);
		_mm_stream_si64(&g[0], 0x4752 | 1LL << 16 | (long long)(16 * k) << 32);
		_mm_stream_si64(&g[1], (long long)t);
		_mm_stream_si64(&g[2], (long long)t);
		_mm_stream_si64(&g[3], (long long)k);
		for (uint64_t j = 0; j < k; j++) {
			_mm_stream_si64(&g[4 + 2 * j], (long long)(ix[j] * 8 | (uint64_t)8 << 48));
			_mm_stream_si64(&g[5 + 2 * j], (long long)t);
		}
		for (uint64_t w = words; w < size; w++)
			_mm_stream_si64(&g[w], 0);
		_mm_sfence();
		for (uint64_t j = 0; j < k; j++) {
			uint64_t *p = &arr[ix[j]];
			*p = t;
			_mm_clwb(p);
		}
		pos += size;
	}
}
