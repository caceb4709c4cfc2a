// FlyHash on tensor cores: the input and the dense 0/1 projection go through a
// cuBLAS half-precision product with float32 accumulation (sknn_gpu/fly/_flyhash_cuda.py),
// and these kernels do the rest.
//
//   fly_integer_check  flags a block of float32 input unless every entry is a whole
//                      number of magnitude <= 2048 (exact in float16; a sum of S < 8192
//                      of them is exact in the float32 accumulator, in any order, so
//                      the product gives the CPU's activations bit for bit).
//   fly_to_half        float32 rows -> float16 bits, padded to DP columns. TOP = -2
//                      (float rows under 'exact'): each row scaled by a power of two
//                      and split exactly into two float16s, hi in columns [0, DP) and
//                      lo in [DP, 2 DP) of rows 2 DP apart. TOP = -1
//                      (integer-valued rows): each row centred on a whole number near
//                      its mean where that keeps it within +-2048 (exact in float16),
//                      so that its activations are integers near 0. TOP > 0
//                      (precision='fast'): each row centred on its mean and
//                      scaled by a power of two that puts its largest magnitude in
//                      [2^(TOP-1), 2^TOP): no float16 overflow of the inputs, nor of
//                      activations written in float16 when S * 2^TOP <= 65504, and
//                      the winners do not change (every unit sums S inputs, so the
//                      shift moves all activations alike; the scale is positive).
//                      Centring keeps float16's resolution on the spread of the
//                      activations rather than on their common offset.
//   fly_dense_projection  the (M, DP) float16 0/1 projection from the connection table.
//   fly_select         exact top-K of each row of activations (float32, or float16
//                      bits with KEY16; then rows whose K-th largest is not within
//                      +-2047 are flagged in `inexact` when it is given; with BAND the
//                      float32 activations are approximations of float rows, and the
//                      units near the K-th largest get their exact sums), ties to
//                      the lower unit index, written as packed bit words (the layout of
//                      flyhash.cu). One block per row; a radix select whose digits
//                      adapt to the row's key range (a histogram of SEL_BINS bins over
//                      [lo, hi], then over the bin that holds the K-th largest, ...:
//                      at most three rounds for 32-bit keys, one or two for the small
//                      integers of integer input), then one counting pass and one
//                      emitting pass that rank the ties in unit order.
//
// Compile-time defines: SEL_NT (threads per block), SMEM_KEYS (1: the row's keys are
// cached in dynamic shared memory, M * 4 bytes, M * 2 with KEY16; 0: re-read from the
// activations), KEY16 (1: the activations are float16 bits and their keys 16 bits),
// BAND (1: approximate float32 activations checked against the exact sums; then S, SP
// and IDX_T as in fly_units.cuh).

#include "ieee.cuh"
#include "fly.cuh"

#ifndef SEL_NT
#define SEL_NT 512
#endif
#ifndef SMEM_KEYS
#define SMEM_KEYS 1
#endif
#ifndef KEY16
#define KEY16 0
#endif
#ifndef BAND
#define BAND 0
#endif
#if BAND
#include "fly_units.cuh"
#define BAND_CAP 512  // candidates per row (more: the row is flagged)
#endif
#define SEL_BINS 2048
#define SEL_BPT (SEL_BINS / SEL_NT)
#define SEL_WARPS (SEL_NT / 32)
#define FULL 0xffffffffu
#define HALF_ONE 0x3C00u
#define INT_LIMIT_BITS 0x45000000u  // 2048.0f
#define FH_INF_F __int_as_float(0x7f800000)

// |x| (its bits without the sign) is a whole number <= 2048
__device__ __forceinline__ bool small_whole(unsigned a)
{
    if (a == 0u) return true;
    if (a > INT_LIMIT_BITS) return false;
    const int e = (int)(a >> 23) - 127;  // |x| in [2^e, 2^(e+1)), e <= 11 here
    if (e < 0) return false;             // 0 < |x| < 1 (subnormals included)
    return (a & ((1u << (23 - e)) - 1u)) == 0u;
}

extern "C" __global__ void fly_integer_check(const float* __restrict__ X, const long long n, const int D,
                                             const long long ldx, unsigned* __restrict__ bad)
{
    unsigned any = 0u;
    for (long long r = blockIdx.x; r < n; r += gridDim.x) {
        const float* x = X + r * ldx;
        for (int j = threadIdx.x; j < D; j += blockDim.x)
            any |= small_whole(__float_as_uint(x[j]) & 0x7fffffffu) ? 0u : 1u;
    }
    if (__syncthreads_or(any) && threadIdx.x == 0) atomicOr(bad, 1u);
}

// 2^t as two normal float32 factors (2^(t/2) and 2^(t - t/2)), for |t| up to 252: a row
// scaled by 2^t in two exact steps, where 2^t itself may not be a float32 (up to 2^163
// for a row whose largest magnitude is the smallest subnormal); (1, 1) beyond that
// (cannot happen for finite rows).
__device__ __forceinline__ void pow2_factors(const int t, float& f1, float& f2)
{
    const int t1 = t / 2, t2 = t - t1;
    if (t1 < -126 || t2 < -126 || t1 > 127 || t2 > 127) {
        f1 = f2 = 1.0f;
        return;
    }
    f1 = __int_as_float((127 + t1) << 23);
    f2 = __int_as_float((127 + t2) << 23);
}

// One block (256 threads) per row, grid-stride over rows.
extern "C" __global__ void fly_to_half(const float* __restrict__ X, const long long n, const int D,
                                       const long long ldx, const int TOP,
                                       unsigned short* __restrict__ out, const int DP)
{
    __shared__ float s_red[3][8];
    __shared__ unsigned s_abs[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    const float invD = 1.0f / (float)D;
    for (long long r = blockIdx.x; r < n; r += gridDim.x) {
        const float* x = X + r * ldx;
        unsigned short* o = out + r * (TOP == -2 ? 2LL * DP : (long long)DP);
        if (TOP == 0) {
            for (int j = threadIdx.x; j < DP; j += blockDim.x) o[j] = j < D ? f32_to_f16_ieee(x[j]) : (unsigned short)0;
            continue;
        }
        // the row's smallest, largest and mean value, for the three modes below, and the
        // bits of its largest magnitude (from the bits: -ftz min/max flush subnormals)
        float mn = FH_INF_F, mx = -FH_INF_F, mean = 0.0f;
        unsigned abits = 0u;
        for (int j = threadIdx.x; j < D; j += blockDim.x) {
            const float v = x[j];
            mn = fminf(mn, v);
            mx = fmaxf(mx, v);
            mean += v * invD;
            abits = max(abits, __float_as_uint(v) & 0x7fffffffu);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            mn = fminf(mn, __shfl_xor_sync(FULL, mn, off));
            mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, off));
            mean += __shfl_xor_sync(FULL, mean, off);
            abits = max(abits, __shfl_xor_sync(FULL, abits, off));
        }
        if (lane == 0) {
            s_red[0][warp] = mn;
            s_red[1][warp] = mx;
            s_red[2][warp] = mean;
            s_abs[warp] = abits;
        }
        __syncthreads();
        mn = s_red[0][0], mx = s_red[1][0], mean = s_red[2][0], abits = s_abs[0];
        for (int w = 1; w < nw; ++w) {
            mn = fminf(mn, s_red[0][w]);
            mx = fmaxf(mx, s_red[1][w]);
            mean += s_red[2][w];
            abits = max(abits, s_abs[w]);
        }
        __syncthreads();
        if (TOP == -2) {
            // float rows split exactly into two float16s, x sc = hi + lo (+ 2^-22 of it):
            // scaled by the power of two that puts the largest magnitude in [2^14, 2^15),
            // IEEE arithmetic (CuPy's -ftz would flush subnormal inputs); hi in columns
            // [0, DP), lo in [DP, 2 DP)
            // biased exponent of the largest magnitude (of its leading bit for a subnormal)
            const int e = abits >= 0x00800000u ? (int)(abits >> 23) : (31 - __clz(abits)) - 22;
            float sc1 = 1.0f, sc2 = 1.0f;
            if (abits != 0u) pow2_factors(141 - e, sc1, sc2);  // up to 2^163 (the smallest subnormal)
            for (int j = threadIdx.x; j < DP; j += blockDim.x) {
                unsigned short hi = 0, lo = 0;
                if (j < D) {
                    const float v = fmul_ieee(fmul_ieee(x[j], sc1), sc2);
                    hi = f32_to_f16_ieee(v);
                    lo = f32_to_f16_ieee(fsub_ieee(v, f16_to_f32_ieee(hi)));
                }
                o[j] = hi;
                o[DP + j] = lo;
            }
            continue;
        }
        if (TOP == -1) {
            // integer-valued rows: centred on the nearest whole number to the mean, which
            // keeps them whole and exact in float16 when every |x - c| <= 2048 (else not
            // centred); their activations are then exact integers centred near 0
            float c = rintf(mean);
            if (fmaxf(mx - c, c - mn) > 2048.0f) c = 0.0f;
            for (int j = threadIdx.x; j < DP; j += blockDim.x)
                o[j] = j < D ? f32_to_f16_ieee(x[j] - c) : (unsigned short)0;
            continue;
        }
        // 'fast': centre the row on its mean c (every unit has S connections, so a shift
        // of the row shifts every activation by S c: the same winners) and scale it by a
        // power of two; halves throughout so that no intermediate overflows
        const float c2 = 0.5f * mean;
        const float h = fmaxf(0.5f * mx - c2, c2 - 0.5f * mn);  // half the largest |x - c|
        float sc1 = 1.0f, sc2 = 1.0f;
        const int e = (int)(__float_as_uint(h) >> 23);  // biased exponent of h (h >= 0)
        if (e > 0) pow2_factors(126 + TOP - e, sc1, sc2);  // puts h in [2^(TOP-1), 2^TOP)
        for (int j = threadIdx.x; j < DP; j += blockDim.x)
            o[j] = j < D ? f32_to_f16_ieee(fmul_ieee(fmul_ieee(0.5f * x[j] - c2, sc1), sc2)) : (unsigned short)0;
    }
}

extern "C" __global__ void fly_dense_projection(const int* __restrict__ conn, const int M, const int n_conn,
                                                unsigned short* __restrict__ P, const int DP)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)M * n_conn) return;
    const long long u = e / n_conn;
    P[u * DP + conn[e]] = (unsigned short)HALF_ONE;
}

#if KEY16
#define KEY16_EXACT_LO 0x1800u  // key of -2047.0 (float16 0xE7FF)
#define KEY16_EXACT_HI 0xE7FFu  // key of +2047.0 (float16 0x67FF)
typedef unsigned short elem_t;  // the activations: float16 bits
typedef unsigned short skey_t;  // a key as kept in shared memory
#define KPV 8                   // keys per 16-byte vector

// 16-bit key of float16 bits that orders as the values do; -0.0 and +0.0 are equal.
__device__ __forceinline__ unsigned elem_key(unsigned short h)
{
    unsigned b = h;
    if ((b & 0x7fffu) == 0u) b = 0u;
    return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
}
// the KPV keys of a vector of activations / of stored keys, and KPV keys as a stored vector
__device__ __forceinline__ void vec_elem_keys(const uint4 v, unsigned* k)
{
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        k[2 * i] = elem_key((unsigned short)(w[i] & 0xffffu));
        k[2 * i + 1] = elem_key((unsigned short)(w[i] >> 16));
    }
}
__device__ __forceinline__ void vec_keys(const uint4 v, unsigned* k)
{
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        k[2 * i] = w[i] & 0xffffu;
        k[2 * i + 1] = w[i] >> 16;
    }
}
__device__ __forceinline__ uint4 keys_vec(const unsigned* k)
{
    return make_uint4(k[0] | (k[1] << 16), k[2] | (k[3] << 16), k[4] | (k[5] << 16), k[6] | (k[7] << 16));
}
#else
typedef float elem_t;
typedef unsigned skey_t;
#define KPV 4
__device__ __forceinline__ unsigned elem_key(float v) { return ord_key(v); }
__device__ __forceinline__ void vec_elem_keys(const uint4 v, unsigned* k)
{
    k[0] = ord_key(__uint_as_float(v.x));
    k[1] = ord_key(__uint_as_float(v.y));
    k[2] = ord_key(__uint_as_float(v.z));
    k[3] = ord_key(__uint_as_float(v.w));
}
__device__ __forceinline__ void vec_keys(const uint4 v, unsigned* k)
{
    k[0] = v.x;
    k[1] = v.y;
    k[2] = v.z;
    k[3] = v.w;
}
__device__ __forceinline__ uint4 keys_vec(const unsigned* k) { return make_uint4(k[0], k[1], k[2], k[3]); }
#endif

#if SMEM_KEYS
#define KEY(i) ((unsigned)keys[i])
#else
#define KEY(i) elem_key(a[i])
#endif

// Bin b of hist (SEL_BINS bins, larger keys in higher bins) that holds the need-th
// largest key: above(b) < need <= above(b) + hist[b], above(b) = keys in bins > b.
// Every thread gets b in *s_bin and above(b) in *s_above after the call.
__device__ __forceinline__ void find_bin(const unsigned* hist, const unsigned need, unsigned* s_warp,
                                         int* s_bin, unsigned* s_above)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    unsigned mine = 0u;
#pragma unroll
    for (int i = 0; i < SEL_BPT; ++i) mine += hist[tid * SEL_BPT + i];
    unsigned suf = mine;  // sum over the threads t' >= tid of this warp
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned t = __shfl_down_sync(FULL, suf, o);
        if (lane + o < 32) suf += t;
    }
    if (lane == 0) s_warp[warp] = suf;
    __syncthreads();
    unsigned later = 0u;  // keys in the warps after this one
    for (int w = warp + 1; w < SEL_WARPS; ++w) later += s_warp[w];
    const unsigned above = suf - mine + later;
    if (above < need && need <= above + mine) {
        unsigned acc = above;
        for (int i = SEL_BPT - 1; i >= 0; --i) {
            const unsigned h = hist[tid * SEL_BPT + i];
            if (acc + h >= need) {
                *s_bin = tid * SEL_BPT + i;
                *s_above = acc;
                break;
            }
            acc += h;
        }
    }
    __syncthreads();
}

// f(unit, key) for every key of the row, KPV at a time (16-byte loads) when the row
// allows it (`vec`: M and lda multiples of KPV), else one at a time.
template <class F>
__device__ __forceinline__ void for_each_key(const skey_t* keys, const elem_t* __restrict__ a, int M, bool vec,
                                             F f)
{
    if (vec) {
#if SMEM_KEYS
        const uint4* v4 = reinterpret_cast<const uint4*>(keys);
#else
        const uint4* v4 = reinterpret_cast<const uint4*>(a);
#endif
        for (int q = threadIdx.x; q < M / KPV; q += SEL_NT) {
            unsigned k[KPV];
#if SMEM_KEYS
            vec_keys(v4[q], k);
#else
            vec_elem_keys(v4[q], k);
#endif
#pragma unroll
            for (int i = 0; i < KPV; ++i) f(q * KPV + i, k[i]);
        }
        return;
    }
    for (int i = threadIdx.x; i < M; i += SEL_NT) f(i, KEY(i));
}

// The 8 keys of units 8 b .. 8 b + 7 (0 past the row's end).
__device__ __forceinline__ void byte_keys(const skey_t* keys, const elem_t* __restrict__ a, int M, bool vec, int b,
                                          unsigned* k)
{
    const int u0 = 8 * b;
    if (vec && u0 + 8 <= M) {
#if SMEM_KEYS
        const uint4* v4 = reinterpret_cast<const uint4*>(keys + u0);
#pragma unroll
        for (int v = 0; v < 8 / KPV; ++v) vec_keys(v4[v], k + v * KPV);
#else
        const uint4* v4 = reinterpret_cast<const uint4*>(a + u0);
#pragma unroll
        for (int v = 0; v < 8 / KPV; ++v) vec_elem_keys(v4[v], k + v * KPV);
#endif
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) k[j] = u0 + j < M ? KEY(u0 + j) : 0u;
}

// Narrow [lo, hi] (keys) or [ilo, ihi] (units) to the bin of SEL_BINS that holds the
// need-th largest of `hist`; returns the bin's count and updates need and the range.
__device__ __forceinline__ unsigned narrow(const unsigned* hist, unsigned& need, unsigned& lo, unsigned& hi,
                                           int shift, bool reversed, unsigned* s_warp, int* s_bin,
                                           unsigned* s_above)
{
    find_bin(hist, need, s_warp, s_bin, s_above);
    const int b = *s_bin;
    const unsigned count = hist[b];
    need -= *s_above;
    const unsigned nlo = lo + ((unsigned)(reversed ? SEL_BINS - 1 - b : b) << shift);
    const unsigned width = (1u << shift) - 1u;
    hi = (hi - nlo) <= width ? hi : nlo + width;
    lo = nlo;
    __syncthreads();  // hist and s_bin are rewritten next
    return count;
}

__device__ __forceinline__ int bin_shift(unsigned span)
{
    const int bits = span ? 32 - __clz(span) : 0;
    return bits > 11 ? bits - 11 : 0;
}

// out row r (ldo words apart) <- the K largest of A row r (lda elements apart), r < n.
extern "C" __global__ void __launch_bounds__(SEL_NT)
fly_select(const elem_t* __restrict__ A, const long long lda, const int M, const int MW, const int K,
           unsigned* __restrict__ out, const long long ldo, unsigned* __restrict__ inexact
#if BAND
           , const float* __restrict__ X, const long long ldx, const IDX_T* __restrict__ idx, const float band
#endif
)
{
#if SMEM_KEYS
    extern __shared__ __align__(16) skey_t keys[];
#else
    const skey_t* keys = nullptr;
#endif
    __shared__ unsigned hist[SEL_BINS];
    __shared__ unsigned s_warp[SEL_WARPS];
    __shared__ unsigned s_lo[SEL_WARPS], s_hi[SEL_WARPS];
    __shared__ int s_bin;
    __shared__ unsigned s_above;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long row = blockIdx.x;
    const elem_t* __restrict__ a = A + row * lda;
    const bool vec = (M % KPV == 0) && (lda % KPV == 0);

    // ---- keys and the first range -----------------------------------------------
    // 16-bit keys: the first round histograms the whole key space while loading (its
    // bins are the keys' top 11 bits). 32-bit keys: the row's key range first, which
    // for small integers is narrow (one or two rounds instead of three).
    unsigned lo, hi;
    bool ready = false;  // hist already holds the keys in [lo, hi]
#if KEY16
    for (int b = tid; b < SEL_BINS; b += SEL_NT) hist[b] = 0u;
    __syncthreads();
    lo = 0u;
    hi = 0xffffu;
    ready = true;
    const int shift0 = bin_shift(hi - lo);
#endif
    {
        unsigned kmn = 0xffffffffu, kmx = 0u;
        if (vec) {
            const uint4* a4 = reinterpret_cast<const uint4*>(a);
            for (int q = tid; q < M / KPV; q += SEL_NT) {
                unsigned k[KPV];
                vec_elem_keys(a4[q], k);
#if SMEM_KEYS
                reinterpret_cast<uint4*>(keys)[q] = keys_vec(k);
#endif
#pragma unroll
                for (int i = 0; i < KPV; ++i) {
#if KEY16
                    atomicAdd(&hist[k[i] >> shift0], 1u);
#else
                    kmn = min(kmn, k[i]);
                    kmx = max(kmx, k[i]);
#endif
                }
            }
        } else {
            for (int i = tid; i < M; i += SEL_NT) {
                const unsigned k = elem_key(a[i]);
#if SMEM_KEYS
                keys[i] = (skey_t)k;
#endif
#if KEY16
                atomicAdd(&hist[k >> shift0], 1u);
#else
                kmn = min(kmn, k);
                kmx = max(kmx, k);
#endif
            }
        }
#if !KEY16
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            kmn = min(kmn, __shfl_xor_sync(FULL, kmn, o));
            kmx = max(kmx, __shfl_xor_sync(FULL, kmx, o));
        }
        if (lane == 0) {
            s_lo[warp] = kmn;
            s_hi[warp] = kmx;
        }
        __syncthreads();
        lo = 0xffffffffu;
        hi = 0u;
        for (int w = 0; w < SEL_WARPS; ++w) {
            lo = min(lo, s_lo[w]);
            hi = max(hi, s_hi[w]);
        }
#else
        (void)kmn;
        (void)kmx;
        __syncthreads();
#endif
    }

    // ---- narrow [lo, hi] to the keys that decide the K-th largest ----------------
    // Invariant: every key > hi wins, no key < lo wins, and `need` of the keys in
    // [lo, hi] win (the first ones in unit order when they are equal).
    unsigned need = (unsigned)K;
    unsigned in_range = (unsigned)M;  // keys in [lo, hi]
    while (lo != hi) {
#if BAND
        if (key_value(hi) - key_value(lo) <= band) break;  // narrow enough for the band's check
#endif
        const int shift = bin_shift(hi - lo);
        if (!ready) {
            for (int b = tid; b < SEL_BINS; b += SEL_NT) hist[b] = 0u;
            __syncthreads();
            const unsigned l = lo, h = hi;
            for_each_key(keys, a, M, vec, [&](int, unsigned k) {
                if (k >= l && k <= h) atomicAdd(&hist[(k - l) >> shift], 1u);
            });
            __syncthreads();
        }
        ready = false;
        in_range = narrow(hist, need, lo, hi, shift, false, s_warp, &s_bin, &s_above);
        if (in_range == need) break;  // all keys of the bin win: no ties to rank
    }

#if KEY16
    // float16 activations of integer-valued rows (exact integer sums rounded once): the
    // winners are exact when the K-th largest T satisfies |T| <= 2047, where float16
    // still holds every integer and its neighbours, because rounding is monotone and
    // keeps T, so every sum keeps its side of T. T lies in [lo, hi]; a row outside the
    // keys of [-2047, 2047] is flagged and hashed again from float32 activations.
    if (inexact != nullptr && tid == 0 && (lo < KEY16_EXACT_LO || hi > KEY16_EXACT_HI)) inexact[row] = 1u;
#endif

#if BAND
    // ---- approximate activations (float input, split-float16 product) ------------
    // |approximate - exact| <= band / 2 for every unit (the host's bound), and the K-th
    // largest approximate value lies in [value(lo), value(hi)]: so a unit above
    // value(hi) + band wins and one below value(lo) - band loses, exactly. The units in
    // between (candidates) get their exact activation (the CPU's float32 sum, in
    // connection order) and are ranked exactly, ties to the lower unit. A row with
    // more than BAND_CAP candidates is flagged for the fused kernel.
    __shared__ int s_cand[BAND_CAP];
    __shared__ unsigned s_ckey[BAND_CAP];
    __shared__ unsigned s_n, s_sure;
    const unsigned khi = ord_key(key_value(hi) + band);
    const unsigned klo = ord_key(key_value(lo) - band);
    if (tid == 0) {
        s_n = 0u;
        s_sure = 0u;
    }
    __syncthreads();
    unsigned sure = 0u;
    for_each_key(keys, a, M, vec, [&](int u, unsigned k) {
        if (k > khi) {
            ++sure;
        } else if (k >= klo) {
            const unsigned p = atomicAdd(&s_n, 1u);
            if (p < BAND_CAP) s_cand[p] = u;
        }
    });
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sure += __shfl_xor_sync(FULL, sure, o);
    if (lane == 0) atomicAdd(&s_sure, sure);
    for (int b = tid; b < MW; b += SEL_NT) hist[b] = 0u;  // now the winners' bit mask (MW <= SEL_BINS)
    __syncthreads();
    const unsigned nc = s_n, nsure = s_sure;
    if (nc > BAND_CAP || nsure > (unsigned)K || nsure + nc < (unsigned)K) {
        if (tid == 0) inexact[row] = 1u;
        return;  // (uniform) the host hashes the row again with the fused kernel
    }
    const float* __restrict__ xrow = X + row * ldx;
    for (int i = tid; i < (int)nc; i += SEL_NT) s_ckey[i] = ord_key(unit_activation<1, true>(idx, s_cand[i], xrow));
    __syncthreads();
    for (int i = tid; i < (int)nc; i += SEL_NT) {
        const unsigned ki = s_ckey[i];
        const int ui = s_cand[i];
        unsigned rank = 0u;
        for (int j = 0; j < (int)nc; ++j) {
            const unsigned kj = s_ckey[j];
            rank += (kj > ki || (kj == ki && s_cand[j] < ui)) ? 1u : 0u;
        }
        if (rank < (unsigned)K - nsure) atomicOr(&hist[ui >> 5], 1u << (ui & 31));
    }
    __syncthreads();
#else
    // ---- ties: the `need` lowest units whose key is lo (== hi) win ----------------
    // Found like the key: a histogram of those units' indices, lowest first, until the
    // bin holding the need-th lowest holds exactly the rest. Tied units up to `last` win.
    unsigned last = 0xffffffffu;
    if (in_range != need) {
        unsigned ilo = 0u, ihi = (unsigned)M - 1u, left = need;
        const unsigned tie = lo;
        for (;;) {
            const int shift = bin_shift(ihi - ilo);
            for (int b = tid; b < SEL_BINS; b += SEL_NT) hist[b] = 0u;
            __syncthreads();
            const unsigned l = ilo, h = ihi;
            for_each_key(keys, a, M, vec, [&](int u, unsigned k) {
                if (k == tie && (unsigned)u >= l && (unsigned)u <= h)
                    atomicAdd(&hist[SEL_BINS - 1 - (((unsigned)u - l) >> shift)], 1u);
            });
            __syncthreads();
            const unsigned count = narrow(hist, left, ilo, ihi, shift, true, s_warp, &s_bin, &s_above);
            if (count == left) {  // (a bin of one unit always ends it)
                last = ihi;
                break;
            }
        }
    }

#endif

    // ---- emit: one output byte (8 units, np.packbits order) per thread and step ----
    unsigned char* o = reinterpret_cast<unsigned char*>(out + row * ldo);
    for (int b = tid; b < 4 * MW; b += SEL_NT) {
        unsigned k[8];
        byte_keys(keys, a, M, vec, b, k);
        unsigned byte = 0u;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const unsigned u = 8u * (unsigned)b + (unsigned)j;
#if BAND
            const bool take = u < (unsigned)M && (k[j] > khi || ((hist[u >> 5] >> (u & 31)) & 1u));
#else
            const bool take = u < (unsigned)M && (k[j] > hi || (k[j] >= lo && u <= last));
#endif
            byte |= (unsigned)take << (7 - j);
        }
        o[b] = (unsigned char)byte;
    }
}
