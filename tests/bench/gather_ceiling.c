// What a random-row gather can reach on this machine, without torch or graphtier: the ceiling
// against which bench_gather.py's native gather is read. Built and run by bench_gather_ceiling.py.
//
// A table of `rows` x `row_bytes` in POSIX shared memory (unlinked at once, so nothing is left
// even after a crash), `ids` random row ids (a fixed seed), `threads` threads taking chunks of
// 2048 ids from a shared counter (as graphtier's work split does). Each case copies every row to
// its own position of a large output with the loads of a row back to back and 64-byte streaming
// stores, prefetching rows ahead in the order it reads them. The cases differ in that order and
// in what is prefetched; the grouped and sorted orders are computed before the clock starts, so
// they show what a free grouping would give (each row still goes to its position in the batch).
// The baseline is memcpy of 2 GiB split over the threads. Every round runs every case once, in a
// shuffled order, each after an untimed read that leaves none of the others' rows in the caches
// (they gather the same ids); the figures are medians.
//
// Output: one line per case, "name<TAB>GB/s", the copy first.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { kGrain = 2048, kMaxThreads = 64 };

struct Case {
  const char* name;
  int order;         // 0 batch order, 1 grouped by 4 MiB region, 2 sorted
  int ahead;         // rows prefetched ahead
  int lines;         // cache lines of each prefetched row
};

static const struct Case kCases[] = {
    {"batch order, 16 rows ahead, half rows (graphtier's kernel)", 0, 16, 4},
    {"batch order, 32 rows ahead, half rows", 0, 32, 4},
    {"batch order, 8 rows ahead, whole rows", 0, 8, 8},
    {"batch order, no prefetch", 0, 0, 0},
    {"grouped by 4 MiB region (free), 16 ahead", 1, 16, 4},
    {"sorted, order restored (free), 16 ahead", 2, 16, 4},
};
enum { kNumCases = sizeof kCases / sizeof kCases[0] };

static char *table, *out, *copy_src, *copy_dst, *scratch;
enum { kScratchBytes = 128 << 20 };  // read before every case: 4x a 32 MiB L3
static int64_t *order_ids[3], *order_pos[3];
static int64_t num_ids, row_bytes, copy_bytes;
static int num_threads;
static const struct Case* current;
static int64_t next_chunk;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void copy_row(char* dst, const char* src) {
#if defined(__AVX512F__)
  if (row_bytes % 64 == 0) {
    __m512i lines[32];
    const int64_t n = row_bytes / 64 < 32 ? row_bytes / 64 : 32;
    for (int64_t l = 0; l < n; ++l) lines[l] = _mm512_loadu_si512(src + 64 * l);
    for (int64_t l = 0; l < n; ++l) _mm512_stream_si512((__m512i*)(dst + 64 * l), lines[l]);
    if (n * 64 < row_bytes) memcpy(dst + n * 64, src + n * 64, row_bytes - n * 64);
    return;
  }
#endif
  memcpy(dst, src, row_bytes);
}

// Rows [begin, end) of `ids`, each to its position; kRowBytes > 0 fixes the width at compile time
// (the loads of a row unrolled, as graphtier's kernel for 256, 512 and 1024 B rows).
#define GATHER_RUN(kRowBytes, POSITION)                                                \
  for (int64_t j = begin; j < end; ++j) {                                              \
    if (ahead > 0 && j + ahead < end) {                                                \
      const char* next = base + ids[j + ahead] * width;                                \
      for (int l = 0; l < lines; ++l) __builtin_prefetch(next + 64 * l);              \
    }                                                                                  \
    if (kRowBytes > 0) {                                                               \
      copy_fixed(dst + (POSITION) * kRowBytes, base + ids[j] * kRowBytes, kRowBytes);   \
    } else {                                                                           \
      copy_row(dst + (POSITION) * width, base + ids[j] * width);                       \
    }                                                                                  \
  }

static inline void copy_fixed(char* dst, const char* src, int64_t bytes) {
#if defined(__AVX512F__)
  __m512i lines[16];
  for (int64_t l = 0; l < bytes / 64; ++l) lines[l] = _mm512_loadu_si512(src + 64 * l);
  for (int64_t l = 0; l < bytes / 64; ++l) _mm512_stream_si512((__m512i*)(dst + 64 * l), lines[l]);
#else
  memcpy(dst, src, bytes);
#endif
}

static void* gather_worker(void* unused) {
  (void)unused;
  const int64_t* ids = order_ids[current->order];
  const int64_t* pos = order_pos[current->order];
  const int ahead = current->ahead, lines = current->lines;
  const int64_t width = row_bytes;
  const char* const base = table;  // locals: the row stores (char) could alias the globals
  char* const dst = out;
  for (;;) {
    const int64_t begin = __atomic_fetch_add(&next_chunk, 1, __ATOMIC_RELAXED) * kGrain;
    if (begin >= num_ids) break;
    const int64_t end = begin + kGrain < num_ids ? begin + kGrain : num_ids;
    if (width == 512 && current->order == 0) {  // batch order: row j goes to position j
      GATHER_RUN(512, j)
    } else if (width == 512) {
      GATHER_RUN(512, pos[j])
    } else {
      GATHER_RUN(0, pos[j])
    }
  }
#if defined(__AVX512F__)
  _mm_sfence();
#endif
  return NULL;
}

struct Span {
  int64_t begin, end;
};

static void* copy_worker(void* arg) {
  const struct Span* span = arg;
  memcpy(copy_dst + span->begin, copy_src + span->begin, span->end - span->begin);
  return NULL;
}

static double run_gather(const struct Case* c) {
  pthread_t threads[kMaxThreads];
  current = c;
  next_chunk = 0;
  const double start = now();
  for (int t = 1; t < num_threads; ++t) pthread_create(&threads[t], NULL, gather_worker, NULL);
  gather_worker(NULL);
  for (int t = 1; t < num_threads; ++t) pthread_join(threads[t], NULL);
  return now() - start;
}

static double run_copy(void) {
  pthread_t threads[kMaxThreads];
  struct Span spans[kMaxThreads];
  const int64_t share = copy_bytes / num_threads / 64 * 64;
  for (int t = 0; t < num_threads; ++t) {
    spans[t].begin = t * share;
    spans[t].end = t == num_threads - 1 ? copy_bytes : (t + 1) * share;
  }
  const double start = now();
  for (int t = 1; t < num_threads; ++t) pthread_create(&threads[t], NULL, copy_worker, &spans[t]);
  copy_worker(&spans[0]);
  for (int t = 1; t < num_threads; ++t) pthread_join(threads[t], NULL);
  return now() - start;
}

// Reads the scratch buffer, untimed, so a case finds in the caches none of the rows the case
// before read: the cases gather the same ids, and would otherwise hit each other's rows.
static void clean_caches(void) {
  uint64_t sum = 0;
  for (int64_t at = 0; at < kScratchBytes; at += 64) sum += *(const volatile uint64_t*)(scratch + at);
  if (sum == 42) fputc(' ', stderr);  // keeps the reads
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, n, sizeof *v, by_value);
  return v[n / 2];
}

static uint64_t next_random(uint64_t* state) {  // splitmix64
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The ids reordered by key (id >> shift), stable; positions follow.
static void counting_order(int64_t rows, int shift, int64_t* ids, int64_t* pos) {
  const int64_t buckets = (rows >> shift) + 1;
  int64_t* start = calloc(buckets + 1, sizeof *start);
  for (int64_t i = 0; i < num_ids; ++i) ++start[(order_ids[0][i] >> shift) + 1];
  for (int64_t b = 1; b <= buckets; ++b) start[b] += start[b - 1];
  for (int64_t i = 0; i < num_ids; ++i) {
    const int64_t k = start[order_ids[0][i] >> shift]++;
    ids[k] = order_ids[0][i];
    pos[k] = i;
  }
  free(start);
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s ROWS ROW_BYTES IDS THREADS ROUNDS\n", argv[0]);
    return 2;
  }
  const int64_t rows = atoll(argv[1]);
  row_bytes = atoll(argv[2]);
  num_ids = atoll(argv[3]);
  num_threads = atoi(argv[4]);
  const int rounds = atoi(argv[5]);
  if (rows < 1 || row_bytes < 64 || row_bytes % 64 || row_bytes > 2048 || num_ids < 1 || num_threads < 1 ||
      num_threads > kMaxThreads || rounds < 1) {
    fprintf(stderr, "need ROWS >= 1, ROW_BYTES a multiple of 64 up to 2048, IDS >= 1, 1 <= THREADS <= %d, ROUNDS >= 1\n",
            kMaxThreads);
    return 2;
  }
  char name[64];
  snprintf(name, sizeof name, "/graphtier-gather-ceiling-%d", (int)getpid());
  const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    perror("shm_open");
    return 1;
  }
  shm_unlink(name);  // nothing is left behind, whatever happens next
  const size_t table_bytes = (size_t)rows * row_bytes;
  if (ftruncate(fd, table_bytes) != 0) {
    perror("ftruncate");
    return 1;
  }
  table = mmap(NULL, table_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  copy_bytes = (int64_t)2 << 30;
  out = aligned_alloc(64, (size_t)num_ids * row_bytes);
  copy_src = aligned_alloc(64, copy_bytes);
  copy_dst = aligned_alloc(64, copy_bytes);
  scratch = aligned_alloc(64, kScratchBytes);
  if (table == MAP_FAILED || !out || !copy_src || !copy_dst || !scratch) {
    fprintf(stderr, "cannot allocate the table, the output or the copy buffers\n");
    return 1;
  }
  uint64_t fill = 1;  // distinct contents: pages that are all alike may be merged by the host
  for (size_t at = 0; at + 8 <= table_bytes; at += 8) *(uint64_t*)(table + at) = next_random(&fill);
  memset(out, 0, (size_t)num_ids * row_bytes);
  memset(copy_src, 1, copy_bytes);
  memset(copy_dst, 0, copy_bytes);
  memset(scratch, 1, kScratchBytes);
  for (int o = 0; o < 3; ++o) {
    order_ids[o] = malloc(num_ids * sizeof(int64_t));
    order_pos[o] = malloc(num_ids * sizeof(int64_t));
  }
  uint64_t seed = 0;
  for (int64_t i = 0; i < num_ids; ++i) {
    order_ids[0][i] = (int64_t)(next_random(&seed) % (uint64_t)rows);
    order_pos[0][i] = i;
  }
  int region_shift = 0;  // 4 MiB of rows per region
  while (((int64_t)row_bytes << region_shift) < ((int64_t)4 << 20)) ++region_shift;
  counting_order(rows, region_shift, order_ids[1], order_pos[1]);
  counting_order(rows, 0, order_ids[2], order_pos[2]);

  double times[kNumCases + 1][rounds];
  int shuffled[kNumCases + 1];
  for (int c = 0; c <= kNumCases; ++c) shuffled[c] = c;
  run_copy();
  for (int c = 0; c < kNumCases; ++c) run_gather(&kCases[c]);  // warm-up: page faults
  for (int r = 0; r < rounds; ++r) {
    for (int c = kNumCases; c > 0; --c) {
      const int k = (int)(next_random(&seed) % (uint64_t)(c + 1));
      const int t = shuffled[c];
      shuffled[c] = shuffled[k];
      shuffled[k] = t;
    }
    for (int s = 0; s <= kNumCases; ++s) {
      const int c = shuffled[s];
      clean_caches();
      times[c][r] = c == kNumCases ? run_copy() : run_gather(&kCases[c]);
    }
  }
  printf("memcpy 2 GiB\t%.2f\n", copy_bytes / 1e9 / median(times[kNumCases], rounds));
  for (int c = 0; c < kNumCases; ++c) {
    printf("%s\t%.2f\n", kCases[c].name, (double)num_ids * row_bytes / 1e9 / median(times[c], rounds));
  }
  return 0;
}
