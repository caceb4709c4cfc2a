/* CPU kernels of SparseGraph training (sknn_gpu/sparse/_graph_cpu.py), compiled on first use
 * by the platform's C compiler and called through ctypes (sknn_gpu/_kernels/_cpu.py).
 *
 * Node values are node-major: a node's values for the batch are one contiguous row, so an
 * edge's work is a product of two rows of the batch's length (vectors of four doubles, GCC /
 * Clang vector extensions, which the compiler maps to the host's widest suitable registers).
 *
 *   spmm    out[r, :] (= or +=) sum over the edges e of row r of w[e] * X[idx[e], :]
 *           (the forward sums of a block of rows)
 *   spmm_t  out[idx[e] - cut, :] += w[e] * D[r, :] for the edges e of row r with idx[e] >= cut
 *           (the gradient that a block passes back to the hidden nodes it reads; edges from
 *           inputs, whose gradient is not needed, are skipped)
 *   sddmm   g[e] = sum over k of D[row(e), k] * V[idx[e], k]
 *           (the weight gradient at the edges only: a dense product would make every entry
 *           of the rows x slots rectangle and keep a few)
 *   gather_t  dst[j, b] = src[rows[b], j] (or src[b, j] without rows): a minibatch's input
 *           rows, picked from the training data and laid out node-major in one pass
 *
 * spmm and spmm_t walk the batch in slices of 32 values, every row per slice, so that the
 * slice of the rows they read stays in the core's cache (784 inputs x 32 values = 200 KiB);
 * spmm keeps two chains of accumulators (even and odd edges) in registers, spmm_t keeps the
 * row's slice of D in registers and adds it, scaled, into the rows its edges name.
 *
 * Threads: each call takes n_threads (the BLAS threads of the caller, which a dense product
 * would use) and splits its work when there is enough of it: spmm and sddmm by rows (equal
 * edge counts), spmm_t by slices of the batch (the rows it adds into are shared). Every output
 * value is made by one thread in the same order whatever the split: results do not depend on
 * the number of threads.
 * Integers: indptr and idx are int32 offsets local to the block (the level plan they come
 * from is int32 throughout), sizes and strides int64. */
#include <pthread.h>
#include <stdint.h>

typedef double v4d __attribute__((vector_size(32), aligned(8)));

#define NV 8            /* registers of four doubles per accumulator chain */
#define CH (4 * NV)     /* batch values per slice */
#define MAX_THREADS 64
#define MIN_WORK (1 << 21) /* multiply-adds worth a thread (~300 us on one core; see below) */

static inline v4d ld4(const double *p) { return *(const v4d *)p; }
static inline void st4(double *p, v4d v) { *(v4d *)p = v; }

typedef struct {
    int64_t lo, hi, n_rows, ldx, ldo, n;
    const int32_t *indptr, *idx;
    const double *w, *X;
    double *out;
    int32_t flag; /* spmm: accumulate; spmm_t: cut */
} part_t;

/* rows p->lo..p->hi of spmm */
static void *spmm_part(void *arg)
{
    const part_t *p = arg;
    const int32_t *indptr = p->indptr, *idx = p->idx;
    const double *w = p->w, *X = p->X;
    const int64_t ldx = p->ldx, ldo = p->ldo, n = p->n;
    int64_t k0 = 0;
    for (; k0 + CH <= n; k0 += CH) {
        for (int64_t r = p->lo; r < p->hi; ++r) {
            const int32_t e1 = indptr[r + 1];
            v4d a[NV], b[NV];
            for (int j = 0; j < NV; ++j) a[j] = b[j] = (v4d){0.0, 0.0, 0.0, 0.0};
            int32_t e = indptr[r];
            for (; e + 1 < e1; e += 2) {
                const double *x = X + (int64_t)idx[e] * ldx + k0;
                const double *y = X + (int64_t)idx[e + 1] * ldx + k0;
                const double we = w[e], wf = w[e + 1];
                for (int j = 0; j < NV; ++j) a[j] += we * ld4(x + 4 * j);
                for (int j = 0; j < NV; ++j) b[j] += wf * ld4(y + 4 * j);
            }
            if (e < e1) {
                const double *x = X + (int64_t)idx[e] * ldx + k0;
                const double we = w[e];
                for (int j = 0; j < NV; ++j) a[j] += we * ld4(x + 4 * j);
            }
            double *o = p->out + r * ldo + k0;
            if (p->flag)
                for (int j = 0; j < NV; ++j) st4(o + 4 * j, ld4(o + 4 * j) + (a[j] + b[j]));
            else
                for (int j = 0; j < NV; ++j) st4(o + 4 * j, a[j] + b[j]);
        }
    }
    if (k0 == n) return NULL;
    const int64_t len = n - k0; /* the last values of the batch, fewer than a slice */
    for (int64_t r = p->lo; r < p->hi; ++r) {
        double acc[CH];
        for (int64_t j = 0; j < len; ++j) acc[j] = 0.0;
        for (int32_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            const double *x = X + (int64_t)idx[e] * ldx + k0;
            const double we = w[e];
            for (int64_t j = 0; j < len; ++j) acc[j] += we * x[j];
        }
        double *o = p->out + r * ldo + k0;
        for (int64_t j = 0; j < len; ++j) o[j] = p->flag ? o[j] + acc[j] : acc[j];
    }
    return NULL;
}

/* batch values p->lo..p->hi (lo a multiple of the slice) of spmm_t; X is D */
static void *spmm_t_part(void *arg)
{
    const part_t *p = arg;
    const int32_t *indptr = p->indptr, *idx = p->idx, cut = p->flag;
    const double *w = p->w, *D = p->X;
    const int64_t ldd = p->ldx, ldo = p->ldo;
    int64_t k0 = p->lo;
    for (; k0 + CH <= p->hi; k0 += CH) {
        for (int64_t r = 0; r < p->n_rows; ++r) {
            v4d d[NV];
            const double *src = D + r * ldd + k0;
            for (int j = 0; j < NV; ++j) d[j] = ld4(src + 4 * j);
            for (int32_t e = indptr[r]; e < indptr[r + 1]; ++e) {
                if (idx[e] < cut) continue;
                double *o = p->out + (int64_t)(idx[e] - cut) * ldo + k0;
                const double we = w[e];
                for (int j = 0; j < NV; ++j) st4(o + 4 * j, ld4(o + 4 * j) + we * d[j]);
            }
        }
    }
    if (k0 == p->hi) return NULL;
    for (int64_t r = 0; r < p->n_rows; ++r) {
        const double *src = D + r * ldd + k0;
        for (int32_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            if (idx[e] < cut) continue;
            double *o = p->out + (int64_t)(idx[e] - cut) * ldo + k0;
            const double we = w[e];
            for (int64_t j = 0; j < p->hi - k0; ++j) o[j] += we * src[j];
        }
    }
    return NULL;
}

/* rows p->lo..p->hi of sddmm: X is D (row stride ldx), w is V (row stride ldo), out is g */
static void *sddmm_part(void *arg)
{
    const part_t *p = arg;
    const int32_t *indptr = p->indptr, *idx = p->idx;
    const int64_t n = p->n, full = n - n % 8;
    const int32_t e0 = indptr[0];
    for (int64_t r = p->lo; r < p->hi; ++r) {
        const double *d = p->X + r * p->ldx;
        for (int32_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            const double *v = p->w + (int64_t)idx[e] * p->ldo;
            v4d s4 = {0.0, 0.0, 0.0, 0.0}, q = {0.0, 0.0, 0.0, 0.0};
            for (int64_t k = 0; k < full; k += 8) {
                s4 += ld4(d + k) * ld4(v + k);
                q += ld4(d + k + 4) * ld4(v + k + 4);
            }
            s4 += q;
            double s = (s4[0] + s4[2]) + (s4[1] + s4[3]);
            for (int64_t k = full; k < n; ++k) s += d[k] * v[k];
            p->out[e - e0] = s;
        }
    }
    return NULL;
}

/* How many threads for `work` multiply-adds over `units` splittable units. */
static int threads_for(int64_t work, int64_t units, int32_t n_threads)
{
    int64_t t = n_threads < 1 ? 1 : (n_threads > MAX_THREADS ? MAX_THREADS : n_threads);
    if (t > work / MIN_WORK) t = work / MIN_WORK;
    if (t > units) t = units;
    return t < 1 ? 1 : (int)t;
}

/* Run fn on parts[0..t): parts 1.. on new threads, part 0 on this one. A thread that cannot
 * be started runs its part here, after part 0 (same results, only slower). */
static void run_parts(void *(*fn)(void *), part_t *parts, int t)
{
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int i = 1; i < t; ++i) started[i] = pthread_create(&tid[i], NULL, fn, &parts[i]) == 0;
    fn(&parts[0]);
    for (int i = 1; i < t; ++i) {
        if (started[i]) pthread_join(tid[i], NULL);
        else fn(&parts[i]);
    }
}

/* Cut rows 0..n_rows into t parts of about equal edge counts. */
static void split_rows(part_t *parts, int t, int64_t n_rows, const int32_t *indptr)
{
    const int64_t e0 = indptr[0], total = indptr[n_rows] - e0;
    int64_t r = 0;
    for (int i = 0; i < t; ++i) {
        parts[i].lo = r;
        const int64_t goal = e0 + total * (i + 1) / t;
        while (r < n_rows && (i == t - 1 || indptr[r + 1] <= goal)) ++r;
        parts[i].hi = r;
    }
}

void spmm(int64_t n_rows, const int32_t *indptr, const int32_t *idx, const double *w, const double *X,
          int64_t ldx, double *out, int64_t ldo, int64_t n, int32_t accumulate, int32_t n_threads)
{
    part_t parts[MAX_THREADS];
    const part_t base = {0, n_rows, n_rows, ldx, ldo, n, indptr, idx, w, X, out, accumulate};
    const int t = threads_for((int64_t)(indptr[n_rows] - indptr[0]) * n, n_rows, n_threads);
    for (int i = 0; i < t; ++i) parts[i] = base;
    split_rows(parts, t, n_rows, indptr);
    run_parts(spmm_part, parts, t);
}

void spmm_t(int64_t n_rows, const int32_t *indptr, const int32_t *idx, const double *w, const double *D,
            int64_t ldd, double *out, int64_t ldo, int64_t n, int32_t cut, int32_t n_threads)
{
    part_t parts[MAX_THREADS];
    const part_t base = {0, n, n_rows, ldd, ldo, n, indptr, idx, w, D, out, cut};
    const int64_t slices = (n + CH - 1) / CH;
    const int t = threads_for((int64_t)(indptr[n_rows] - indptr[0]) * n, slices, n_threads);
    for (int i = 0; i < t; ++i) {
        parts[i] = base;
        parts[i].lo = slices * i / t * CH;
        parts[i].hi = i == t - 1 ? n : slices * (i + 1) / t * CH;
    }
    run_parts(spmm_t_part, parts, t);
}

void sddmm(int64_t n_rows, const int32_t *indptr, const int32_t *idx, const double *D, int64_t ldd,
           const double *V, int64_t ldv, int64_t n, double *g, int32_t n_threads)
{
    part_t parts[MAX_THREADS];
    const part_t base = {0, n_rows, n_rows, ldd, ldv, n, indptr, idx, V, D, g, 0};
    const int t = threads_for((int64_t)(indptr[n_rows] - indptr[0]) * n, n_rows, n_threads);
    for (int i = 0; i < t; ++i) parts[i] = base;
    split_rows(parts, t, n_rows, indptr);
    run_parts(sddmm_part, parts, t);
}

/* dst[j, b] = src[rows ? rows[b] : b, j] for b < n, j < m, in tiles of 8 rows x 64 values
 * (the 8 rows' pieces read in order, each value written into 8-value runs of dst). */
void gather_t(int64_t n, int64_t m, const double *src, int64_t lds, const int64_t *rows, double *dst,
              int64_t ldd)
{
    for (int64_t b0 = 0; b0 < n; b0 += 8) {
        const int64_t b1 = b0 + 8 < n ? b0 + 8 : n;
        for (int64_t j0 = 0; j0 < m; j0 += 64) {
            const int64_t j1 = j0 + 64 < m ? j0 + 64 : m;
            for (int64_t b = b0; b < b1; ++b) {
                const double *s = src + (rows ? rows[b] : b) * lds;
                for (int64_t j = j0; j < j1; ++j) dst[j * ldd + b] = s[j];
            }
        }
    }
}
