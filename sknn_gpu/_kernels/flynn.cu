// FlyNN kernels: Fly Bloom filter counting and novelty scoring over the k winner
// indices of each FlyHash code (the codes themselves are never materialised).
//
// Layouts (row-major):
//   winners  int32  (n, k)     sorted winner (Kenyon-cell) indices per sample
//   labels   int32  (n,)       class index of each sample, in [0, n_classes)
//   counts   int64  (L, m)     z_l[i]: number of class-l codes with bit i set
//   filtersT float64 (m, L)    w_l[i] = gamma ** z_l[i], transposed so that the L
//                              class weights of one Kenyon cell are contiguous
//   novelty  float64 (n, L)    s_l(x) = sum_j w_l[winner_j(x)]
//
// Parity with the NumPy reference (sknn_gpu/fly/_flynn_cpu.py): counts are integers
// (atomic adds commute), the novelty of (x, l) is summed sequentially over
// j = 0..k-1 in double precision, in the same order as the CPU engine (additions
// only, so no FMA contraction can occur),
// and the arg-min breaks ties towards the lowest class index like numpy.argmin.
// Row normalisation uses explicit round-to-nearest intrinsics (no FMA) and a fixed
// summation order (below) that the host reference reproduces.

// One thread per (sample, winner): counts[labels[i], winners[i, j]] += 1.
extern "C" __global__ void flynn_count(const int* __restrict__ winners,
                                       const int* __restrict__ labels,
                                       unsigned long long* __restrict__ counts,
                                       const long long n,
                                       const int k,
                                       const long long m)
{
    const long long total = n * (long long)k;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)blockDim.x * gridDim.x) {
        const long long i = t / k;
        const long long cell = (long long)winners[t];
        const long long row = (long long)labels[i];
        atomicAdd(&counts[row * m + cell], 1ULL);
    }
}

// One thread per (sample, class), class index fastest so that the L weights read
// for one winner are contiguous (coalesced) and the winner row is a broadcast.
extern "C" __global__ void flynn_novelty(const int* __restrict__ winners,
                                         const double* __restrict__ filtersT,
                                         double* __restrict__ novelty,
                                         const long long n,
                                         const int k,
                                         const int n_classes)
{
    const long long total = n * (long long)n_classes;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)blockDim.x * gridDim.x) {
        const long long i = t / n_classes;
        const int l = (int)(t - i * n_classes);
        const int* w = winners + i * k;
        double s = 0.0;
        for (int j = 0; j < k; ++j) {
            s = __dadd_rn(s, filtersT[(long long)w[j] * n_classes + l]);
        }
        novelty[t] = s;
    }
}

// Index of the smallest of s[0..n_classes-1], the lowest index on ties (numpy.argmin's
// rule).
__device__ __forceinline__ int lowest_arg(const double* s, const int n_classes)
{
    double best = s[0];
    int arg = 0;
    for (int l = 1; l < n_classes; ++l) {
        if (s[l] < best) {
            best = s[l];
            arg = l;
        }
    }
    return arg;
}

// One thread per sample: index of the smallest novelty, lowest class index on ties.
extern "C" __global__ void flynn_argmin(const double* __restrict__ novelty,
                                        long long* __restrict__ out,
                                        const long long n,
                                        const int n_classes)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        out[i] = lowest_arg(novelty + i * n_classes, n_classes);
    }
}

// Fused novelty + arg-min for predict, N_CLASSES known at compile time, the novelty
// matrix never written. A group of G = N_GROUP lanes per sample (G a power of two,
// N_CLASSES <= G <= 32): lane l < N_CLASSES sums class l over j = 0..k-1 in
// flynn_novelty's order with __dadd_rn (the same bits), PU winners' weights loaded
// before they are added so that their loads overlap; the group's arg-min is a shuffle
// tree that keeps the smaller sum and, on equal sums, the lower class index
// (flynn_argmin's rule), so labels are identical to the two-kernel path. G lanes per
// sample give small batches G times the threads of one thread per sample (540 rows,
// k=512: 48 against 355 us on an H200, benchmarks/results/2026-11-28-h200/
// profile_flynn_predict_narrow_ab.txt).
#if defined(N_CLASSES) && defined(N_GROUP)
extern "C" __global__ void flynn_predict(const int* __restrict__ winners,
                                         const double* __restrict__ filtersT,
                                         long long* __restrict__ out,
                                         const long long n,
                                         const int k)
{
    constexpr int G = N_GROUP;
    constexpr int PU = 8;
    const int lane = threadIdx.x & (G - 1);
    const bool active = lane < N_CLASSES;
    const int l = active ? lane : 0;
    const long long stride = ((long long)blockDim.x * gridDim.x) / G;
    // every lane of a warp runs the same iterations (the shuffles need the whole warp)
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / G;
         __any_sync(0xffffffffu, i < n); i += stride) {
        const bool valid = i < n;
        double s = 0.0;
        if (valid) {
            const int* w = winners + i * k;
            int j = 0;
            for (; j + PU <= k; j += PU) {
                double f[PU];
#pragma unroll
                for (int u = 0; u < PU; ++u) f[u] = filtersT[(long long)w[j + u] * N_CLASSES + l];
#pragma unroll
                for (int u = 0; u < PU; ++u) s = __dadd_rn(s, f[u]);
            }
            for (; j < k; ++j) s = __dadd_rn(s, filtersT[(long long)w[j] * N_CLASSES + l]);
        }
        double best = active ? s : __longlong_as_double(0x7ff0000000000000LL);  // +inf
        int arg = active ? lane : G;
#pragma unroll
        for (int off = G / 2; off > 0; off >>= 1) {
            const double ob = __shfl_down_sync(0xffffffffu, best, off, G);
            const int oa = __shfl_down_sync(0xffffffffu, arg, off, G);
            if (ob < best || (ob == best && oa < arg)) {
                best = ob;
                arg = oa;
            }
        }
        if (valid && lane == 0) out[i] = arg;
    }
}
#endif

// One warp per row: centre the row (subtract its mean) and scale it to unit L2
// norm, in double precision (x in, y out, both (n, d)). Sums use a fixed order
// that the NumPy reference reproduces: lane l adds elements l, l+32, l+64, ...
// (the row zero-padded to a multiple of 32) sequentially, then the 32 lane sums
// are combined by the tree lane[i] += lane[i + off], off = 16, 8, 4, 2, 1.
// Round-to-nearest intrinsics forbid FMA contraction. Rows whose centred norm is
// zero are left centred (all zeros).
// Scale robustness: every element is first multiplied by 2**-e, where
// max|x_row| = f * 2**e with f in [0.5, 1) (frexp; e = 0 for a zero row), using
// ldexp, which is exact. The centred, normalised row does not change under an
// exact power-of-two scaling, so rows that neither overflow nor underflow keep
// their bits, while rows near 1e155 (whose squares overflow) or 1e-300 (whose
// squares underflow) are normalised like any other.
__device__ __forceinline__ double warp_tree_sum(double v)
{
    for (int off = 16; off > 0; off >>= 1) {
        v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, off));
    }
    return __shfl_sync(0xffffffffu, v, 0);
}

// Maximum over the warp, on every lane (max is exact: the order does not matter).
__device__ __forceinline__ double warp_max(double v)
{
    for (int off = 16; off > 0; off >>= 1) {
        v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
    }
    return v;
}

template <typename T>
__device__ void row_normalize_impl(const T* __restrict__ x, T* __restrict__ y,
                                   const long long n, const long long d)
{
    const int lane = threadIdx.x & 31;
    const long long warps_per_block = blockDim.x >> 5;
    const long long dpad = (d + 31) / 32 * 32;
    for (long long i = (long long)blockIdx.x * warps_per_block + (threadIdx.x >> 5); i < n;
         i += (long long)gridDim.x * warps_per_block) {
        const T* xi = x + i * d;
        T* yi = y + i * d;
        double amax = 0.0;
        for (long long j = lane; j < d; j += 32) amax = fmax(amax, fabs((double)xi[j]));
        int e = 0;
        frexp(warp_max(amax), &e);
        const int shift = -e;
        double acc = 0.0;
        for (long long j = lane; j < dpad; j += 32) {
            acc = __dadd_rn(acc, j < d ? ldexp((double)xi[j], shift) : 0.0);
        }
        const double mean = __ddiv_rn(warp_tree_sum(acc), (double)d);
        double sq = 0.0;
        for (long long j = lane; j < dpad; j += 32) {
            const double v = j < d ? __dsub_rn(ldexp((double)xi[j], shift), mean) : 0.0;
            sq = __dadd_rn(sq, __dmul_rn(v, v));
        }
        sq = warp_tree_sum(sq);
        const double nrm = (sq > 0.0) ? __dsqrt_rn(sq) : 1.0;
        for (long long j = lane; j < d; j += 32) {
            yi[j] = (T)__ddiv_rn(__dsub_rn(ldexp((double)xi[j], shift), mean), nrm);
        }
    }
}

extern "C" __global__ void flynn_row_normalize_f32(const float* __restrict__ x, float* __restrict__ y,
                                                   const long long n, const long long d)
{
    row_normalize_impl<float>(x, y, n, d);
}

extern "C" __global__ void flynn_row_normalize_f64(const double* __restrict__ x, double* __restrict__ y,
                                                   const long long n, const long long d)
{
    row_normalize_impl<double>(x, y, n, d);
}

// input_range='quantile' (the NumPy reference is quantile_position in
// sknn_gpu/fly/_encoding.py): each value's place among its feature's K knots (row j of
// `knots`, non-decreasing), u = (i + (x - k_i) / (k_(i+1) - k_i)) / (K - 1) for the last
// knot k_i <= x, i clipped to [0, K - 2]; the fraction is 0 between equal knots and
// clipped to [0, 1]; a feature whose knots are all equal reads 0. Double arithmetic, one
// correctly rounded intrinsic per step, as NumPy computes it. flynn_quantile_position: one
// thread per value; flynn_quantile_encode (below) goes on to the encoding.
__device__ __forceinline__ double quantile_place(double v, const double* k, int K)
{
    int lo = 0, hi = K;  // the number of knots <= v, by bisection
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (k[mid] <= v) lo = mid + 1; else hi = mid;
    }
    int i = lo - 1;
    i = i < 0 ? 0 : (i > K - 2 ? K - 2 : i);
    const double gap = __dsub_rn(k[i + 1], k[i]);
    double frac = gap > 0.0 ? __ddiv_rn(__dsub_rn(v, k[i]), gap) : 0.0;
    frac = frac < 0.0 ? 0.0 : (frac > 1.0 ? 1.0 : frac);
    return __ddiv_rn(__dadd_rn((double)i, frac), (double)(K - 1));
}

// ---------------------------------------------------------------------------------
// Input encoding (FlyNNClassifier's `encoding`; the NumPy reference is `encode` in
// sknn_gpu/fly/_flynn.py). Each input x[r, j] gives WIDTH values written to
// out[r, q * d + j] (receptor by receptor), in float32, which is what the hash reads.
// The arithmetic is the reference's, step by step: after a range scaling
// u = (x - low[j]) / span[j] in double (RANGE = 1), else in the input's own type
// (ENC_C = ENC_T), each step one correctly rounded intrinsic (no FMA contraction);
// the constants (thresholds q0..q4, then the slope or half-width q5) arrive as double
// arguments and are rounded to ENC_C as NumPy rounds a Python float against a float32
// array; the population's centres c_q = q / (ENC_WIDTH - 1) are one correctly rounded
// double division, as Python computes them. ENC_WIDTH values per input (5 thermometer
// ramps, the population's receptors, or 2 for complement). The cast to float32 at the end
// rounds to nearest, as astype does.
//   ENC_KIND 0: thermometer  clip((u - t_q) * slope, 0, 1)     q = 0..4
//   ENC_KIND 1: population   max(w - |u - c_q|, 0)              q = 0..ENC_WIDTH-1
//   ENC_KIND 2: complement   u, 1 - u
// One thread per input element, grid-stride.
#if defined(ENC_T)
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ ENC_C clip01(ENC_C v) { return v < (ENC_C)0 ? (ENC_C)0 : (v > (ENC_C)1 ? (ENC_C)1 : v); }

// The ENC_WIDTH values of one scaled input u, written to o[0], o[d], o[2 d], ...
__device__ __forceinline__ void encode_value(ENC_C u, const int clip, const double* consts, float* o,
                                             const long long d)
{
    if (clip) u = clip01(u);
#if ENC_KIND == 0
    const ENC_C slope = (ENC_C)consts[5];
    for (int q = 0; q < 5; ++q) o[q * d] = (float)clip01(mul_rn(sub_rn(u, (ENC_C)consts[q]), slope));
#elif ENC_KIND == 1
    const ENC_C w = (ENC_C)consts[5];
    for (int q = 0; q < ENC_WIDTH; ++q) {
        const ENC_C c = (ENC_C)__ddiv_rn((double)q, (double)(ENC_WIDTH - 1));
        const ENC_C v = sub_rn(w, fabs(sub_rn(u, c)));
        o[q * d] = (float)(v < (ENC_C)0 ? (ENC_C)0 : v);
    }
#else
    o[0] = (float)u;
    o[d] = (float)sub_rn((ENC_C)1, u);
#endif
}

extern "C" __global__ void flynn_encode(const ENC_T* __restrict__ x, const long long n, const long long d,
                                        const long long ldx, const double* __restrict__ low,
                                        const double* __restrict__ span, const int clip, const double q0,
                                        const double q1, const double q2, const double q3, const double q4,
                                        const double q5, float* __restrict__ out)
{
    const long long total = n * d;
    const long long width = ENC_WIDTH * d;
    const double consts[6] = {q0, q1, q2, q3, q4, q5};
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / d, j = i - r * d;
#if RANGE
        const ENC_C u = __ddiv_rn(__dsub_rn((double)x[r * ldx + j], low[j]), span[j]);
#else
        const ENC_C u = (ENC_C)x[r * ldx + j];
#endif
        encode_value(u, clip, consts, out + r * width + j, d);
    }
}

// input_range='quantile' straight to the encoding (ENC_C = double, RANGE = 0): the
// position of flynn_quantile_position, then flynn_encode's values, the same bits as
// the two kernels one after the other, without their n x d float64 positions in between.
// A block takes `tile` features (blockIdx.x) and their knots into shared memory, so the
// bisection reads shared memory, not L2; its threads go over the rows of a slice
// (blockIdx.y), `tile` consecutive features of a row at a time.
extern "C" __global__ void flynn_quantile_encode(const ENC_T* __restrict__ x, const long long n,
                                                 const long long d, const long long ldx,
                                                 const double* __restrict__ knots, const int K,
                                                 const int tile, const double q0, const double q1,
                                                 const double q2, const double q3, const double q4,
                                                 const double q5, float* __restrict__ out)
{
    extern __shared__ double sk[];  // tile x K knots
    const double consts[6] = {q0, q1, q2, q3, q4, q5};
    const long long j0 = (long long)blockIdx.x * tile;
    const int here = (int)(d - j0 < tile ? d - j0 : tile);
    for (int e = threadIdx.x; e < here * K; e += blockDim.x) sk[e] = knots[j0 * K + e];
    __syncthreads();
    const int jj = threadIdx.x % tile, per = blockDim.x / tile;
    if (jj >= here || threadIdx.x >= per * tile) return;
    const double* k = sk + jj * K;
    const bool flat = k[0] == k[K - 1];
    const long long j = j0 + jj, width = ENC_WIDTH * d;
    for (long long r = (long long)blockIdx.y * per + threadIdx.x / tile; r < n; r += (long long)gridDim.y * per) {
        const double u = flat ? 0.0 : quantile_place((double)x[r * ldx + j], k, K);
        encode_value(u, 0, consts, out + r * width + j, d);
    }
}
#endif

#if defined(QUANT_T)
extern "C" __global__ void flynn_quantile_position(const QUANT_T* __restrict__ x, const long long n,
                                                   const long long d, const long long ldx,
                                                   const double* __restrict__ knots, const int K,
                                                   double* __restrict__ out)
{
    const long long total = n * d;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long r = t / d, j = t - r * d;
        const double* k = knots + j * (long long)K;
        out[t] = k[0] == k[K - 1] ? 0.0 : quantile_place((double)x[r * ldx + j], k, K);
    }
}
#endif

// input_range='quantile': each feature's counts over HIST_BINS equal bins of its range
// (the NumPy reference is column_histogram in sknn_gpu/fly/_encoding.py). A value x of
// feature j falls in bin floor((x - low[j]) / span[j] * HIST_BINS) clipped to
// [0, HIST_BINS - 1]: x converted to double (round to nearest, as astype(float64)), then
// one correctly rounded intrinsic per step, so the bin is the reference's. A NaN has no
// bin (the reference refuses it): it is counted in hist[d * HIST_BINS] for the caller to
// refuse.
// Block (bx, by) counts the HIST_TILE features bx * HIST_TILE.. over its slice of
// rows_per_block rows (by) into shared memory (HIST_TILE * HIST_BINS counters, dynamic),
// then adds each non-zero counter to hist (n_features, HIST_BINS) in global memory with one
// atomic add: integer counts (HIST_WEIGHTED 0: 32-bit counters, a slice has fewer than 2**31
// rows) in any order are exact; weighted (HIST_WEIGHTED 1) sums of double weights on FlyNN's
// fixed-point grid are exact in any order too (sknn_gpu/fly/_weights.py), so both give the
// reference's numbers whatever the grid. Thread t reads feature t % HIST_TILE of every
// (blockDim.x / HIST_TILE)-th row: a warp reads whole 32-byte sectors of adjacent rows.
// hist accumulates over launches (batches).
#if defined(HIST_T)
#if HIST_WEIGHTED
typedef double hist_bin_t;
typedef double hist_acc_t;
#else
typedef unsigned int hist_bin_t;
typedef unsigned long long hist_acc_t;
#endif

__device__ __forceinline__ unsigned int hist_add(hist_bin_t* bins, const HIST_T x, const double lo,
                                                 const double sp, const double* __restrict__ weights,
                                                 const long long r)
{
    const double f = floor(__dmul_rn(__ddiv_rn(__dsub_rn((double)x, lo), sp), (double)HIST_BINS));
    if (isnan(f)) return 1u;
    const int b = f < 0.0 ? 0 : (f > (double)(HIST_BINS - 1) ? HIST_BINS - 1 : (int)f);
#if HIST_WEIGHTED
    atomicAdd(bins + b, weights[r]);
#else
    (void)weights;
    (void)r;
    atomicAdd(bins + b, 1u);
#endif
    return 0u;
}

extern "C" __global__ void __launch_bounds__(1024)
flynn_column_histogram(const HIST_T* __restrict__ x, const long long n, const long long d, const long long ldx,
                       const double* __restrict__ low, const double* __restrict__ span,
                       const double* __restrict__ weights, hist_acc_t* __restrict__ hist,
                       const long long rows_per_block)
{
    extern __shared__ __align__(8) unsigned char hist_smem[];
    hist_bin_t* bins = reinterpret_cast<hist_bin_t*>(hist_smem);
    const long long j0 = (long long)blockIdx.x * HIST_TILE;
    const int tile = (int)(d - j0 < HIST_TILE ? d - j0 : HIST_TILE);
    const long long r0 = (long long)blockIdx.y * rows_per_block;
    const long long r1 = n - r0 < rows_per_block ? n : r0 + rows_per_block;
    for (int i = threadIdx.x; i < tile * HIST_BINS; i += blockDim.x) bins[i] = (hist_bin_t)0;
    __syncthreads();
    const int c = threadIdx.x % HIST_TILE;
    const long long step = blockDim.x / HIST_TILE;
    unsigned int nans = 0;
    if (c < tile) {
        const double lo = low[j0 + c], sp = span[j0 + c];
        hist_bin_t* own = bins + c * HIST_BINS;
        const HIST_T* col = x + j0 + c;
        long long r = r0 + threadIdx.x / HIST_TILE;
        for (; r + 3 * step < r1; r += 4 * step) {  // four loads in flight before the adds
            HIST_T v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) v[u] = col[(r + u * step) * ldx];
#pragma unroll
            for (int u = 0; u < 4; ++u) nans += hist_add(own, v[u], lo, sp, weights, r + u * step);
        }
        for (; r < r1; r += step) nans += hist_add(own, col[r * ldx], lo, sp, weights, r);
    }
    __syncthreads();
    hist_acc_t* out = hist + j0 * HIST_BINS;  // the tile's bins are contiguous in hist too
    for (int i = threadIdx.x; i < tile * HIST_BINS; i += blockDim.x) {
        const hist_bin_t v = bins[i];
        if (v != (hist_bin_t)0) atomicAdd(out + i, (hist_acc_t)v);
    }
    if (nans) atomicAdd(hist + d * HIST_BINS, (hist_acc_t)nans);
}
#endif

// ---------------------------------------------------------------------------------
// predict_proba's calibration (the NumPy reference is sknn_gpu/fly/_calibration.py).

// flynn_novelty for the rows start, start + step, ... (n_rows of them) of winners, written
// to the same rows of novelty: the same sums in the same order. Fold f of the calibration
// (rows f, f + 5, ...) is scored by the filters of the counts without it, one launch per fold.
extern "C" __global__ void flynn_novelty_rows(const int* __restrict__ winners,
                                              const double* __restrict__ filtersT,
                                              double* __restrict__ novelty,
                                              const long long n_rows,
                                              const int k,
                                              const int n_classes,
                                              const long long start,
                                              const long long step)
{
    const long long total = n_rows * (long long)n_classes;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)blockDim.x * gridDim.x) {
        const long long i = t / n_classes;
        const int l = (int)(t - i * n_classes);
        const long long r = start + i * step;
        const int* w = winners + r * k;
        double s = 0.0;
        for (int j = 0; j < k; ++j) {
            s = __dadd_rn(s, filtersT[(long long)w[j] * n_classes + l]);
        }
        novelty[r * n_classes + l] = s;
    }
}

// The held-out log-loss of softmax(-novelty * s / k) for every candidate scale, per row:
// thread (c, i) writes out[c * n + i]. For c < n_scales, with t = scales[c] (s / k) and
// the gaps g_l = novelty[i, l] - min_l novelty[i, l]: w_i * (log(sum_l exp(-g_l * t)) +
// g_y * t), y = labels[i], w_i = weights[i] (1 when weights is null), the reference's
// steps (z = -g * t; the sum over the classes in order; exp and log within an ulp of the
// host's). Row c = n_scales: w_i when the least novel class (the lowest index on ties, as
// numpy.argmin) is y, else 0. The caller sums each row of out (a fixed order).
extern "C" __global__ void flynn_calibration_losses(const double* __restrict__ novelty,
                                                    const int* __restrict__ labels,
                                                    const double* __restrict__ weights,
                                                    const double* __restrict__ scales,
                                                    const int n_scales,
                                                    const long long n,
                                                    const int n_classes,
                                                    double* __restrict__ out)
{
    const long long total = (long long)(n_scales + 1) * n;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)blockDim.x * gridDim.x) {
        const int c = (int)(t / n);
        const long long i = t - (long long)c * n;
        const double* nv = novelty + i * n_classes;
        const int y = labels[i];
        const double w = weights == nullptr ? 1.0 : weights[i];
        double least = nv[0];
        int arg = 0;
        for (int l = 1; l < n_classes; ++l) {
            if (nv[l] < least) {
                least = nv[l];
                arg = l;
            }
        }
        if (c == n_scales) {
            out[t] = arg == y ? w : 0.0;
            continue;
        }
        const double ts = scales[c];
        double sum = 0.0, zy = 0.0;
        for (int l = 0; l < n_classes; ++l) {
            const double z = __dmul_rn(-__dsub_rn(nv[l], least), ts);
            sum = __dadd_rn(sum, exp(z));
            if (l == y) zy = z;
        }
        out[t] = __dmul_rn(w, __dsub_rn(log(sum), zy));
    }
}

// input_range='quantile': the K quantiles of each feature from its histogram (the NumPy
// reference is quantile_knots in sknn_gpu/fly/_encoding.py), one block per feature.
// KNOT_ACC is the histogram's type: long long counts (their cumulative sums are exact
// integers, as the reference's float64 ones are below 2**53) or double weighted sums (on
// FlyNN's fixed-point grid every partial sum is exact, so any order gives the reference's).
// The block scans the feature's HIST_BINS bins into shared memory (each thread 16
// consecutive bins, then the threads' totals), then level q's quantile is, as in the
// reference: target = levels[q] * total; b = the first bin whose cumulative count reaches
// target (numpy.searchsorted, side='left'), at most HIST_BINS - 1; frac = (target - (cum[b]
// - h[b])) / h[b] (h[b] = 0: over 1) clipped to [0, 1]; low + (b + frac) * width; low when
// the total or the width is 0. One correctly rounded intrinsic per step. n_nan (the
// histogram kernel's NaN count) is copied to knots[d * K] so that one copy brings both.
#if defined(KNOT_ACC)
#define KNOT_THREADS 256
extern "C" __global__ void __launch_bounds__(KNOT_THREADS)
flynn_quantile_knots(const KNOT_ACC* __restrict__ hist, const long long d, const double* __restrict__ low,
                     const double* __restrict__ width, const double* __restrict__ levels, const int K,
                     double* __restrict__ knots)
{
    __shared__ KNOT_ACC cum[HIST_BINS];
    __shared__ KNOT_ACC part[KNOT_THREADS];
    const int per = HIST_BINS / KNOT_THREADS;
    const int b0 = threadIdx.x * per;
    if (blockIdx.x == 0 && threadIdx.x == 0) knots[d * K] = (double)hist[d * HIST_BINS];
    for (long long j = blockIdx.x; j < d; j += gridDim.x) {
        const KNOT_ACC* h = hist + j * HIST_BINS;
        KNOT_ACC s = 0;
        for (int i = 0; i < per; ++i) {
            s += h[b0 + i];
            cum[b0 + i] = s;
        }
        part[threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.x == 0) {  // the threads' offsets, in order
            KNOT_ACC a = 0;
            for (int t = 0; t < KNOT_THREADS; ++t) {
                const KNOT_ACC v = part[t];
                part[t] = a;
                a += v;
            }
        }
        __syncthreads();
        const KNOT_ACC offset = part[threadIdx.x];
        for (int i = 0; i < per; ++i) cum[b0 + i] += offset;
        __syncthreads();
        const double total = (double)cum[HIST_BINS - 1];
        const double lo_j = low[j], width_j = width[j];
        for (int q = threadIdx.x; q < K; q += KNOT_THREADS) {
            double out = lo_j;
            if (total != 0.0 && width_j != 0.0) {
                const double target = __dmul_rn(levels[q], total);
                int lo = 0, hi = HIST_BINS;  // the first bin whose cumulative count is >= target
                while (lo < hi) {
                    const int mid = (lo + hi) >> 1;
                    if ((double)cum[mid] < target) lo = mid + 1; else hi = mid;
                }
                const int b = lo < HIST_BINS - 1 ? lo : HIST_BINS - 1;
                const double hb = (double)h[b];
                const double before = __dsub_rn((double)cum[b], hb);
                double frac = __ddiv_rn(__dsub_rn(target, before), hb > 0.0 ? hb : 1.0);
                frac = frac < 0.0 ? 0.0 : (frac > 1.0 ? 1.0 : frac);
                out = __dadd_rn(lo_j, __dmul_rn(__dadd_rn((double)b, frac), width_j));
            }
            knots[j * K + q] = out;
        }
        __syncthreads();  // cum and part are read before the next feature overwrites them
    }
}
#endif
