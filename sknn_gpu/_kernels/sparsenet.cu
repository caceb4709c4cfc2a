// Sparse arbitrary-structured feed-forward networks (SparseNetRegressor, SparseGraph).
//
// Layout: node values V are node-major, V[slot * B + b] (B = batch), slots 0..n_in-1 are
// the inputs, then the computed nodes in level order (row r <-> slot n_in + r). The
// incoming edges of the computed nodes are a CSR matrix (indptr over rows, indices = source
// slots, w = weights). A node's value is act(bias + resp * sum_e w_e * V[src_e]).
//
// Two executors:
//   * per level: forward_level / backward_level, one thread per (node, sample), one launch
//     per level (the paper's scheme; best for wide levels and large batches); for small
//     batches the forward pass gives each (node, sample) a group of L lanes (see below);
//   * fused: *_fused, one launch that walks every level, synchronising with __syncthreads
//     (one block; the forward pass then keeps every node value in shared memory) or with a
//     software grid barrier (several co-resident blocks, at most one per SM; the caller
//     guarantees it; grid_barrier.cuh: bounded wait, the host checks the error word).
//     Best when levels are small (launch-bound).
// Reads of values written earlier in the same launch use __ldcg (L2) so that no stale L1
// line is ever seen by another SM.
// All arithmetic is float64; the NumPy engine (sparse/_graph_cpu.py, sparse/_activations.py)
// uses the same formulas.

#include "grid_barrier.cuh"  // the fused kernels' grid barrier (bounded wait, error word)

#define ACT_IDENTITY 0
#define ACT_NEAT_SIGMOID 1
#define ACT_SIGMOID 2
#define ACT_TANH 3
#define ACT_NEAT_TANH 4
#define ACT_RELU 5

__device__ __forceinline__ double clampd(double z, double lo, double hi) {
    return fmin(hi, fmax(lo, z));
}

__device__ double activate(int code, double z, double slope) {
    switch (code) {
        case 0: return z;
        case 1: return 1.0 / (1.0 + exp(-clampd(5.0 * z, -60.0, 60.0)));
        case 2: return 1.0 / (1.0 + exp(-clampd(slope * z, -60.0, 60.0)));
        case 3: return tanh(z);
        case 4: return tanh(clampd(2.5 * z, -60.0, 60.0));
        case 5: return z > 0.0 ? z : 0.0;
        case 6: return clampd(z, -1.0, 1.0);
        case 7: return sin(clampd(5.0 * z, -60.0, 60.0));
        case 8: { double t = clampd(z, -3.4, 3.4); return exp(-5.0 * t * t); }
        case 9: return z > 0.0 ? z : exp(z) - 1.0;
        case 10: return z > 0.0 ? z : 0.005 * z;
        case 11: {
            const double lam = 1.0507009873554805, alpha = 1.6732632423543772;
            return z > 0.0 ? lam * z : lam * alpha * (exp(z) - 1.0);
        }
        case 12: return 0.2 * log(1.0 + exp(clampd(5.0 * z, -60.0, 60.0)));
        case 13: return z == 0.0 ? 0.0 : 1.0 / z;
        case 14: return log(fmax(z, 1e-7));
        case 15: return exp(clampd(z, -60.0, 60.0));
        case 16: return fabs(z);
        case 17: return fmax(0.0, 1.0 - fabs(z));
        case 18: return z * z;
        case 19: return z * z * z;
        default: return z;
    }
}

// derivative through the output f = act(z) (trainable activations only)
__device__ __forceinline__ double dactivate(int code, double f, double slope) {
    switch (code) {
        case 1: return 5.0 * f * (1.0 - f);
        case 2: return slope * f * (1.0 - f);
        case 3: return 1.0 - f * f;
        case 4: return 2.5 * (1.0 - f * f);
        case 5: return f > 0.0 ? 1.0 : 0.0;
        default: return 1.0;
    }
}

// A thread's share of n_items items split over groups of L lanes (tid / L is the thread's
// group, tid % L its lane): item(k) is the group's item of round k, and every thread runs
// the same number of rounds so that warp shuffles and block barriers see all threads.
struct LaneGroups {
    long long g, n_groups;
    int lane;
    long long rounds;
    __device__ __forceinline__ LaneGroups(long long tid, long long n_threads, int L, long long n_items)
        : g(tid / L), n_groups(n_threads / L), lane((int)(tid - g * L)), rounds((n_items + n_groups - 1) / n_groups) {}
    __device__ __forceinline__ long long item(long long k) const { return g + k * n_groups; }
};

// ------------------------------------------------------------------ one level, forward
// Items are (node, sample) pairs of one level, node-major. With L = 1 a thread computes one
// item (consecutive threads = consecutive samples of a node: coalesced reads of V). With
// L in {2, 4, 8, 16, 32} a group of L lanes splits the incoming edges of one item and
// reduces with warp shuffles: used for small batches, where one thread per item would walk
// a long fan-in alone. Every thread runs the same number of rounds so that the shuffles
// are always executed by full warps.
__device__ __forceinline__ void forward_level_items(long long n_items, int L, long long tid, long long n_threads,
                                                    int r0, int B, int n_in, int n_out,
                                                    const int* __restrict__ indptr, const int* __restrict__ indices,
                                                    const double* __restrict__ w, const double* __restrict__ bias,
                                                    const double* __restrict__ resp, const int* __restrict__ act,
                                                    const double* __restrict__ X, double* V,
                                                    const int* __restrict__ out_index, double* __restrict__ out,
                                                    double slope) {
    const LaneGroups lg(tid, n_threads, L, n_items);
    const int lane = lg.lane;
    for (long long k = 0; k < lg.rounds; ++k) {
        const long long item = lg.item(k);
        const bool valid = item < n_items;
        double acc = 0.0;
        int r = 0, b = 0;
        if (valid) {
            const int rr = (int)(item / B);
            b = (int)(item - (long long)rr * B);
            r = r0 + rr;
            const int e1 = indptr[r + 1];
#pragma unroll 4
            for (int e = indptr[r] + lane; e < e1; e += L) {
                const int s = indices[e];
                // inputs straight from X when given (no barrier needed after loading them)
                const double v = (X != nullptr && s < n_in) ? X[(long long)b * n_in + s]
                                                             : __ldcg(V + (long long)s * B + b);
                acc += w[e] * v;
            }
        }
        if (L > 1) {
            for (int o = L >> 1; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o, L);
        }
        if (valid && lane == 0) {
            const double val = activate(act[r], bias[r] + resp[r] * acc, slope);
            V[(long long)(n_in + r) * B + b] = val;
            const int oi = out_index[r];
            if (oi >= 0) out[(long long)b * n_out + oi] = val;  // outputs written where computed
        }
    }
}

// D[r, b] = dL/d(pre-activation of row r) = (G[r, b] + sum_out-edges w * resp[dst] * D[dst, b]) * act'
__device__ __forceinline__ void backward_item(long long item, int r0, int B, int n_in,
                                              const int* __restrict__ t_indptr, const int* __restrict__ t_rows,
                                              const int* __restrict__ t_perm, const double* __restrict__ w,
                                              const double* __restrict__ resp, const int* __restrict__ act,
                                              const double* __restrict__ V, const double* __restrict__ G,
                                              double* D, double slope) {
    const int rr = (int)(item / B);
    const int b = (int)(item - (long long)rr * B);
    const int r = r0 + rr;
    const int s = n_in + r;
    double g = G[(long long)r * B + b];
    const int e1 = t_indptr[s + 1];
    for (int e = t_indptr[s]; e < e1; ++e) {
        const int dst = t_rows[e];
        g += w[t_perm[e]] * resp[dst] * __ldcg(D + (long long)dst * B + b);
    }
    D[(long long)r * B + b] = g * dactivate(act[r], V[(long long)s * B + b], slope);
}

// ------------------------------------------------------------------ forward
// Also sets *flag (flag_addr != 0) when an input is not finite.
extern "C" __global__ void load_inputs(const double* __restrict__ X, double* __restrict__ V, int B, int n_in,
                                       unsigned long long flag_addr) {
    const long long n = (long long)B * n_in;
    bool bad = false;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int j = (int)(i / B);
        const int b = (int)(i - (long long)j * B);
        const double x = X[(long long)b * n_in + j];
        bad |= !isfinite(x);
        V[i] = x;
    }
    if (bad && flag_addr != 0ull) *((volatile int*)flag_addr) = 1;
}

// One level per launch; the inputs were loaded into V by load_inputs.
extern "C" __global__ void forward_level(const int* __restrict__ indptr, const int* __restrict__ indices,
                                         const double* __restrict__ w, const double* __restrict__ bias,
                                         const double* __restrict__ resp, const int* __restrict__ act, double* V,
                                         const int* __restrict__ out_index, double* __restrict__ out, int r0, int nr,
                                         int B, int n_in, int n_out, double slope, int L) {
    const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    forward_level_items((long long)nr * B, L, tid, (long long)gridDim.x * blockDim.x, r0, B, n_in, n_out, indptr,
                        indices, w, bias, resp, act, nullptr, V, out_index, out, slope);
}

// ------------------------------------------------------------------ fused forward
// One launch for the whole network, two modes:
//   * SMEM (one block): every node value lives in shared memory; levels are separated by
//     __syncthreads only, and a value read costs a shared-memory load instead of an L2
//     round trip. Used when (n_slots x batch) doubles fit in shared memory.
//   * grid (several co-resident blocks, at most one per SM): values in global memory
//     (read with __ldcg), inputs read from X directly, software grid barrier between levels.
// Items of a level are (node, sample) pairs, node-major; a group of L lanes (a power of
// two, per level, up to the block size) shares the edges of one item; L > 32 reduces the
// warps' partial sums through shared memory (deterministic order).
// Edge schedule (built on the host per lane configuration): for level l with R rows and
// L lanes, entry (k, rr, lane) at ell_off[l] + k * R * L + rr * L + lane holds the source
// slot (-1: padding) and weight of edge lane + k * L of row rr, for k < (ell_k[l] & 255)
// (at most a few); when bit 8 of ell_k[l] is set, some row of the level is longer than
// that and continues through the CSR arrays. Schedule
// addresses depend on nothing but (level, thread), so a thread loads its first item's
// first two edges, bias, response, activation and output slot for level l + 1 before it
// computes level l: those loads overlap a whole level and its barrier, and after the
// barrier only the node-value loads remain on the critical path.
// A non-finite input sets *flag (host-mapped or device int) when flag_addr != 0; the caller
// checks it after the launch (the output is then discarded).

struct Prefetch {
    int rr, b, s0, s1, act, oi;
    double w0, w1, bias, resp;
};

struct Schedule {
    const int* __restrict__ level_ptr;
    const int* __restrict__ lanes;
    const long long* __restrict__ ell_off;
    const int* __restrict__ ell_k;
    const int* __restrict__ ell_src;
    const double* __restrict__ ell_w;
};

__device__ __forceinline__ void prefetch_item(Prefetch& p, int l, const Schedule& S, long long tid, int B,
                                              const double* __restrict__ bias, const double* __restrict__ resp,
                                              const int* __restrict__ act, const int* __restrict__ out_index) {
    const int L = S.lanes[l];
    const int r0 = S.level_ptr[l];
    const int R = S.level_ptr[l + 1] - r0;
    const long long g = tid / L;
    const int lane = (int)(tid - g * L);
    p.rr = -1;
    p.b = 0;
    p.s0 = -1;
    p.s1 = -1;
    p.w0 = 0.0;
    p.w1 = 0.0;
    p.bias = 0.0;
    p.resp = 0.0;
    p.act = 0;
    p.oi = -1;
    if (g < (long long)R * B) {
        const int rr = (int)(g / B);
        p.rr = rr;
        p.b = (int)(g - (long long)rr * B);
        const int K = S.ell_k[l] & 255;
        const long long base = S.ell_off[l] + (long long)rr * L + lane;
        if (K > 0) {
            p.s0 = S.ell_src[base];
            p.w0 = S.ell_w[base];
        }
        if (K > 1) {
            p.s1 = S.ell_src[base + (long long)R * L];
            p.w1 = S.ell_w[base + (long long)R * L];
        }
        if (lane == 0) {
            p.bias = bias[r0 + rr];
            p.resp = resp[r0 + rr];
            p.act = act[r0 + rr];
            p.oi = out_index[r0 + rr];
        }
    }
}

template <bool SMEM>
__device__ __forceinline__ double node_value(const double* sV, const double* Vg, const double* __restrict__ X, int s,
                                             int b, int B, int n_in) {
    if (SMEM) return sV[(long long)s * B + b];
    return s < n_in ? X[(long long)b * n_in + s] : __ldcg(Vg + (long long)s * B + b);
}

// Sum of acc over a group of L lanes; the result is valid in the group's lane 0. Every
// thread of the block must call it (L > 32 synchronises the block).
__device__ __forceinline__ double group_sum(double acc, int L, double* red) {
    if (L <= 32) {
        for (int o = L >> 1; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o, L);
        return acc;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) red[warp] = acc;
    __syncthreads();
    if (threadIdx.x % L == 0) {
        double s = 0.0;
        for (int i = 0; i < (L >> 5); ++i) s += red[warp + i];
        acc = s;
    }
    __syncthreads();
    return acc;
}

template <bool SMEM>
__device__ __forceinline__ void fused_level(const Prefetch& p, int l, const Schedule& S, long long tid,
                                            long long n_threads, int B, int n_in, int n_out,
                                            const int* __restrict__ indptr, const int* __restrict__ indices,
                                            const double* __restrict__ w, const double* __restrict__ bias,
                                            const double* __restrict__ resp, const int* __restrict__ act,
                                            const int* __restrict__ out_index, const double* __restrict__ X,
                                            double* sV, double* Vg, double* __restrict__ out, double slope,
                                            double* red) {
    const int L = S.lanes[l];
    const int r0 = S.level_ptr[l];
    const int R = S.level_ptr[l + 1] - r0;
    const int K = S.ell_k[l] & 255;
    const bool tail = (S.ell_k[l] >> 8) != 0;
    const long long kstride = (long long)R * L;
    const long long n_items = (long long)R * B;
    const LaneGroups lg(tid, n_threads, L, n_items);
    const int lane = lg.lane;
    for (long long k = 0; k < lg.rounds; ++k) {
        const long long item = lg.item(k);
        const bool valid = item < n_items;
        double acc = 0.0, bi = 0.0, re = 0.0;
        int rr = 0, b = 0, ac = 0, oi = -1;
        if (valid) {
            long long base;
            int q0;
            if (k == 0) {  // prefetched
                rr = p.rr;
                b = p.b;
                bi = p.bias;
                re = p.resp;
                ac = p.act;
                oi = p.oi;
                if (p.s0 >= 0) acc = p.w0 * node_value<SMEM>(sV, Vg, X, p.s0, b, B, n_in);
                if (p.s1 >= 0) acc += p.w1 * node_value<SMEM>(sV, Vg, X, p.s1, b, B, n_in);
                q0 = 2;
            } else {
                rr = (int)(item / B);
                b = (int)(item - (long long)rr * B);
                if (lane == 0) {
                    bi = bias[r0 + rr];
                    re = resp[r0 + rr];
                    ac = act[r0 + rr];
                    oi = out_index[r0 + rr];
                }
                q0 = 0;
            }
            base = S.ell_off[l] + (long long)rr * L + lane;
            for (int q = q0; q < K; ++q) {
                const int s = S.ell_src[base + q * kstride];
                if (s >= 0) acc += S.ell_w[base + q * kstride] * node_value<SMEM>(sV, Vg, X, s, b, B, n_in);
            }
            if (tail) {  // rows longer than the schedule: the rest of the row through the CSR arrays
                const int r = r0 + rr;
                const int e1 = indptr[r + 1];
#pragma unroll 4
                for (int e = indptr[r] + lane + K * L; e < e1; e += L)
                    acc += w[e] * node_value<SMEM>(sV, Vg, X, indices[e], b, B, n_in);
            }
        }
        acc = group_sum(acc, L, red);
        if (valid && lane == 0) {
            const double val = activate(ac, bi + re * acc, slope);
            const long long slot = (long long)(n_in + r0 + rr) * B + b;
            if (SMEM) sV[slot] = val;
            if (Vg != nullptr) Vg[slot] = val;
            if (oi >= 0) out[(long long)b * n_out + oi] = val;  // outputs written where computed
        }
    }
}

template <bool SMEM>
__device__ __forceinline__ void forward_fused_body(const Schedule& S, int n_levels, const int* __restrict__ indptr,
                                                   const int* __restrict__ indices, const double* __restrict__ w,
                                                   const double* __restrict__ bias, const double* __restrict__ resp,
                                                   const int* __restrict__ act, const double* __restrict__ X,
                                                   double* Vg, double* __restrict__ out,
                                                   const int* __restrict__ out_index, int B, int n_in, int n_out,
                                                   double slope, unsigned long long* bar, int* flag,
                                                   int* bar_err) {
    extern __shared__ double sV[];
    __shared__ double red[32];
    const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    Prefetch cur, nxt;
    if (n_levels > 0) prefetch_item(cur, 0, S, tid, B, bias, resp, act, out_index);
    // inputs: node-major copy (shared memory and/or global V for the backward pass) + finiteness
    const long long nin = (long long)B * n_in;
    bool bad = false;
    for (long long i = tid; i < nin; i += stride) {
        const int j = (int)(i / B);
        const int b = (int)(i - (long long)j * B);
        const double x = X[(long long)b * n_in + j];
        bad |= !isfinite(x);
        if (SMEM) sV[i] = x;
        if (Vg != nullptr) Vg[i] = x;
    }
    if (bad && flag != nullptr) *((volatile int*)flag) = 1;
    if (SMEM) __syncthreads();
    for (int l = 0; l < n_levels; ++l) {
        const bool more = l + 1 < n_levels;
        if (more) prefetch_item(nxt, l + 1, S, tid, B, bias, resp, act, out_index);  // lands during level l
        fused_level<SMEM>(cur, l, S, tid, stride, B, n_in, n_out, indptr, indices, w, bias, resp, act, out_index,
                          X, sV, Vg, out, slope, red);
        if (more) {
            if (!SMEM && gridDim.x > 1) {
                if (!grid_barrier(bar, bar_err)) return;  // timed out: the host raises
            } else {
                __syncthreads();
            }
            cur = nxt;
        }
    }
}

// Vg_addr / flag_addr: device addresses (0 = none); bar_err_addr: the grid barrier's error
// word (see grid_barrier.cuh; used by forward_fused_grid). forward_fused_smem runs as one block
// with (n_in + n_computed) * B doubles of dynamic shared memory; forward_fused_grid needs Vg.
#define FORWARD_FUSED_PARAMS                                                                                  \
    const int *__restrict__ level_ptr, int n_levels, const int *__restrict__ indptr,                          \
        const int *__restrict__ indices, const double *__restrict__ w, const double *__restrict__ bias,       \
        const double *__restrict__ resp, const int *__restrict__ act, const double *__restrict__ X,           \
        unsigned long long Vg_addr, double *__restrict__ out, const int *__restrict__ out_index, int B,       \
        int n_in, int n_out, double slope, unsigned long long *bar, const int *__restrict__ lanes,            \
        unsigned long long flag_addr, const long long *__restrict__ ell_off, const int *__restrict__ ell_k,   \
        const int *__restrict__ ell_src, const double *__restrict__ ell_w, unsigned long long bar_err_addr

#define FORWARD_FUSED_BODY(SMEM_MODE)                                                                         \
    Schedule S;                                                                                               \
    S.level_ptr = level_ptr;                                                                                  \
    S.lanes = lanes;                                                                                          \
    S.ell_off = ell_off;                                                                                      \
    S.ell_k = ell_k;                                                                                          \
    S.ell_src = ell_src;                                                                                      \
    S.ell_w = ell_w;                                                                                          \
    forward_fused_body<SMEM_MODE>(S, n_levels, indptr, indices, w, bias, resp, act, X, (double*)Vg_addr, out, \
                                  out_index, B, n_in, n_out, slope, bar, (int*)flag_addr, (int*)bar_err_addr)

extern "C" __global__ void __launch_bounds__(512) forward_fused_smem(FORWARD_FUSED_PARAMS) {
    FORWARD_FUSED_BODY(true);
}

extern "C" __global__ void __launch_bounds__(512) forward_fused_grid(FORWARD_FUSED_PARAMS) {
    FORWARD_FUSED_BODY(false);
}

// ------------------------------------------------------------------ backward
extern "C" __global__ void backward_level(int r0, int nr, const int* __restrict__ t_indptr,
                                          const int* __restrict__ t_rows, const int* __restrict__ t_perm,
                                          const double* __restrict__ w, const double* __restrict__ resp,
                                          const int* __restrict__ act, const double* __restrict__ V,
                                          const double* __restrict__ G, double* D, int B, int n_in, double slope) {
    const long long n = (long long)nr * B;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        backward_item(i, r0, B, n_in, t_indptr, t_rows, t_perm, w, resp, act, V, G, D, slope);
    }
}

extern "C" __global__ void backward_fused(const int* __restrict__ level_ptr, int n_levels,
                                          const int* __restrict__ t_indptr, const int* __restrict__ t_rows,
                                          const int* __restrict__ t_perm, const double* __restrict__ w,
                                          const double* __restrict__ resp, const int* __restrict__ act,
                                          const double* __restrict__ V, const double* __restrict__ G, double* D,
                                          int B, int n_in, double slope, unsigned long long* bar, int grid_sync,
                                          unsigned long long bar_err_addr) {
    const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (int l = n_levels - 1; l >= 0; --l) {
        const int r0 = level_ptr[l];
        const long long n = (long long)(level_ptr[l + 1] - r0) * B;
        for (long long i = tid; i < n; i += stride) {
            backward_item(i, r0, B, n_in, t_indptr, t_rows, t_perm, w, resp, act, V, G, D, slope);
        }
        if (l > 0) {
            if (grid_sync) {
                if (!grid_barrier(bar, (int*)bar_err_addr)) return;  // timed out: the host raises
            } else {
                __syncthreads();
            }
        }
    }
}

// gw[e] = resp[row] * sum_b D[row, b] * V[src, b]; one warp per edge (deterministic, no atomics)
extern "C" __global__ void edge_grad(const int* __restrict__ row_of_edge, const int* __restrict__ indices,
                                     const double* __restrict__ resp, const double* __restrict__ D,
                                     const double* __restrict__ V, double* __restrict__ gw, int E, int B) {
    const int lane = threadIdx.x & 31;
    const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const long long n_warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long e = warp; e < E; e += n_warps) {
        const long long r = row_of_edge[e];
        const long long s = indices[e];
        double acc = 0.0;
        for (int b = lane; b < B; b += 32) acc += D[r * B + b] * V[s * B + b];
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (lane == 0) gw[e] = acc * resp[r];
    }
}

// out[r] = sum_b D[r, b]; one warp per row
extern "C" __global__ void row_sum(const double* __restrict__ D, double* __restrict__ out, int n_rows, int B) {
    const int lane = threadIdx.x & 31;
    const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const long long n_warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long r = warp; r < n_rows; r += n_warps) {
        double acc = 0.0;
        for (int b = lane; b < B; b += 32) acc += D[r * B + b];
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (lane == 0) out[r] = acc;
    }
}
