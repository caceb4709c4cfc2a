// GBNNMemory kernels: Gripon-Berrou clique associative memory over a bit-packed W.
//
// Compile-time constants (prepended by sknn_gpu._kernels.get_function):
//   NC       number of clusters C
//   NL       neurons per cluster L
//   LW       32-bit words per cluster, ceil(L / 32)
//   CW       words per neuron row and per probe state, NC * LW
//   NPLANES  bit planes of the sum-of-sum counters (bit length of (C-1)*L, >= 1)
//   RULE     0 = sum-of-sum, 1 = sum-of-max, 2 = joint            (retrieval only)
//   GBNN_BOE, GBNN_PRUNE  acceleration tricks, 1 = on (the default; 0 only for the
//            ablation of the paper's Fig. 12, same results): BAIL-OUT-EARLY (stop a
//            neuron's test at the first cluster without a signal, and a cluster's scan at
//            the first word with one) and, in sum-of-max, testing only the active neurons
//            (with gamma > 0 no inactive neuron can turn on, Lemma 1)
//
// Layout. Neuron (c, l) has flat index j = c*NL + l. W is uint32 [n_neurons][CW]:
// word W[j][c2*LW + q] bit b is the edge between neuron j and neuron (c2, 32*q + b).
// W is symmetric and has no bit inside a cluster. A probe state V is uint32 [CW]
// with the same bit convention. Bits l >= NL of the last word of a cluster are
// never set.
//
// Retrieval runs one thread block per probe, GBNN_THREADS threads (CW rounded up to a
// multiple of 32, at most GBNN_MAX_THREADS = 1024); thread tid owns the words
// w = tid, tid + GBNN_THREADS, ... of the state, which lives in dynamic shared memory
// (gbnn_shared_bytes() below; the launch passes it and raises the opt-in limit beyond
// 48 KiB). Each block iterates its own probe until that probe converges (or max_iter),
// so converged probes cost nothing more.
// The CPU engine sknn_gpu/memory/_gbnn_cpu.py performs exactly the same steps; results
// are bit-identical.

__device__ __forceinline__ unsigned int gbnn_valid_mask(int q)
{
    int nb = NL - q * 32;
    return nb >= 32 ? 0xffffffffu : ((1u << nb) - 1u);
}

// ---------------------------------------------------------------------------
// Storing: one thread per (message, c, c2) ordered pair, c != c2, sets one bit.
// OR is idempotent and commutative, so storing is order-independent.
// ---------------------------------------------------------------------------
extern "C" __global__ void gbnn_store(const int* __restrict__ msg, long long n_msg,
                                      unsigned int* __restrict__ W)
{
    const long long total = n_msg * (long long)(NC * NC);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        long long m = t / (NC * NC);
        int r = (int)(t - m * (NC * NC));
        int c = r / NC;
        int c2 = r - c * NC;
        if (c == c2) continue;
        int a = msg[m * NC + c];
        int b = msg[m * NC + c2];
        size_t idx = (size_t)(c * NL + a) * CW + (size_t)(c2 * LW + (b >> 5));
        atomicOr(&W[idx], 1u << (b & 31));
    }
}

// Number of set bits in W (edges counted in both directions).
extern "C" __global__ void gbnn_popcount(const unsigned int* __restrict__ W, long long n_words,
                                         unsigned long long* __restrict__ out)
{
    unsigned long long s = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n_words; i += stride) {
        s += (unsigned long long)__popc(W[i]);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0 && s) atomicAdd(out, s);
}

#ifndef GBNN_BOE
#define GBNN_BOE 1
#endif
#ifndef GBNN_PRUNE
#define GBNN_PRUNE 1
#endif

#ifdef RULE

// Tie-breaking hash (splitmix64 finalizer), the same integer steps as _tie_keys() in
// _gbnn_cpu.py: h folds (seed, every symbol of the probe); cluster c draws
// mix64(h + (c+1)*GOLDEN) >> 32.
#define GBNN_GOLDEN 0x9E3779B97F4A7C15ull
__device__ __forceinline__ unsigned long long gbnn_mix64(unsigned long long z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Block geometry: GBNN_THREADS threads, each owning every GBNN_THREADS-th word of the state.
#ifndef GBNN_MAX_THREADS
#define GBNN_MAX_THREADS 1024
#endif
#define GBNN_ROUND32(x) ((((x) + 31) / 32) * 32)
#define GBNN_THREADS (GBNN_ROUND32(CW) < GBNN_MAX_THREADS ? GBNN_ROUND32(CW) : GBNN_MAX_THREADS)

#if RULE == 0
// Sum-of-sum score (eq. 3) of bit b of a state word: its count in the bit-sliced counters
// pl[] plus gamma when the neuron is active (bit b of old).
__device__ __forceinline__ double gbnn_sos_score(const unsigned int* pl, unsigned int old, int b, double gamma)
{
    int cnt = 0;
#pragma unroll
    for (int p = 0; p < NPLANES; ++p) cnt |= (int)((pl[p] >> b) & 1u) << p;
    return (double)cnt + (((old >> b) & 1u) ? gamma : 0.0);
}
#endif

// BAIL-OUT-EARLY test of one neuron (row) against state sv: for every cluster c2 other
// than its own (and, when skip_known, other than the probe's known clusters), some
// active neuron of c2 must be connected to it. Words of sv that are zero are skipped
// (AND with zero is zero), and the scan stops at the first cluster giving no signal.
__device__ __forceinline__ bool gbnn_boe(const unsigned int* __restrict__ row, const unsigned int* sv,
                                         int c_self, const int* sx, bool skip_known)
{
#if GBNN_BOE
    for (int c2 = 0; c2 < NC; ++c2) {
        if (c2 == c_self) continue;
        if (skip_known && sx[c2] >= 0) continue;
        bool found = false;
        for (int q = 0; q < LW; ++q) {
            unsigned int vv = sv[c2 * LW + q];
            if (vv != 0u && (__ldg(row + c2 * LW + q) & vv) != 0u) {
                found = true;
                break;
            }
        }
        if (!found) return false;
    }
    return true;
#else
    // eqs. 6-7 without the tricks: count the clusters giving a signal over every word of
    // every cluster, then compare with the clusters tested
    int signals = 0, tested = 0;
    for (int c2 = 0; c2 < NC; ++c2) {
        if (c2 == c_self) continue;
        if (skip_known && sx[c2] >= 0) continue;
        ++tested;
        unsigned int any = 0u;
        for (int q = 0; q < LW; ++q) any |= __ldg(row + c2 * LW + q) & sv[c2 * LW + q];
        signals += any != 0u;
    }
    return signals == tested;
#endif
}

// One sum-of-max update of word w: every candidate bit survives iff BAIL-OUT-EARLY passes.
__device__ __forceinline__ unsigned int gbnn_som_word(const unsigned int* __restrict__ W, const unsigned int* sv,
                                                      const int* sx, int w, unsigned int cand, bool skip_known)
{
    const int c = w / LW;
    const int q = w - c * LW;
    unsigned int res = 0u;
    while (cand) {
        int b = __ffs(cand) - 1;
        cand &= cand - 1u;
        size_t j = (size_t)(c * NL + q * 32 + b);
        if (gbnn_boe(W + j * CW, sv, c, sx, skip_known)) res |= 1u << b;
    }
    return res;
}

// Commit the new state sn into sv (a block-wide barrier on both sides); true when some
// word changed.
__device__ __forceinline__ bool gbnn_commit(unsigned int* sv, const unsigned int* sn, int tid)
{
    int diff = 0;
    for (int w = tid; w < CW; w += GBNN_THREADS) diff |= sn[w] != sv[w];
    int changed = __syncthreads_or(diff);
    for (int w = tid; w < CW; w += GBNN_THREADS) sv[w] = sn[w];
    __syncthreads();
    return changed != 0;
}

// Active neurons per cluster of state sv into scnt[NC] (a block-wide barrier on both sides).
__device__ __forceinline__ void gbnn_count(const unsigned int* sv, int* scnt, int tid)
{
    for (int cl = tid; cl < NC; cl += GBNN_THREADS) scnt[cl] = 0;
    __syncthreads();
    for (int w = tid; w < CW; w += GBNN_THREADS) {
        int pc = __popc(sv[w]);
        if (pc) atomicAdd(&scnt[w / LW], pc);
    }
    __syncthreads();
}

// The (r mod cnt)-th active neuron (in index order) of cluster cl of sv, which has cnt > 0 of
// them; r = mix64(h + (cl+1)*GOLDEN) >> 32 is the cluster's tie-breaking draw (_pick_in()).
__device__ __forceinline__ int gbnn_pick(const unsigned int* sv, int cl, int cnt, unsigned long long h)
{
    unsigned long long salt = (unsigned long long)(cl + 1) * GBNN_GOLDEN;
    unsigned int r = (unsigned int)(gbnn_mix64(h + salt) >> 32);
    unsigned int target = r % (unsigned int)cnt;
    for (int u = 0; u < LW; ++u) {
        unsigned int vv = sv[cl * LW + u];
        unsigned int pc = (unsigned int)__popc(vv);
        if (target < pc) {
            while (target) {
                vv &= vv - 1u;
                --target;
            }
            return u * 32 + (__ffs(vv) - 1);
        }
        target -= pc;
    }
    return -1;
}

#if RULE != 0
// Sum-of-max with gamma > 0 (active neurons only, every other cluster checked) until sv is a
// fixed point (_fixpoint()). Callers put a barrier between their last write of sv and this.
__device__ __forceinline__ void gbnn_fixpoint(const unsigned int* __restrict__ W, unsigned int* sv, unsigned int* sn,
                                              const int* sx, int tid)
{
    do {
        for (int w = tid; w < CW; w += GBNN_THREADS) sn[w] = gbnn_som_word(W, sv, sx, w, sv[w], false);
    } while (gbnn_commit(sv, sn, tid));
}

// Reduce the ambiguous sum-of-max fixed point s0 (== sv on entry) to one clique it contains,
// depth-first; the same steps as _disambiguate() in _gbnn_cpu.py. Each step: when a cluster
// is empty (the branch holds no clique), pop the last clamp (cb, xb), drop xb from the
// candidates srem remembered for cb, rebuild sv from s0 and the clamps below, run sum-of-max
// to its fixed point and force the next clamp into cb; with an empty stack, all neurons go
// off. Else clamp the forced cluster or the first one with several neurons (none: done, one
// neuron per cluster is a clique) to its (r mod count)-th neuron and run sum-of-max to its
// fixed point. Every clique of s0 survives unless a clamp excludes it, so the search ends with
// a clique whenever s0 holds one. Block-uniform control flow: every thread reads the same
// shared values after a barrier. Ends after a barrier.
__device__ __forceinline__ void gbnn_disambiguate(const unsigned int* __restrict__ W, unsigned int* sv,
                                                  unsigned int* sn, const unsigned int* s0, unsigned int* srem,
                                                  int* scnt, int* sstk_c, int* sstk_x, int* spick, const int* sx,
                                                  unsigned long long h, int tid)
{
    int depth = 0;
    int force = -1;
    while (true) {
        gbnn_count(sv, scnt, tid);
        int collapsed = 0;
        int amb = -1;
        for (int c2 = 0; c2 < NC; ++c2) {
            collapsed |= scnt[c2] == 0;
            if (amb < 0 && scnt[c2] > 1) amb = c2;
        }
        __syncthreads();  // everyone has read scnt before it is reset
        if (collapsed) {
            if (depth == 0) {
                for (int w = tid; w < CW; w += GBNN_THREADS) sv[w] = 0u;
                __syncthreads();
                return;
            }
            --depth;
            const int cb = sstk_c[depth];
            const int xb = sstk_x[depth];
            for (int w = tid; w < CW; w += GBNN_THREADS) {
                const int c = w / LW;
                const int q = w - c * LW;
                unsigned int m = s0[w];
                if (c == cb) {
                    m = srem[w];
                    if ((xb >> 5) == q) m &= ~(1u << (xb & 31));
                    srem[w] = m;
                } else {
                    for (int i = 0; i < depth; ++i) {
                        if (sstk_c[i] == c) {
                            const int xi = sstk_x[i];
                            m = ((xi >> 5) == q) ? (1u << (xi & 31)) : 0u;
                            break;
                        }
                    }
                }
                sv[w] = m;
            }
            force = cb;
            __syncthreads();
            gbnn_fixpoint(W, sv, sn, sx, tid);
            continue;
        }
        if (force >= 0) amb = force;
        if (amb < 0) return;  // one neuron per cluster (the last barrier was after the count)
        force = -1;
        if (tid == 0) {
            int cnt = 0;
            for (int u = 0; u < LW; ++u) cnt += __popc(sv[amb * LW + u]);
            const int x = gbnn_pick(sv, amb, cnt, h);
            sstk_c[depth] = amb;
            sstk_x[depth] = x;
            *spick = x;
        }
        __syncthreads();
        const int x = *spick;
        for (int w = tid; w < CW; w += GBNN_THREADS) {
            const int c = w / LW;
            if (c == amb) {
                const int q = w - c * LW;
                srem[w] = sv[w];
                sv[w] = ((x >> 5) == q) ? (1u << (x & 31)) : 0u;
            }
        }
        ++depth;
        __syncthreads();
        gbnn_fixpoint(W, sv, sn, sx, tid);
    }
}
#endif

// A block may hold 65,536 registers: up to 256 threads any register count fits (255 at most
// per thread); larger blocks get a launch bound so that the compiler keeps within
// 65,536 / GBNN_THREADS (64 for 1,024 threads).
#if GBNN_THREADS > 256
#define GBNN_RETRIEVE_BOUNDS __launch_bounds__(GBNN_THREADS, 1)
#else
#define GBNN_RETRIEVE_BOUNDS
#endif

// Dynamic shared memory (bytes), carved below; the engine's shared_bytes() computes the same:
//   sum-of-sum:        smax double[CW], smask, sv, sn uint[CW], sx, scnt int[NC]  = 20 CW + 8 NC
//   sum-of-max, joint: sv, sn, s0, srem uint[CW], sx, scnt, sstk_c, sstk_x int[NC] = 16 CW + 16 NC
extern "C" __global__ void GBNN_RETRIEVE_BOUNDS gbnn_retrieve(const unsigned int* __restrict__ W,
                                                              const int* __restrict__ X, long long K,
                                                              unsigned long long seed, double gamma, int max_iter,
                                                              int* __restrict__ out_msg, int* __restrict__ out_cnt,
                                                              int* __restrict__ out_iter,
                                                              unsigned char* __restrict__ out_conv)
{
    extern __shared__ __align__(16) unsigned char gbnn_smem[];
    __shared__ unsigned long long shash;
#if RULE == 0
    double* smax = reinterpret_cast<double*>(gbnn_smem);                // largest score of each word
    unsigned int* smask = reinterpret_cast<unsigned int*>(smax + CW);  // the bits reaching it
    unsigned int* sv = smask + CW;
    unsigned int* sn = sv + CW;
    int* sx = reinterpret_cast<int*>(sn + CW);
    int* scnt = sx + NC;
#else
    __shared__ int spick;
    unsigned int* sv = reinterpret_cast<unsigned int*>(gbnn_smem);
    unsigned int* sn = sv + CW;
    unsigned int* s0 = sn + CW;    // the rule's final state (n_candidates)
    unsigned int* srem = s0 + CW;  // candidates left in each clamped cluster
    int* sx = reinterpret_cast<int*>(srem + CW);
    int* scnt = sx + NC;
    int* sstk_c = scnt + NC;  // clamped cluster per depth
    int* sstk_x = sstk_c + NC;  // clamped neuron per depth
#endif
    const int tid = threadIdx.x;

    for (long long k = blockIdx.x; k < K; k += gridDim.x) {
        for (int cl = tid; cl < NC; cl += GBNN_THREADS) sx[cl] = X[k * NC + cl];
        __syncthreads();
        if (tid == 0) {
            unsigned long long h = seed;
            for (int c2 = 0; c2 < NC; ++c2) {
                h = gbnn_mix64((h + GBNN_GOLDEN) ^ (unsigned long long)(long long)(sx[c2] + 1));
            }
            shash = h;
        }
        int t = 0;
        int conv = 0;

#if RULE == 0
        // ---------------- SUM-OF-SUM (eqs. 3-5): erased clusters start all-off ----------------
        for (int w = tid; w < CW; w += GBNN_THREADS) {
            const int c = w / LW;
            const int q = w - c * LW;
            const int x = sx[c];
            sv[w] = (x >= 0 && (x >> 5) == q) ? (1u << (x & 31)) : 0u;
        }
        __syncthreads();
        while (t < max_iter) {
            for (int w = tid; w < CW; w += GBNN_THREADS) {
                unsigned int pl[NPLANES];
#pragma unroll
                for (int p = 0; p < NPLANES; ++p) pl[p] = 0u;
                // Bit-sliced counters: add row word w of every active neuron.
                for (int u = 0; u < CW; ++u) {
                    unsigned int vv = sv[u];
                    if (!vv) continue;
                    const int cu = u / LW;
                    const int base = cu * NL + (u - cu * LW) * 32;
                    while (vv) {
                        int b = __ffs(vv) - 1;
                        vv &= vv - 1u;
                        unsigned int carry = __ldg(W + (size_t)(base + b) * CW + w);
#pragma unroll
                        for (int p = 0; p < NPLANES; ++p) {
                            unsigned int tt = pl[p] & carry;
                            pl[p] ^= carry;
                            carry = tt;
                        }
                    }
                }
                // The word's largest score and the bits reaching it (a cluster keeps the bits of
                // its words whose largest score is the cluster's maximum).
                const unsigned int old = sv[w];
                double mx = -1.0;
                unsigned int mask = 0u;
                unsigned int bits = gbnn_valid_mask(w - (w / LW) * LW);
                while (bits) {
                    int b = __ffs(bits) - 1;
                    bits &= bits - 1u;
                    double s = gbnn_sos_score(pl, old, b, gamma);
                    if (s > mx) {
                        mx = s;
                        mask = 1u << b;
                    } else if (s == mx) {
                        mask |= 1u << b;
                    }
                }
                smax[w] = mx;
                smask[w] = mask;
            }
            __syncthreads();
            for (int w = tid; w < CW; w += GBNN_THREADS) {
                const int c = w / LW;
                double cm = smax[c * LW];
                for (int u = 1; u < LW; ++u) {
                    double v2 = smax[c * LW + u];
                    cm = v2 > cm ? v2 : cm;
                }
                sn[w] = smax[w] == cm ? smask[w] : 0u;
            }
            ++t;
            if (!gbnn_commit(sv, sn, tid)) {
                conv = 1;
                break;
            }
        }
#elif RULE == 1
        // ---------------- SUM-OF-MAX (eqs. 6-7) with BAIL-OUT-EARLY: erased start all-on ---------
        for (int w = tid; w < CW; w += GBNN_THREADS) {
            const int c = w / LW;
            const int q = w - c * LW;
            const int x = sx[c];
            sv[w] = (x < 0) ? gbnn_valid_mask(q) : (((x >> 5) == q) ? (1u << (x & 31)) : 0u);
        }
        __syncthreads();
        while (t < max_iter) {
            for (int w = tid; w < CW; w += GBNN_THREADS) {
                // gamma > 0: only active neurons can stay on (Lemma 1); gamma == 0: eq. 7 lets any
                // neuron with C-1 signals turn on.
#if GBNN_PRUNE
                unsigned int cand = gamma > 0.0 ? sv[w] : gbnn_valid_mask(w - (w / LW) * LW);
                sn[w] = gbnn_som_word(W, sv, sx, w, cand, false);
#else
                // test every neuron; with gamma > 0 an inactive one stays off all the same
                const unsigned int all = gbnn_valid_mask(w - (w / LW) * LW);
                sn[w] = gbnn_som_word(W, sv, sx, w, all, false) & (gamma > 0.0 ? sv[w] : all);
#endif
            }
            ++t;
            if (!gbnn_commit(sv, sn, tid)) {
                conv = 1;
                break;
            }
        }
#else
        // ---------------- JOINT (Algorithm 2) ----------------
        // Step 1 (one sum-of-sum step from the known clusters): an erased-cluster neuron stays a
        // candidate iff it receives C-e signals, i.e. it is connected to every known neuron.
        for (int w = tid; w < CW; w += GBNN_THREADS) {
            const int c = w / LW;
            const int q = w - c * LW;
            const int x = sx[c];
            unsigned int acc;
            if (x >= 0) {
                acc = ((x >> 5) == q) ? (1u << (x & 31)) : 0u;
            } else {
                acc = gbnn_valid_mask(q);
                for (int c2 = 0; c2 < NC && acc; ++c2) {
                    int x2 = sx[c2];
                    if (x2 < 0) continue;
                    acc &= __ldg(W + (size_t)(c2 * NL + x2) * CW + w);
                }
            }
            sv[w] = acc;
        }
        t = 1;
        __syncthreads();
        while (true) {
            gbnn_count(sv, scnt, tid);
            int empty = 0, unresolved = 0;
            for (int c2 = 0; c2 < NC; ++c2) {
                empty |= scnt[c2] == 0;
                unresolved |= (sx[c2] < 0 && scnt[c2] > 1);
            }
            __syncthreads();  // everyone has read scnt before it is reset
            bool full_check = false;
            if (empty) {
                // A cluster without neurons gives no signal: sum-of-max would switch every
                // neuron off (the probe is explained by no stored clique).
                for (int w = tid; w < CW; w += GBNN_THREADS) sv[w] = 0u;
                __syncthreads();
                conv = 1;
                break;
            }
            if (!unresolved) {
                full_check = true;
            } else {
                if (t >= max_iter) break;
                // BAIL-OUT-EARLY over the candidate pool of unresolved erased clusters only; known
                // clusters are skipped in the test (every candidate is connected to them) and
                // resolved clusters stay frozen (Lemma 1, Theorem 2).
                for (int w = tid; w < CW; w += GBNN_THREADS) {
                    const int c = w / LW;
                    const bool upd = sx[c] < 0 && scnt[c] > 1;
                    sn[w] = upd ? gbnn_som_word(W, sv, sx, w, sv[w], true) : sv[w];
                }
                ++t;
                if (gbnn_commit(sv, sn, tid)) continue;
                full_check = true;
            }
            if (full_check) {
                // Frozen clusters are exact only if the state is a true sum-of-max fixed point;
                // otherwise some frozen neuron dies, its cluster empties and everything goes off.
                int diff = 0;
                for (int w = tid; w < CW; w += GBNN_THREADS) {
                    sn[w] = gbnn_som_word(W, sv, sx, w, sv[w], false);
                    diff |= sn[w] != sv[w];
                }
                if (__syncthreads_or(diff)) {
                    for (int w = tid; w < CW; w += GBNN_THREADS) sv[w] = 0u;
                }
                __syncthreads();
                conv = 1;
                break;
            }
        }
#endif
#if RULE != 0
        // ---------------- an ambiguous fixed point becomes one of its cliques ----------------
        // (sum-of-max with gamma > 0 and joint; gamma == 0 would switch clamped-off neurons back on)
        for (int w = tid; w < CW; w += GBNN_THREADS) s0[w] = sv[w];
        if (conv && (RULE == 2 || gamma > 0.0)) {
            __syncthreads();
            gbnn_disambiguate(W, sv, sn, s0, srem, scnt, sstk_c, sstk_x, &spick, sx, shash, tid);
        }
        __syncthreads();
#endif
        // ---------------- pick one survivor per cluster, (rnd mod count)-th in order ----------------
        for (int cl = tid; cl < NC; cl += GBNN_THREADS) {
            int cnt = 0;
            for (int u = 0; u < LW; ++u) cnt += __popc(sv[cl * LW + u]);
#if RULE != 0
            int cnt0 = 0;  // n_candidates: the rule's final state, before disambiguation
            for (int u = 0; u < LW; ++u) cnt0 += __popc(s0[cl * LW + u]);
#else
            const int cnt0 = cnt;
#endif
            out_msg[k * NC + cl] = cnt > 0 ? gbnn_pick(sv, cl, cnt, shash) : -1;
            out_cnt[k * NC + cl] = cnt0;
        }
        if (tid == 0) {
            out_iter[k] = t;
            out_conv[k] = (unsigned char)conv;
        }
        __syncthreads();  // sv / sx are rewritten by the next probe of this block
    }
}

#endif  // RULE
