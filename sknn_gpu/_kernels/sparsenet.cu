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
#include "cluster.cuh"       // forward_cluster's barrier halves and remote addresses

#define ACT_IDENTITY 0
#define ACT_NEAT_SIGMOID 1
#define ACT_SIGMOID 2
#define ACT_TANH 3
#define ACT_NEAT_TANH 4
#define ACT_RELU 5

__device__ __forceinline__ double clampd(double z, double lo, double hi) {
    return fmin(hi, fmax(lo, z));
}

__device__ __forceinline__ double activate(int code, double z, double slope) {
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

// The per-node constants a level reads besides its edges (lane 0 of the node's lanes):
// bias, response, activation and output column (-1: not an output). Both fused kernels
// load them through load() (prefetched or not) and finish a node with value().
struct NodeConsts {
    double bias, resp;
    int act, oi;

    __device__ __forceinline__ void load(int row, const double* __restrict__ bias_, const double* __restrict__ resp_,
                                         const int* __restrict__ act_, const int* __restrict__ out_index) {
        bias = bias_[row];
        resp = resp_[row];
        act = act_[row];
        oi = out_index[row];
    }

    __device__ __forceinline__ double value(double acc, double slope) const {
#if defined(UNIFORM_ACT) && UNIFORM_ACT >= 0
        return activate(UNIFORM_ACT, bias + resp * acc, slope);  // one activation: no dispatch
#else
        return activate(act, bias + resp * acc, slope);
#endif
    }
};

__device__ __forceinline__ NodeConsts no_node() { return NodeConsts{0.0, 0.0, 0, -1}; }

struct Prefetch {
    int rr, b, s0, s1;
    double w0, w1;
    NodeConsts c;
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
    p.c = no_node();
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
        if (lane == 0) p.c.load(r0 + rr, bias, resp, act, out_index);
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
        double acc = 0.0;
        int rr = 0, b = 0;
        NodeConsts nc = no_node();
        if (valid) {
            long long base;
            int q0;
            if (k == 0) {  // prefetched
                rr = p.rr;
                b = p.b;
                nc = p.c;
                if (p.s0 >= 0) acc = p.w0 * node_value<SMEM>(sV, Vg, X, p.s0, b, B, n_in);
                if (p.s1 >= 0) acc += p.w1 * node_value<SMEM>(sV, Vg, X, p.s1, b, B, n_in);
                q0 = 2;
            } else {
                rr = (int)(item / B);
                b = (int)(item - (long long)rr * B);
                if (lane == 0) nc.load(r0 + rr, bias, resp, act, out_index);
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
            const double val = nc.value(acc, slope);
            const long long slot = (long long)(n_in + r0 + rr) * B + b;
            if (SMEM) sV[slot] = val;
            if (Vg != nullptr) Vg[slot] = val;
            if (nc.oi >= 0) out[(long long)b * n_out + nc.oi] = val;  // outputs written where computed
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

// ------------------------------------------------------------------ cluster forward
// forward_cluster: the small-batch forward pass as one launch of one thread-block cluster
// (CLUSTER blocks, a compile-time define; CLUSTER = 1 is a single block on any GPU, > 1
// needs compute capability 9.0). The hardware schedules a cluster as a unit, so unlike the
// software grid barrier nothing can wait on a block that is not resident.
//   * Every block keeps a full replica of the node values in shared memory: a gather is a
//     local shared-memory load. A computed value is stored into the block's own replica
//     and, through distributed shared memory, into the other blocks' replicas.
//   * CLUSTER > 1: no barrier between levels; the value is its own ready flag. Every
//     computed slot is set to EMPTY (a signalling-NaN pattern that arithmetic never
//     produces: results of NaN operands are the canonical NaN) before the levels start,
//     and a thread that gathers a computed slot waits until it is no longer EMPTY (aligned
//     8-byte stores are single-copy atomic). Threads therefore run ahead level by level as
//     soon as their inputs exist. The wait is bounded (GRID_BARRIER_TIMEOUT_NS, then the
//     error word is set and the host raises), so a broken invariant cannot hang the
//     process. Two cluster barriers per launch: after the EMPTY fill (no remote store may
//     land before it) and at the end (no block may exit while another still stores into
//     it). One block (CLUSTER = 1) separates levels with __syncthreads instead: on the
//     benchmark's 180-level graph that measured faster than waiting per value (211 against
//     234 us in two development versions; docs/performance.md).
//   * Per thread, every schedule entry of level l + 1 (up to CLUSTER_KMAX, with the node's
//     bias, response, activation and output slot) is loaded into registers before level l
//     is computed, into the one of two prefetch sets that level l does not use (no copies
//     between levels; the kernel is bound by the instructions of its level loop, not by
//     memory: see docs/performance.md). The per-level constants come from a host-built
//     table copied into shared memory; lanes are powers of two (shift and mask, no
//     division). At batch 1 the schedule address of a thread is off + tid + q * stride
//     (the schedule's (k, row, lane) layout).
//   * Rows longer than CLUSTER_KMAX x lanes continue through the CSR arrays; items beyond
//     the first round (more items than threads) read the schedule directly.
// Dynamic shared memory: n_levels x 32 bytes of level table, then (n_in + n_computed) x B
// doubles of node values. All index arithmetic is 32-bit (the caller checks the sizes).

#ifndef CLUSTER
#define CLUSTER 1
#endif
// BATCH > 0: the batch size is a compile-time constant (1 for one-row calls: no index
// multiplications); UNIFORM_ACT >= 0: every computed node has that activation (see
// NodeConsts::value). Both are set per graph by _graph_cuda._cluster_kernel.
#ifndef BATCH
#define BATCH 0
#endif
// RESIDENT = 1: the kernel stays resident and answers requests posted in pinned host memory
// (see forward_cluster's resident loop and _graph_resident_cuda.ResidentForward)
#ifndef RESIDENT
#define RESIDENT 0
#endif
#define CLUSTER_KMAX 8
#define EMPTY_BITS 0x7ff4deadbeef0001ll

#if CLUSTER > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_DIMS
#endif

// one level of the host-built table (8 ints; see _graph_cuda._cluster_part)
struct LevelInfo {
    int off;     // schedule offset of the level
    int stride;  // schedule stride between a lane's entries (rows x lanes)
    int r0, R;   // first row, rows
    int shift;   // log2(lanes)
    int K;       // entries per lane, | 256 when some row continues in the CSR arrays
    int rounds;  // ceil(items / groups)
    int groups;  // threads / lanes
};

struct ClusterPrefetch {
    int rr, b;
    int s[CLUSTER_KMAX];
    double w[CLUSTER_KMAX];
    NodeConsts c;
};

__device__ __forceinline__ unsigned cluster_rank() {
#if CLUSTER > 1
    return cluster_ctarank();
#else
    return 0u;
#endif
}

// the cluster barrier in two halves (cluster.cuh): arrive (release) early, wait (acquire)
// where needed; every thread of the cluster calls each, at a point its warp reaches converged
__device__ __forceinline__ void cluster_arrive() {
#if CLUSTER > 1
    cluster_arrive_release();
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if CLUSTER > 1
    cluster_wait_acquire();
#endif
}

// *p = v in the shared memory of block `rank` of the cluster (p: this block's address of the slot)
__device__ __forceinline__ void store_remote(double* p, unsigned rank, double v) {
#if CLUSTER > 1
    asm volatile("st.shared::cluster.f64 [%0], %1;" ::"r"(cluster_map(p, rank)), "d"(v) : "memory");
#endif
}

// value of slot i of the replica; computed slots (i >= n_in_slots) are waited for
__device__ __forceinline__ double ready_value(const double* sV, int i, int n_in_slots, int* bar_err) {
    if (CLUSTER == 1 || i < n_in_slots) return sV[i];  // one block: levels are separated by __syncthreads
    const volatile long long* p = reinterpret_cast<const volatile long long*>(sV + i);
    long long v = *p;
    if (v == EMPTY_BITS) {
        const unsigned long long t0 = grid_barrier_now_ns();
        unsigned spins = 0u;
        while ((v = *p) == EMPTY_BITS) {
            if ((++spins & 1023u) == 0u && grid_barrier_now_ns() - t0 > GRID_BARRIER_TIMEOUT_NS) {
                *((volatile int*)bar_err) = 1;  // the host raises; the outputs are discarded
                __threadfence_system();  // (resident: visible to the host before any output that follows)
                return 0.0;
            }
        }
    }
    return __longlong_as_double(v);
}

__device__ __forceinline__ void cluster_prefetch(ClusterPrefetch& p, const LevelInfo& I, int tid, int B,
                                                 const int* __restrict__ ell_src, const double* __restrict__ ell_w,
                                                 const double* __restrict__ bias, const double* __restrict__ resp,
                                                 const int* __restrict__ act, const int* __restrict__ out_index) {
    // nothing is initialised: the level reads entries q < K of a valid item, constants in lane 0
    const int g = tid >> I.shift;
    const int lane = tid & ((1 << I.shift) - 1);
    if (g < I.R * B) {
        const int rr = B == 1 ? g : g / B;
        p.rr = rr;
        p.b = g - rr * B;
        const int K = I.K & 255;
        const int base = I.off + (B == 1 ? tid : (rr << I.shift) + lane);
#pragma unroll
        for (int q = 0; q < CLUSTER_KMAX; ++q) {
            if (q < K) {
                p.s[q] = ell_src[base + q * I.stride];
                p.w[q] = ell_w[base + q * I.stride];
            }
        }
        if (lane == 0) p.c.load(I.r0 + rr, bias, resp, act, out_index);
    }
}

__device__ __forceinline__ void cluster_level(const ClusterPrefetch& p, const LevelInfo& I, int tid, unsigned rank,
                                              int B, int n_in, int n_out, const int* __restrict__ indptr,
                                              const int* __restrict__ indices, const double* __restrict__ w,
                                              const double* __restrict__ bias, const double* __restrict__ resp,
                                              const int* __restrict__ act, const int* __restrict__ out_index,
                                              const int* __restrict__ ell_src, const double* __restrict__ ell_w,
                                              double* sV, double* Vg, double* __restrict__ out, double slope,
                                              double* red, int* bar_err, bool first, bool remote) {
    const int L = 1 << I.shift;
    const int K = I.K & 255;
    const bool tail = (I.K >> 8) != 0;
    const int n_items = I.R * B;
    const int nis = n_in * B;  // input slots: never waited for
    const int g = tid >> I.shift;
    const int lane = tid & (L - 1);
    for (int k = 0; k < I.rounds; ++k) {
        const int item = g + k * I.groups;
        const bool valid = item < n_items;
        double acc = 0.0;
        int rr = 0, b = 0;
        NodeConsts nc = no_node();
        if (valid) {
            if (k == 0) {  // prefetched during the previous level
                rr = p.rr;
                b = p.b;
                nc = p.c;
#if CLUSTER == 1
#pragma unroll
                for (int q = 0; q < CLUSTER_KMAX; ++q) {
                    if (q < K && p.s[q] >= 0) acc += p.w[q] * sV[p.s[q] * B + b];
                }
#else
                // all loads first (one round trip), then the rare wait for a value not yet stored
                long long v[CLUSTER_KMAX];
                bool empty = false;
#pragma unroll
                for (int q = 0; q < CLUSTER_KMAX; ++q) {
                    const bool on = q < K && p.s[q] >= 0;
                    v[q] = on ? *reinterpret_cast<const volatile long long*>(sV + p.s[q] * B + b) : 0ll;
                    empty |= on && v[q] == EMPTY_BITS && p.s[q] * B + b >= nis;
                }
                if (empty) {
#pragma unroll
                    for (int q = 0; q < CLUSTER_KMAX; ++q) {
                        if (q < K && p.s[q] >= 0)
                            v[q] = __double_as_longlong(ready_value(sV, p.s[q] * B + b, nis, bar_err));
                    }
                }
#pragma unroll
                for (int q = 0; q < CLUSTER_KMAX; ++q) {
                    if (q < K && p.s[q] >= 0) acc += p.w[q] * __longlong_as_double(v[q]);
                }
#endif
            } else {
                rr = B == 1 ? item : item / B;
                b = item - rr * B;
                if (lane == 0) nc.load(I.r0 + rr, bias, resp, act, out_index);
                const int base = I.off + (rr << I.shift) + lane;
                for (int q = 0; q < K; ++q) {
                    const int s = ell_src[base + q * I.stride];
                    if (s >= 0) acc += ell_w[base + q * I.stride] * ready_value(sV, s * B + b, nis, bar_err);
                }
            }
            if (tail) {  // rows longer than the schedule: the rest of the row through the CSR arrays
                const int r = I.r0 + rr;
                const int e1 = indptr[r + 1];
                for (int e = indptr[r] + lane + K * L; e < e1; e += L)
                    acc += w[e] * ready_value(sV, indices[e] * B + b, nis, bar_err);
            }
        }
        acc = group_sum(acc, L, red);
        if (first && k == 0) cluster_wait();  // every replica is filled before the first remote store
        if (valid && lane == 0) {
            const double val = nc.value(acc, slope);
            const int slot = (n_in + I.r0 + rr) * B + b;
            if (remote) {  // not on the last level: nothing reads it, and other blocks may have left
#pragma unroll
                for (unsigned c = 1; c < CLUSTER; ++c) store_remote(sV + slot, (rank + c) % CLUSTER, val);
            }
            sV[slot] = val;
            if (Vg != nullptr) Vg[slot] = val;
            if (nc.oi >= 0) {  // outputs written where computed (resident: straight to the host, which
                if (RESIDENT)  // waits for every output word to change; no fence)
                    *reinterpret_cast<volatile double*>(out + b * n_out + nc.oi) = val;
                else
                    out[b * n_out + nc.oi] = val;
            }
        }
    }
}

// level l from `use` (prefetched), level l + 1 prefetched into `fill` first; false when l was the last
__device__ __forceinline__ bool cluster_step(const ClusterPrefetch& use, ClusterPrefetch& fill, const LevelInfo* T, int l,
                                             int n_levels, int tid, unsigned rank, int B, int n_in, int n_out,
                                             const int* __restrict__ indptr, const int* __restrict__ indices,
                                             const double* __restrict__ w, const double* __restrict__ bias,
                                             const double* __restrict__ resp, const int* __restrict__ act,
                                             const int* __restrict__ out_index, const int* __restrict__ ell_src,
                                             const double* __restrict__ ell_w, double* sV, double* Vg,
                                             double* __restrict__ out, double slope, double* red, int* bar_err) {
    if (l >= n_levels) return false;
    const bool more = l + 1 < n_levels;
    if (more) cluster_prefetch(fill, T[l + 1], tid, B, ell_src, ell_w, bias, resp, act, out_index);
    cluster_level(use, T[l], tid, rank, B, n_in, n_out, indptr, indices, w, bias, resp, act, out_index, ell_src,
                  ell_w, sV, Vg, out, slope, red, bar_err, !RESIDENT && l == 0, more);
    if (!RESIDENT) {  // (the resident loop has its own barriers)
        if (l == 0 && n_levels == 1) cluster_arrive();  // (the level stored nothing remote that is read)
        if (l + 2 == n_levels) cluster_arrive();  // this thread's last remote store that anyone reads is done
    }
#if CLUSTER == 1
    if (more) __syncthreads();  // one block: a plain barrier per level measured faster than waiting per value
#endif
    return more;
}

// ------------------------------------------------------------------ resident forward
// RESIDENT = 1 builds forward_cluster as a kernel that stays on the GPU and answers one
// request after another (_graph_resident_cuda.ResidentForward launches it and posts the requests):
// the per-call launch, the EMPTY fill and the level-0 prefetch leave the critical path.
// Control words, int64 in pinned host memory (ctrl): REQ (written by the host: a request's
// sequence number, or RESIDENT_STOP), DONE (by the kernel: the last request answered) and
// EXITED (by the kernel: 1 when it has left). The request's rows are in pinned host memory
// (X), the outputs go there too (out).
//   * Rank 0's thread 0 polls REQ (acquire, system scope; resident_poll) and hands the
//     command to every block through distributed shared memory (s_cmd); after idle_ns
//     without a request it hands out RESIDENT_IDLE instead and every block leaves (the
//     host relaunches on the next request). One decision-maker: the blocks never disagree.
//   * Between requests every block refills the computed slots of its replica with EMPTY
//     and arrives at the cluster barrier, so the barrier's wait costs nothing once the
//     request comes. Each block then reads whole 128-byte lines of the inputs from host
//     memory (volatile: no stale cached line; blocks reading one line at once were slower)
//     and stores them into every replica (a non-finite input is stored as 0 and flagged;
//     the host discards that request's outputs); one cluster barrier, then the levels as
//     in the launched kernel (per-value waits for the inputs slowed every level).
//   * Outputs go straight to pinned host memory where they are computed, with no fence:
//     the host fills the outputs with EMPTY before it posts a request and returns once no
//     output word is EMPTY (no arithmetic makes that NaN; each output is written once per
//     request, an aligned 8-byte store that reaches host memory whole, as NCCL's LL
//     protocol also assumes of PCIe). What the host reads after the outputs was fenced by its writer before the
//     outputs existed: the non-finite-input flag (before the barrier after the inputs) and
//     a timed-out value wait's bar_err. A cluster barrier then keeps every block from
//     refilling its replica while another may still store into it; rank 0 fences and
//     writes DONE (the host only needs DONE to tell an idle exit from an answer).
// (the words sit 128 bytes apart, one line each; the same line measured no different)
#define RESIDENT_REQ 0
#define RESIDENT_DONE 16
#define RESIDENT_EXITED 32
#define RESIDENT_STOP (-1ll)
#define RESIDENT_IDLE (-2ll)

// s_cmd = v in the shared memory of block `rank` of the cluster (p: this block's address)
__device__ __forceinline__ void store_remote_cmd(long long* p, unsigned rank, long long v) {
#if CLUSTER > 1
    asm volatile("st.relaxed.cluster.shared::cluster.s64 [%0], %1;" ::"r"(cluster_map(p, rank)), "l"(v) : "memory");
#endif
}

// rank 0, thread 0: wait for REQ to change (or for idle_ns to pass: RESIDENT_IDLE). One
// read of host memory in flight at a time: four pollers started a quarter of a round trip
// apart measured 2.5 us slower per request on an H200 (docs/performance.md).
__device__ __forceinline__ long long resident_poll(volatile long long* ctrl, long long last, unsigned long long idle_ns) {
    const unsigned long long t0 = grid_barrier_now_ns();
    for (unsigned n = 1;; ++n) {
        long long v;
        asm volatile("ld.acquire.sys.global.s64 %0, [%1];" : "=l"(v) : "l"(ctrl + RESIDENT_REQ) : "memory");
        if (v != last) return v;
        if ((n & 15u) == 0u && grid_barrier_now_ns() - t0 > idle_ns) return RESIDENT_IDLE;
    }
}

__device__ __forceinline__ void resident_loop(
    const int4* __restrict__ levels, int n_levels, const int* __restrict__ indptr, const int* __restrict__ indices,
    const double* __restrict__ w, const double* __restrict__ bias, const double* __restrict__ resp,
    const int* __restrict__ act, const int* __restrict__ out_index, const int* __restrict__ ell_src,
    const double* __restrict__ ell_w, const double* X, double* out, int B, int n_in, int n_out, int n_comp,
    double slope, unsigned long long flag_addr, int* bar_err, volatile long long* ctrl, unsigned long long idle_ns,
    int4* table, double* sV, double* red, unsigned rank, int tid) {
    __shared__ long long s_cmd;
    for (int i = threadIdx.x; i < 2 * n_levels; i += blockDim.x) table[i] = levels[i];
    if (threadIdx.x == 0) s_cmd = ctrl[RESIDENT_DONE];  // (no request is answered while nothing runs)
    __syncthreads();
    cluster_arrive();  // every block's s_cmd is set before rank 0 stores into it
    cluster_wait();
    long long last = *(volatile long long*)&s_cmd;
    const LevelInfo* T = reinterpret_cast<const LevelInfo*>(table);
    const int nin = B * n_in;
    // each block reads whole 128-byte lines of X (16 doubles): blocks reading one line at
    // the same time were measured slower than one block reading it
    const int share = 16 * ((((nin + 15) >> 4) + CLUSTER - 1) / CLUSTER);
    const int i_end = min(nin, (int)(rank + 1) * share);
    for (;;) {
        ClusterPrefetch cur;  // level 0's entries: loaded while the request is awaited
        if (n_levels > 0) cluster_prefetch(cur, T[0], tid, B, ell_src, ell_w, bias, resp, act, out_index);
#if CLUSTER > 1
        const double empty = __longlong_as_double(EMPTY_BITS);
        for (int i = nin + threadIdx.x; i < nin + n_comp * B; i += blockDim.x) sV[i] = empty;
#endif
        __syncthreads();
        cluster_arrive();  // this replica may receive remote stores
        if (threadIdx.x == 0) {
            if (rank == 0) {  // the one decision-maker: the blocks never disagree
                const long long cmd = resident_poll(ctrl, last, idle_ns);
#pragma unroll 1
                for (unsigned c = 1; c < CLUSTER; ++c) store_remote_cmd(&s_cmd, c, cmd);
                *(volatile long long*)&s_cmd = cmd;
            } else {
                while (*(volatile long long*)&s_cmd == last) {
                }
            }
        }
        __syncthreads();
        const long long cmd = *(volatile long long*)&s_cmd;
        cluster_wait();  // every replica is refilled
        if (cmd < 0) break;
        bool bad = false;
        for (int k = (int)rank * share + threadIdx.x; k < i_end; k += blockDim.x) {
            const int b = B == 1 ? 0 : k / n_in;  // k: X's row-major order; i: node-major slot
            const int i = (k - b * n_in) * B + b;
            double x = ((const volatile double*)X)[k];
            if (!isfinite(x)) {
                bad = true;
                x = 0.0;
            }
#pragma unroll 1
            for (unsigned c = 1; c < CLUSTER; ++c) store_remote(sV + i, (rank + c) % CLUSTER, x);
            sV[i] = x;
        }
        if (bad && flag_addr != 0ull) {
            *((volatile int*)flag_addr) = 1;
            __threadfence_system();  // visible to the host before the outputs (written after the barrier)
        }
#if CLUSTER == 1
        __syncthreads();
#else
        cluster_arrive();  // every input is in every replica before level 0 reads it (a barrier
        cluster_wait();    // measured faster than per-value waits on inputs, which slowed every level)
#endif
        ClusterPrefetch alt;
        for (int l = 0; l < n_levels; l += 2) {
            if (!cluster_step(cur, alt, T, l, n_levels, tid, rank, B, n_in, n_out, indptr, indices, w, bias, resp,
                              act, out_index, ell_src, ell_w, sV, nullptr, out, slope, red, bar_err))
                break;
            cluster_step(alt, cur, T, l + 1, n_levels, tid, rank, B, n_in, n_out, indptr, indices, w, bias, resp, act,
                         out_index, ell_src, ell_w, sV, nullptr, out, slope, red, bar_err);
        }
        cluster_arrive();  // no block refills its replica while another may still store into it
        cluster_wait();
#if CLUSTER == 1
        __syncthreads();  // (a cluster of one block: the barrier above is empty)
#endif
        if (rank == 0 && threadIdx.x == 0) {
            __threadfence_system();
            ctrl[RESIDENT_DONE] = cmd;
        }
        last = cmd;
    }
    if (rank == 0 && threadIdx.x == 0) {
        __threadfence_system();
        ctrl[RESIDENT_EXITED] = 1;
    }
}

extern "C" __global__ void __launch_bounds__(512) CLUSTER_DIMS
    forward_cluster(const int4* __restrict__ levels, int n_levels, const int* __restrict__ indptr,
                    const int* __restrict__ indices, const double* __restrict__ w, const double* __restrict__ bias,
                    const double* __restrict__ resp, const int* __restrict__ act, const int* __restrict__ out_index,
                    const int* __restrict__ ell_src, const double* __restrict__ ell_w, const double* __restrict__ X,
                    unsigned long long Vg_addr, double* __restrict__ out, int B_arg, int n_in, int n_out, int n_comp,
                    double slope, unsigned long long flag_addr, unsigned long long bar_err_addr,
                    unsigned long long ctrl_addr, unsigned long long idle_ns) {
    extern __shared__ double dyn[];
    __shared__ double red[32];
    int4* table = reinterpret_cast<int4*>(dyn);
    double* sV = dyn + 4 * n_levels;  // sizeof(LevelInfo) == 4 doubles
    double* Vg = (double*)Vg_addr;
    int* bar_err = (int*)bar_err_addr;
    const int B = BATCH > 0 ? BATCH : B_arg;  // (the host passes the same value)
    const unsigned rank = cluster_rank();
    const int tid = (int)(rank * blockDim.x + threadIdx.x);
#if RESIDENT
    resident_loop(levels, n_levels, indptr, indices, w, bias, resp, act, out_index, ell_src, ell_w, X, out, B, n_in,
                  n_out, n_comp, slope, flag_addr, bar_err, (volatile long long*)ctrl_addr, idle_ns, table, sV, red,
                  rank, tid);
#else
    ClusterPrefetch cur;  // level 0's entries: in flight while the table, inputs and EMPTY fill are written
    if (n_levels > 0) {
        LevelInfo I0;
        *reinterpret_cast<int4*>(&I0) = levels[0];
        *(reinterpret_cast<int4*>(&I0) + 1) = levels[1];
        cluster_prefetch(cur, I0, tid, B, ell_src, ell_w, bias, resp, act, out_index);
    }
    for (int i = threadIdx.x; i < 2 * n_levels; i += blockDim.x) table[i] = levels[i];
    const int nin = B * n_in;  // inputs, node-major, into this block's replica; finiteness
    bool bad = false;
    for (int i = threadIdx.x; i < nin; i += blockDim.x) {
        const int j = i / B;
        const int b = i - j * B;
        const double x = X[b * n_in + j];
        bad |= !isfinite(x);
        sV[i] = x;
        if (Vg != nullptr && rank == 0) Vg[i] = x;
    }
    if (bad && flag_addr != 0ull && rank == 0) *((volatile int*)flag_addr) = 1;
#if CLUSTER > 1
    const double empty = __longlong_as_double(EMPTY_BITS);
    for (int i = nin + threadIdx.x; i < nin + n_comp * B; i += blockDim.x) sV[i] = empty;
#endif
    __syncthreads();  // table, inputs and EMPTY slots of this block in place
    cluster_arrive();  // ... and, before level 0 stores remotely (cluster_wait), in every block
    const LevelInfo* T = reinterpret_cast<const LevelInfo*>(table);
    // two prefetch sets used in turn (level l computes from one while level l + 1 loads into
    // the other): no register copies between levels
    ClusterPrefetch alt;
    for (int l = 0; l < n_levels; l += 2) {
        if (!cluster_step(cur, alt, T, l, n_levels, tid, rank, B, n_in, n_out, indptr, indices, w, bias, resp, act,
                          out_index, ell_src, ell_w, sV, Vg, out, slope, red, bar_err))
            break;
        cluster_step(alt, cur, T, l + 1, n_levels, tid, rank, B, n_in, n_out, indptr, indices, w, bias, resp, act,
                     out_index, ell_src, ell_w, sV, Vg, out, slope, red, bar_err);
    }
    cluster_wait();  // no block leaves while another may still store into its replica
#endif
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
