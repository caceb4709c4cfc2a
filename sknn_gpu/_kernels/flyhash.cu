// FlyHash kernels: fused sparse binary projection + exact winner-take-all.
//
// Numerical contract shared with the CPU engine (sknn_gpu/fly/_flyhash_cpu.py):
//   activation(row, u) = float32 sum, starting at +0.0, of x[row, j] over the S
//   connections j of unit u in ascending j order, one IEEE add at a time
//   (fadd_ieee: subnormals kept although CuPy compiles with -ftz=true).
//   Winners: the K largest activations; ties -> lower unit index; -0.0 == +0.0.
//
// Output: one bit per unit in np.packbits layout (unit i is bit 7 - i % 8 of byte
// i / 8), written as little-endian uint32 words, MW = ceil(M / 32) words per row.
//
// flyhash_fused: a block hashes ROWS input rows at a time (one resident block per
// SM, looping over the row groups). The rows live transposed in shared memory
// (xs[j * ROWSP + r]) so that the lanes of a warp, which hold different rows of the
// same unit, read consecutive words: conflict-free gathers, and the connection
// indices of a unit are one broadcast load per warp. The n x M activations are
// never written; the one full pass computes each of them once:
//   pass 0  (sample)  activations of the first sample_words*32 units -> coarse
//                     histogram over S*mean(x) +- 6 sqrt(S) sd(x) (within
//                     [S*min(x), S*max(x)]) -> a window that holds
//                     the K-th largest with high probability;
//   pass 1  (full)    units above the window are written as bits (sure winners);
//                     units inside it go to a fine histogram (NB bins) and to the
//                     row's window list in global memory (value, unit), at most
//                     gcap of them;
//   then             the bin b* holding the K-th largest and how many of it win;
//                     the listed units above b* are OR-ed in, those in b* (at most
//                     CAP per row) are ranked exactly in shared memory and the
//                     winners OR-ed in.
// A row whose K-th largest falls outside the window, whose window lists more than
// gcap units, or whose b* holds more than CAP units, is flagged; the host hashes
// flagged rows with flyhash_activations + the same exact selection (identical
// results, slower). A row whose inputs are all equal ties everywhere: its first K
// units win, decided in the kernel.
//
// Compile-time defines: ROWS (1..32, power of two), S (connections), SP (index
// row stride: S rounded up to a multiple of 8, rows 16-byte aligned), IDX_T (unsigned short or int), NB (bins, multiple of 32),
// NTHREADS (block size).

#include "ieee.cuh"
#include "fly.cuh"
#include "fly_units.cuh"

#ifndef ROWS
#define ROWS 32
#endif
#ifndef NB
#define NB 512
#endif
#ifndef NTHREADS
#define NTHREADS 1024
#endif

#define ROWSP ((ROWS) == 32 ? 33 : (ROWS))
#define RANGE_SD 6.0f  // the coarse range: activations' mean +- RANGE_SD spreads
#define GROUPS (32 / (ROWS))
#define NWARPS ((NTHREADS) / 32)
#define CAP ((NB) / 2)
#define FULL_MASK 0xffffffffu
#define FH_INF __int_as_float(0x7f800000)  // NVRTC has no <math.h> INFINITY

#define MODE_NORMAL 0
#define MODE_ALLTIE 1
#define MODE_FLAGGED 2

// Warp-wide: find the bin b of row r (histogram hist[b * ROWS + r]) such that
// above(b) < target <= above(b) + hist[b], above(b) = sum of bins > b.
// Returns b (or -1 if target > total); *above_out = above(b); *total_out = total.
__device__ __forceinline__ int select_bin(const unsigned* hist, int r, unsigned target,
                                          unsigned* above_out, unsigned* total_out)
{
    const int lane = threadIdx.x & 31;
    const int per = NB / 32;
    unsigned mine = 0;
    for (int b = lane * per; b < (lane + 1) * per; ++b) mine += hist[b * ROWS + r];
    unsigned suffix = mine;  // inclusive suffix sum over lanes (lane .. 31)
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned t = __shfl_down_sync(FULL_MASK, suffix, o);
        if (lane + o < 32) suffix += t;
    }
    const unsigned total = __shfl_sync(FULL_MASK, suffix, 0);
    const unsigned excl = suffix - mine;
    int found = -1;
    unsigned above = 0;
    if (target >= 1 && excl < target && target <= suffix) {
        unsigned acc = excl;
        for (int b = (lane + 1) * per - 1; b >= lane * per; --b) {
            const unsigned h = hist[b * ROWS + r];
            if (acc + h >= target) {
                found = b;
                above = acc;
                break;
            }
            acc += h;
        }
    }
    const unsigned owner = __ballot_sync(FULL_MASK, found >= 0);
    if (owner == 0u) {
        *above_out = 0;
        *total_out = total;
        return -1;
    }
    const int src = __ffs(owner) - 1;
    *above_out = __shfl_sync(FULL_MASK, above, src);
    *total_out = total;
    return __shfl_sync(FULL_MASK, found, src);
}

// Coarse bin of the sample pass: clamp((v - lo) * scale) into [0, NB).
__device__ __forceinline__ int coarse_bin(float v, float lo, float scale)
{
    const float t = fminf((v - lo) * scale, (float)(NB - 1));
    return t > 0.0f ? (int)t : 0;
}

// Fine class of the full pass and the window list: -1 below the window, NB above it, else a bin.
// Monotone non-decreasing in v, which is all the selection needs.
__device__ __forceinline__ int fine_class(float v, float wlo, float whi, float wscale, int clamp_lo,
                                          int clamp_hi)
{
    if (v < wlo) return clamp_lo ? 0 : -1;
    if (v >= whi) return clamp_hi ? NB - 1 : NB;
    const float t = fminf((v - wlo) * wscale, (float)(NB - 1));
    return t > 0.0f ? (int)t : 0;
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
flyhash_fused(const float* __restrict__ X, const long long n, const int D, const long long ldx,
              const IDX_T* __restrict__ idx, const int M, const int MW, const int K,
              const int sample_words, unsigned* __restrict__ out, int* __restrict__ flags,
              unsigned long long* __restrict__ window_g, const int gcap)
{
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned* hist = reinterpret_cast<unsigned*>(smem);                  // NB * ROWS
    unsigned* cand_key = hist;                                           // CAP * ROWS (reuse)
    int* cand_idx = reinterpret_cast<int*>(hist + CAP * ROWS);           // CAP * ROWS (reuse)
    float* xs = reinterpret_cast<float*>(smem + sizeof(unsigned) * NB * ROWS);  // D * ROWSP

    __shared__ float s_lo[ROWS], s_scale[ROWS];
    __shared__ float s_wlo[ROWS], s_whi[ROWS], s_wscale[ROWS];
    __shared__ int s_clamp_lo[ROWS], s_clamp_hi[ROWS], s_mode[ROWS], s_bstar[ROWS];
    __shared__ unsigned s_over[ROWS], s_need[ROWS], s_ncand[ROWS], s_nwin[ROWS];

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int r = lane % ROWS;   // the row this lane works on
    const int q = lane / ROWS;   // its unit group inside the warp
    const float* xs_r = xs + r;
    const int n_sample_words = MW < sample_words ? MW : sample_words;
    const int n_sample = M < n_sample_words * 32 ? M : n_sample_words * 32;
    // this block's window lists: ROWS x gcap (value bits, unit) pairs
    unsigned long long* const win = window_g + (size_t)blockIdx.x * ROWS * (size_t)gcap;
    const long long n_groups = (n + ROWS - 1) / ROWS;

    for (long long group = blockIdx.x; group < n_groups; group += gridDim.x) {
        const long long row0 = group * ROWS;
        __syncthreads();  // the previous group is done with every shared array

        // ---- load the block's rows, transposed ------------------------------------
        for (int e = tid; e < ROWS * D; e += NTHREADS) {
            const int rr = e / D;
            const int j = e - rr * D;
            const long long row = row0 + rr;
            xs[j * ROWSP + rr] = row < n ? X[row * ldx + j] : 0.0f;
        }
        for (int e = tid; e < NB * ROWS; e += NTHREADS) hist[e] = 0u;
        __syncthreads();

        // ---- per-row range: activations lie (up to rounding) in [S*min, S*max] ------
        for (int rr = warp; rr < ROWS; rr += NWARPS) {
            float mn = FH_INF, mx = -FH_INF;
            // all-equal test on the exact bits: the float min/max below run under
            // -ftz=true and would call a row of distinct subnormals constant
            unsigned kmn = 0xffffffffu, kmx = 0u;
            float sum = 0.0f, sumsq = 0.0f;  // approximate: they only place the coarse range
            for (int j = lane; j < D; j += 32) {
                const float v = xs[j * ROWSP + rr];
                mn = fminf(mn, v);
                mx = fmaxf(mx, v);
                kmn = min(kmn, ord_key(v));
                kmx = max(kmx, ord_key(v));
                sum += v;
                sumsq += v * v;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                mn = fminf(mn, __shfl_xor_sync(FULL_MASK, mn, o));
                mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
                kmn = min(kmn, __shfl_xor_sync(FULL_MASK, kmn, o));
                kmx = max(kmx, __shfl_xor_sync(FULL_MASK, kmx, o));
                sum += __shfl_xor_sync(FULL_MASK, sum, o);
                sumsq += __shfl_xor_sync(FULL_MASK, sumsq, o);
            }
            if (lane == 0) {
                float lo = (float)S * mn, hi = (float)S * mx;
                // A sum of S of the row's values has mean S*mu and spread <= sqrt(S)*sigma:
                // bin mean +- RANGE_SD spreads, not the whole [S*min, S*max], so that the
                // coarse bins (hence the window's edges) are fine where the K-th largest
                // lies. Activations outside fall into the end bins, which widens the
                // window there (never a wrong result); a degenerate spread keeps min/max.
                const float mu = sum / (float)D;
                const float var = fmaxf(sumsq / (float)D - mu * mu, 0.0f);
                const float spread = RANGE_SD * sqrtf((float)S * var);
                const float tlo = fmaxf(lo, (float)S * mu - spread), thi = fminf(hi, (float)S * mu + spread);
                if (thi - tlo > 0.0f && thi - tlo < FH_INF) {
                    lo = tlo;
                    hi = thi;
                }
                const float scale = (float)NB / (hi - lo);
                int mode = MODE_NORMAL;
                if (kmn == kmx) mode = MODE_ALLTIE;
                else if (!(scale > 0.0f) || !(scale < FH_INF) || !(hi - lo < FH_INF)) mode = MODE_FLAGGED;
                s_lo[rr] = lo;
                s_scale[rr] = scale;
                s_mode[rr] = mode;
                s_over[rr] = 0u;
                s_ncand[rr] = 0u;
            }
        }
        __syncthreads();

        // ---- pass 0: coarse histogram of a sample of units -------------------------
        {
            const float lo = s_lo[r], scale = s_scale[r];
            const bool active = s_mode[r] == MODE_NORMAL;
            for (int wd = warp * GROUPS + q; wd < n_sample_words; wd += NWARPS * GROUPS) {
                for (int i = 0; i < 32; ++i) {
                    const int u = wd * 32 + i;
                    if (u >= n_sample) break;
                    const float v = unit_activation<ROWSP, false>(idx, u, xs_r);
                    if (active) atomicAdd(&hist[coarse_bin(v, lo, scale) * ROWS + r], 1u);
                }
            }
        }
        __syncthreads();

        // ---- window from the sample's order statistics ----------------------------
        for (int rr = warp; rr < ROWS; rr += NWARPS) {
            if (s_mode[rr] != MODE_NORMAL) continue;  // warp-uniform
            const float e = (float)n_sample * (float)K / (float)M;
            const float sd = sqrtf(e * (1.0f - (float)K / (float)M));
            const float r1f = floorf(e - 5.0f * sd - 2.0f);
            const float r2f = ceilf(e + 5.0f * sd + 2.0f);
            unsigned above, total;
            int clamp_hi = 1, clamp_lo = 1;
            float whi = 0.0f, wlo = 0.0f;
            const float lo = s_lo[rr], scale = s_scale[rr];
            if (r1f >= 1.0f) {
                const int b1 = select_bin(hist, rr, (unsigned)r1f, &above, &total);
                if (b1 >= 0 && b1 < NB - 1) {
                    clamp_hi = 0;
                    whi = lo + (float)(b1 + 1) / scale;
                }
            }
            if (r2f <= (float)n_sample) {
                const int b2 = select_bin(hist, rr, (unsigned)r2f, &above, &total);
                if (b2 > 0) {
                    clamp_lo = 0;
                    wlo = lo + (float)b2 / scale;
                }
            }
            if (lane == 0) {
                if (clamp_lo) wlo = lo;
                if (clamp_hi) whi = lo + (float)NB / scale;  // the coarse upper end
                const float wscale = (float)NB / (whi - wlo);
                if (!(whi > wlo) || !(wscale > 0.0f) || !(wscale < FH_INF)) s_mode[rr] = MODE_FLAGGED;
                s_wlo[rr] = wlo;
                s_whi[rr] = whi;
                s_wscale[rr] = wscale;
                s_clamp_lo[rr] = clamp_lo;
                s_clamp_hi[rr] = clamp_hi;
            }
        }
        __syncthreads();
        for (int e = tid; e < NB * ROWS; e += NTHREADS) hist[e] = 0u;
        __syncthreads();

        // ---- pass 1, the one full pass: emit the units above the window, histogram
        // ---- the units inside it and list them (value, unit) in global memory ------
        const long long row = row0 + r;
        {
            const float wlo = s_wlo[r], whi = s_whi[r], wscale = s_wscale[r];
            const int clamp_lo = s_clamp_lo[r], clamp_hi = s_clamp_hi[r];
            const int mode = s_mode[r];
            unsigned long long* const win_r = win + (size_t)r * gcap;
            unsigned* out_row = out + (row < n ? row : 0) * (long long)MW;
            unsigned over = 0;
            for (int wd = warp * GROUPS + q; wd < MW; wd += NWARPS * GROUPS) {
                unsigned bits = 0u;
                if (mode == MODE_ALLTIE) {
                    for (int i = 0; i < 32; ++i) {
                        const int u = wd * 32 + i;
                        if (u < K && u < M) bits |= unit_bit(u);
                    }
                } else if (mode == MODE_NORMAL) {
                    for (int i = 0; i < 32; ++i) {
                        const int u = wd * 32 + i;
                        if (u >= M) break;
                        const float v = unit_activation<ROWSP, false>(idx, u, xs_r);
                        const int c = fine_class(v, wlo, whi, wscale, clamp_lo, clamp_hi);
                        if (c == NB) {
                            bits |= unit_bit(u);
                            ++over;
                        } else if (c >= 0) {
                            atomicAdd(&hist[c * ROWS + r], 1u);
                            const unsigned slot = atomicAdd(&s_ncand[r], 1u);
                            if (slot < (unsigned)gcap)
                                win_r[slot] = ((unsigned long long)u << 32) | __float_as_uint(v);
                        }
                    }
                }
                if (row < n) out_row[wd] = bits;
            }
            if (mode == MODE_NORMAL && over) atomicAdd(&s_over[r], over);
        }
        __syncthreads();

        // ---- the bin b* holding the K-th largest, and how many of it win -----------
        for (int rr = warp; rr < ROWS; rr += NWARPS) {
            if (s_mode[rr] != MODE_NORMAL) continue;  // warp-uniform
            const unsigned over = s_over[rr];
            unsigned above = 0, total = 0;
            int bstar = -1;
            if (over < (unsigned)K) bstar = select_bin(hist, rr, (unsigned)K - over, &above, &total);
            if (lane == 0) {
                const unsigned listed = s_ncand[rr];
                if (bstar < 0 || hist[bstar * ROWS + rr] > (unsigned)CAP || listed > (unsigned)gcap) {
                    s_mode[rr] = MODE_FLAGGED;
                } else {
                    s_bstar[rr] = bstar;
                    s_need[rr] = (unsigned)K - over - above;  // winners to take from bin b*
                }
                s_nwin[rr] = listed;
                s_ncand[rr] = 0u;
            }
        }
        __syncthreads();

        // ---- the window's units: above b* win, b*'s go to the exact ranking --------
        for (int rr = warp; rr < ROWS; rr += NWARPS) {
            const long long rrow = row0 + rr;
            if (rrow >= n || s_mode[rr] != MODE_NORMAL) continue;  // warp-uniform
            const float wlo = s_wlo[rr], whi = s_whi[rr], wscale = s_wscale[rr];
            const int clamp_lo = s_clamp_lo[rr], clamp_hi = s_clamp_hi[rr], bstar = s_bstar[rr];
            const unsigned listed = s_nwin[rr];
            const unsigned long long* win_rr = win + (size_t)rr * gcap;
            for (unsigned i = lane; i < listed; i += 32) {
                const unsigned long long e = win_rr[i];
                const float v = __uint_as_float((unsigned)e);
                const int u = (int)(e >> 32);
                const int c = fine_class(v, wlo, whi, wscale, clamp_lo, clamp_hi);
                if (c > bstar) {
                    atomicOr(&out[rrow * MW + (u >> 5)], unit_bit(u));
                } else if (c == bstar) {
                    const unsigned slot = atomicAdd(&s_ncand[rr], 1u);  // < CAP: b* holds <= CAP
                    cand_key[slot * ROWS + rr] = ord_key(v);
                    cand_idx[slot * ROWS + rr] = u;
                }
            }
        }
        __syncthreads();

        // ---- rank the candidates exactly: (key desc, index asc) ----------------------
        for (int e = tid; e < CAP * ROWS; e += NTHREADS) {
            const int rr = e % ROWS;
            const int c = e / ROWS;
            const long long rrow = row0 + rr;
            if (rrow >= n || s_mode[rr] != MODE_NORMAL) continue;
            const unsigned nc = s_ncand[rr];
            if ((unsigned)c >= nc) continue;
            const unsigned key = cand_key[c * ROWS + rr];
            const int u = cand_idx[c * ROWS + rr];
            unsigned rank = 0;
            for (unsigned c2 = 0; c2 < nc; ++c2) {
                const unsigned k2 = cand_key[c2 * ROWS + rr];
                const int u2 = cand_idx[c2 * ROWS + rr];
                rank += (k2 > key) || (k2 == key && u2 < u);
            }
            if (rank < s_need[rr]) atomicOr(&out[rrow * MW + (u >> 5)], unit_bit(u));
        }

        // ---- flag the rows the host must finish ------------------------------------
        if (tid < ROWS && row0 + tid < n) flags[row0 + tid] = s_mode[tid] == MODE_FLAGGED ? 1 : 0;
    }  // group
}

// Activations of selected rows, written densely: A[i, u] for rows[i] (or row i
// when rows == nullptr). Same additions in the same order as flyhash_fused.
extern "C" __global__ void flyhash_activations(const float* __restrict__ X, const long long ldx,
                                               const long long* __restrict__ rows, const int nrows,
                                               const IDX_T* __restrict__ idx, const int M,
                                               float* __restrict__ A)
{
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y;
    if (u >= M || i >= nrows) return;
    const long long row = rows ? rows[i] : (long long)i;
    A[(long long)i * M + u] = unit_activation<1, true>(idx, u, X + row * ldx);
}

// Winner indices, ascending, from the bit words: one warp per row.
// out[indptr[row] ...] (or out[row * K ...] when indptr == nullptr).
extern "C" __global__ void flyhash_bits_to_indices(const unsigned* __restrict__ bits, const long long n,
                                                   const int MW, const long long* __restrict__ indptr,
                                                   const int K, int* __restrict__ out)
{
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= n) return;  // warp-uniform
    long long pos = indptr ? indptr[row] : row * (long long)K;
    const unsigned* w = bits + row * MW;
    for (int base = 0; base < MW; base += 32) {
        const int wd = base + lane;
        const unsigned word = wd < MW ? w[wd] : 0u;
        const int pc = __popc(word);
        int incl = pc;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int t = __shfl_up_sync(FULL_MASK, incl, o);
            if (lane >= o) incl += t;
        }
        long long p = pos + (incl - pc);
        for (int i = 0; i < 32; ++i) {
            if (word & unit_bit(i)) out[p++] = wd * 32 + i;
        }
        pos += __shfl_sync(FULL_MASK, incl, 31);
    }
}

// Winners per row (popcount of the row's words): one warp per row.
extern "C" __global__ void flyhash_row_counts(const unsigned* __restrict__ bits, const long long n,
                                              const int MW, long long* __restrict__ counts)
{
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= n) return;
    int c = 0;
    for (int wd = lane; wd < MW; wd += 32) c += __popc(bits[row * MW + wd]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(FULL_MASK, c, o);
    if (lane == 0) counts[row] = c;
}

// Floyd's collisions of one block of projection draws (the host drew them: the
// random stream is NumPy's). draws: (s, n) int32, column i = each unit's draw for
// j = d - s + i; out: (n, s) int32, each unit's picks in ascending order. One
// thread per unit: a draw its unit already took becomes j (never taken yet), as
// in _flyhash._resolve_on_host; the picks are read back from the membership bits
// in ascending order. d <= 32 * FLOYD_WORDS (the host checks).
#ifndef FLOYD_WORDS
#define FLOYD_WORDS 256
#endif
extern "C" __global__ void floyd_resolve(const int* __restrict__ draws, const long long n, const int d,
                                         const int s, int* __restrict__ out)
{
    const long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n) return;
    unsigned taken[FLOYD_WORDS];
    const int words = (d + 31) >> 5;
    for (int w = 0; w < words; ++w) taken[w] = 0u;
    for (int i = 0; i < s; ++i) {
        int t = draws[(long long)i * n + u];
        if ((taken[t >> 5] >> (t & 31)) & 1u) t = d - s + i;
        taken[t >> 5] |= 1u << (t & 31);
    }
    int* o = out + u * s;
    int p = 0;
    for (int w = 0; w < words; ++w) {
        unsigned bits = taken[w];
        while (bits) {
            o[p++] = (w << 5) + __ffs(bits) - 1;
            bits &= bits - 1u;
        }
    }
}

// ---------------------------------------------------------------------------------
// The projection's random draws on the GPU, exactly as NumPy's legacy
// RandomState.randint(0, j + 1, size=n) makes them (a frozen stream, NEP 19): MT19937
// 32-bit outputs (mt_raw, _kernels/mt19937.cu), and per value the first output whose low
// bits (the smallest all-ones mask >= j) are <= j. Runs as one block.
// ---------------------------------------------------------------------------------
// mt_draws: the (s, n) draws of columns j = d - s .. d - 1 from the raw outputs, column
// after column, each value the next output accepted by its column (masked rejection).
// A thread takes 4 consecutive outputs per round; a block scan orders the accepted ones.
// *consumed: outputs used, or -1 when `avail` ran out first (the host then draws).
extern "C" __global__ void __launch_bounds__(1024) mt_draws(const unsigned* __restrict__ raw, const long long avail,
                                                            const int n, const int s, const int d,
                                                            int* __restrict__ draws, long long* __restrict__ consumed)
{
    __shared__ int warp_tot[32];
    __shared__ long long s_next;
    __shared__ int s_fail;
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    if (tid == 0) s_fail = 0;
    long long p = 0;
    for (int i = 0; i < s; ++i) {
        const unsigned j = (unsigned)(d - s + i);
        unsigned mask = j;
        mask |= mask >> 1;
        mask |= mask >> 2;
        mask |= mask >> 4;
        mask |= mask >> 8;
        mask |= mask >> 16;
        int* col = draws + (long long)i * n;
        int have = 0;
        while (have < n) {  // uniform
            unsigned v[4];
            int c = 0;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const long long t = p + 4 * tid + u;
                v[u] = t < avail ? (raw[t] & mask) : 0xffffffffu;
                c += v[u] <= j;
            }
            // exclusive block scan of c
            int incl = c;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int x = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += x;
            }
            if (lane == 31) warp_tot[warp] = incl;
            __syncthreads();
            if (warp == 0) {
                int wt = lane < (blockDim.x >> 5) ? warp_tot[lane] : 0;
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                    const int x = __shfl_up_sync(0xffffffffu, wt, o);
                    if (lane >= o) wt += x;
                }
                warp_tot[lane] = wt;  // inclusive over warps
            }
            __syncthreads();
            const int total = warp_tot[31];
            int k = have + (warp ? warp_tot[warp - 1] : 0) + incl - c;  // this thread's first slot
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                if (v[u] <= j) {
                    if (k < n) col[k] = (int)v[u];
                    if (k == n - 1) s_next = p + 4 * tid + u + 1;  // the column's last value
                    ++k;
                }
            }
            __syncthreads();
            if (have + total >= n) {
                have = n;
                p = s_next;
            } else {
                have += total;
                p += 4 * (long long)blockDim.x;
                if (p >= avail) {
                    if (tid == 0) s_fail = 1;
                    have = n;
                }
            }
            __syncthreads();  // warp_tot and s_next are rewritten by the next round
        }
        if (s_fail) break;  // uniform after the barrier
    }
    if (tid == 0) *consumed = s_fail ? -1ll : p;
}
