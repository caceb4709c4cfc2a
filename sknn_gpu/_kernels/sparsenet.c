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
 * Each call runs on the calling thread. (Splitting a product over new threads was tried and
 * dropped: next to a BLAS whose threads spin between calls, as OpenBLAS's do, the new threads
 * waited for a core, and 784-input training on the GPU machine's 16 cores took longer than
 * on one: benchmarks/results/2026-11-28-h200/bench_sparsenet_cpu_train_16core_split_kernels.md.)
 * Integers: indptr and idx are int32 offsets local to the block (the level plan they come
 * from is int32 throughout), sizes and strides int64. */
#include <stdint.h>

typedef double v4d __attribute__((vector_size(32), aligned(8), may_alias)); /* reads and writes rows of doubles */

#define NV 8            /* registers of four doubles per accumulator chain */
#define CH (4 * NV)     /* batch values per slice */

static inline v4d ld4(const double *p) { return *(const v4d *)p; }
static inline void st4(double *p, v4d v) { *(v4d *)p = v; }

void spmm(int64_t n_rows, const int32_t *indptr, const int32_t *idx, const double *w,
          const double *X, int64_t ldx, double *out, int64_t ldo, int64_t n, int32_t accumulate)
{
    int64_t k0 = 0;
    for (; k0 + CH <= n; k0 += CH) {
        for (int64_t r = 0; r < n_rows; ++r) {
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
            double *o = out + r * ldo + k0;
            if (accumulate)
                for (int j = 0; j < NV; ++j) st4(o + 4 * j, ld4(o + 4 * j) + (a[j] + b[j]));
            else
                for (int j = 0; j < NV; ++j) st4(o + 4 * j, a[j] + b[j]);
        }
    }
    if (k0 == n) return;
    const int64_t len = n - k0; /* the last values of the batch, fewer than a slice */
    for (int64_t r = 0; r < n_rows; ++r) {
        double acc[CH];
        for (int64_t j = 0; j < len; ++j) acc[j] = 0.0;
        for (int32_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            const double *x = X + (int64_t)idx[e] * ldx + k0;
            const double we = w[e];
            for (int64_t j = 0; j < len; ++j) acc[j] += we * x[j];
        }
        double *o = out + r * ldo + k0;
        for (int64_t j = 0; j < len; ++j) o[j] = accumulate ? o[j] + acc[j] : acc[j];
    }
}

void spmm_t(int64_t n_rows, const int32_t *indptr, const int32_t *idx, const double *w,
            const double *D, int64_t ldd, double *out, int64_t ldo, int64_t n, int32_t cut)
{
    int64_t k0 = 0;
    for (; k0 + CH <= n; k0 += CH) {
        for (int64_t r = 0; r < n_rows; ++r) {
            v4d d[NV];
            const double *src = D + r * ldd + k0;
            for (int j = 0; j < NV; ++j) d[j] = ld4(src + 4 * j);
            for (int32_t e = indptr[r]; e < indptr[r + 1]; ++e) {
                if (idx[e] < cut) continue;
                double *o = out + (int64_t)(idx[e] - cut) * ldo + k0;
                const double we = w[e];
                for (int j = 0; j < NV; ++j) st4(o + 4 * j, ld4(o + 4 * j) + we * d[j]);
            }
        }
    }
    if (k0 == n) return;
    for (int64_t r = 0; r < n_rows; ++r) {
        const double *src = D + r * ldd + k0;
        for (int32_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            if (idx[e] < cut) continue;
            double *o = out + (int64_t)(idx[e] - cut) * ldo + k0;
            const double we = w[e];
            for (int64_t j = 0; j < n - k0; ++j) o[j] += we * src[j];
        }
    }
}

void sddmm(int64_t n_rows, const int32_t *indptr, const int32_t *idx, const double *D, int64_t ldd,
           const double *V, int64_t ldv, int64_t n, double *g)
{
    const int64_t full = n - n % 8;
    const int32_t e0 = indptr[0];
    for (int64_t r = 0; r < n_rows; ++r) {
        const double *d = D + r * ldd;
        for (int32_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            const double *v = V + (int64_t)idx[e] * ldv;
            v4d p = {0.0, 0.0, 0.0, 0.0}, q = {0.0, 0.0, 0.0, 0.0};
            for (int64_t k = 0; k < full; k += 8) {
                p += ld4(d + k) * ld4(v + k);
                q += ld4(d + k + 4) * ld4(v + k + 4);
            }
            p += q;
            double s = (p[0] + p[2]) + (p[1] + p[3]);
            for (int64_t k = full; k < n; ++k) s += d[k] * v[k];
            g[e - e0] = s;
        }
    }
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
