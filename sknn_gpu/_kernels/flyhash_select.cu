// FlyHash on tensor cores: the input and the dense 0/1 projection go through a
// cuBLAS half-precision product with float32 accumulation (sknn_gpu/fly/_flyhash_cuda.py),
// and these kernels do the rest.
//
//   fly_integer_check  flags a block of float32 input unless every entry is a whole
//                      number of magnitude <= 2048 (exact in float16; a sum of S < 8192
//                      of them is exact in the float32 accumulator, in any order, so
//                      the product gives the CPU's activations bit for bit).
//   fly_to_half        float32 rows -> float16 bits, padded to DP columns; optionally
//                      each row scaled by a power of two that puts its largest
//                      magnitude in [2^14, 2^15) (precision='fast': no float16
//                      overflow, and winners do not change under a positive row scale).
//   fly_dense_projection  the (M, DP) float16 0/1 projection from the connection table.
//   fly_select         exact top-K of each row of float32 activations, ties to the
//                      lower unit index, written as packed bit words (the layout of
//                      flyhash.cu). One block per row; a radix select whose digits
//                      adapt to the row's key range (a histogram of SEL_BINS bins over
//                      [lo, hi], then over the bin that holds the K-th largest, ...:
//                      at most three rounds for 32-bit keys, one or two for the small
//                      integers of integer input), then one counting pass and one
//                      emitting pass that rank the ties in unit order.
//
// Compile-time defines: SEL_NT (threads per block), SMEM_KEYS (1: the row's keys are
// cached in dynamic shared memory, M * 4 bytes; 0: re-read from the activations).

#include "fly.cuh"

#ifndef SEL_NT
#define SEL_NT 512
#endif
#ifndef SMEM_KEYS
#define SMEM_KEYS 1
#endif
#define SEL_BINS 2048
#define SEL_BPT (SEL_BINS / SEL_NT)
#define SEL_WARPS (SEL_NT / 32)
#define FULL 0xffffffffu
#define HALF_ONE 0x3C00u
#define INT_LIMIT_BITS 0x45000000u  // 2048.0f

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

__device__ __forceinline__ unsigned short to_half_bits(float v)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

// One block (256 threads) per row, grid-stride over rows.
extern "C" __global__ void fly_to_half(const float* __restrict__ X, const long long n, const int D,
                                       const long long ldx, const int scale_rows,
                                       unsigned short* __restrict__ out, const int DP)
{
    __shared__ unsigned s_max[8];
    for (long long r = blockIdx.x; r < n; r += gridDim.x) {
        const float* x = X + r * ldx;
        float sc = 1.0f;
        if (scale_rows) {
            unsigned mx = 0u;
            for (int j = threadIdx.x; j < D; j += blockDim.x) mx = max(mx, __float_as_uint(x[j]) & 0x7fffffffu);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = max(mx, __shfl_xor_sync(FULL, mx, o));
            if ((threadIdx.x & 31) == 0) s_max[threadIdx.x >> 5] = mx;
            __syncthreads();
            mx = 0u;
            for (int w = 0; w < (int)(blockDim.x >> 5); ++w) mx = max(mx, s_max[w]);
            __syncthreads();
            const int e = (int)(mx >> 23);  // biased exponent of the row's largest magnitude
            if (e > 0) {
                // 2^(141 - e) puts it in [2^14, 2^15); applied in two steps that stay in range
                const int t = 141 - e;
                const int t1 = t / 2, t2 = t - t1;
                sc = __int_as_float((127 + t1) << 23) * __int_as_float((127 + t2) << 23);
                if (t1 < -126 || t2 < -126 || t1 > 127 || t2 > 127) sc = 1.0f;  // cannot happen for finite rows
            }
        }
        unsigned short* o = out + r * (long long)DP;
        for (int j = threadIdx.x; j < DP; j += blockDim.x) o[j] = j < D ? to_half_bits(x[j] * sc) : (unsigned short)0;
    }
}

extern "C" __global__ void fly_dense_projection(const int* __restrict__ conn, const int M, const int S,
                                                unsigned short* __restrict__ P, const int DP)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)M * S) return;
    const long long u = e / S;
    P[u * DP + conn[e]] = (unsigned short)HALF_ONE;
}

#if SMEM_KEYS
#define KEY(i) keys[i]
#else
#define KEY(i) ord_key(a[i])
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

// f(key) for every key of the row, four at a time (16-byte loads) when the row
// allows it (`vec`: M and lda multiples of 4), else one at a time.
template <class F>
__device__ __forceinline__ void for_each_key(const unsigned* keys, const float* __restrict__ a, int M, bool vec,
                                             F f)
{
#if SMEM_KEYS
    if (vec) {
        const uint4* k4 = reinterpret_cast<const uint4*>(keys);
        for (int q = threadIdx.x; q < (M >> 2); q += SEL_NT) {
            const uint4 v = k4[q];
            f(v.x); f(v.y); f(v.z); f(v.w);
        }
        return;
    }
    for (int i = threadIdx.x; i < M; i += SEL_NT) f(keys[i]);
#else
    if (vec) {
        const float4* a4 = reinterpret_cast<const float4*>(a);
        for (int q = threadIdx.x; q < (M >> 2); q += SEL_NT) {
            const float4 v = a4[q];
            f(ord_key(v.x)); f(ord_key(v.y)); f(ord_key(v.z)); f(ord_key(v.w));
        }
        return;
    }
    for (int i = threadIdx.x; i < M; i += SEL_NT) f(ord_key(a[i]));
#endif
}

// out row r (ldo words apart) <- the K largest of A row r (lda floats apart), r < n.
extern "C" __global__ void __launch_bounds__(SEL_NT)
fly_select(const float* __restrict__ A, const long long lda, const int M, const int MW, const int K,
           unsigned* __restrict__ out, const long long ldo)
{
#if SMEM_KEYS
    extern __shared__ __align__(16) unsigned keys[];
#else
    const unsigned* keys = nullptr;
#endif
    __shared__ unsigned hist[SEL_BINS];
    __shared__ unsigned s_warp[SEL_WARPS];
    __shared__ unsigned s_lo[SEL_WARPS], s_hi[SEL_WARPS];
    __shared__ int s_bin;
    __shared__ unsigned s_above;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long row = blockIdx.x;
    const float* __restrict__ a = A + row * lda;
    const bool vec = ((M & 3) == 0) && ((lda & 3) == 0);

    // ---- keys and their range -------------------------------------------------
    unsigned kmn = 0xffffffffu, kmx = 0u;
    if (vec) {
        const float4* a4 = reinterpret_cast<const float4*>(a);
        for (int q = tid; q < (M >> 2); q += SEL_NT) {
            const float4 v = a4[q];
            const uint4 k = make_uint4(ord_key(v.x), ord_key(v.y), ord_key(v.z), ord_key(v.w));
#if SMEM_KEYS
            reinterpret_cast<uint4*>(keys)[q] = k;
#endif
            kmn = min(min(kmn, min(k.x, k.y)), min(k.z, k.w));
            kmx = max(max(kmx, max(k.x, k.y)), max(k.z, k.w));
        }
    } else {
        for (int i = tid; i < M; i += SEL_NT) {
            const unsigned k = ord_key(a[i]);
#if SMEM_KEYS
            keys[i] = k;
#endif
            kmn = min(kmn, k);
            kmx = max(kmx, k);
        }
    }
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
    unsigned lo = 0xffffffffu, hi = 0u;
    for (int w = 0; w < SEL_WARPS; ++w) {
        lo = min(lo, s_lo[w]);
        hi = max(hi, s_hi[w]);
    }

    // ---- narrow [lo, hi] to the keys that decide the K-th largest ----------------
    // Invariant: every key > hi wins, no key < lo wins, and `need` of the keys in
    // [lo, hi] win (the first ones in unit order when they are equal).
    unsigned need = (unsigned)K;
    unsigned in_range = (unsigned)M;  // keys in [lo, hi]
    while (lo != hi) {
        const int bits = 32 - __clz(hi - lo);
        const int shift = bits > 11 ? bits - 11 : 0;
        for (int b = tid; b < SEL_BINS; b += SEL_NT) hist[b] = 0u;
        __syncthreads();
        for_each_key(keys, a, M, vec, [&](unsigned k) {
            if (k >= lo && k <= hi) atomicAdd(&hist[(k - lo) >> shift], 1u);
        });
        __syncthreads();
        find_bin(hist, need, s_warp, &s_bin, &s_above);
        const int b = s_bin;
        const unsigned count = hist[b];
        in_range = count;
        need -= s_above;
        const unsigned nlo = lo + ((unsigned)b << shift);
        const unsigned width = (1u << shift) - 1u;
        hi = (hi - nlo) <= width ? hi : nlo + width;
        lo = nlo;
        __syncthreads();  // hist and s_bin are rewritten by the next round
        if (count == need) break;  // all keys of the bin win: no ties to rank
    }

    // ---- emit: warps own consecutive words, ties ranked in unit order -------------
    // (when every key in [lo, hi] wins there is nothing to rank: no counting pass)
    const int per = (MW + SEL_WARPS - 1) / SEL_WARPS;
    const int w0 = warp * per;
    const int w1 = min(MW, w0 + per);
    unsigned base = 0u;  // tied keys in the words of the warps before this one
    if (in_range != need) {
        unsigned mine = 0u;
        for (int w = w0; w < w1; ++w) {
            const int u = w * 32 + lane;
            const unsigned k = u < M ? KEY(u) : 0u;
            mine += __popc(__ballot_sync(FULL, u < M && k >= lo && k <= hi));
        }
        if (lane == 0) s_warp[warp] = mine;
        __syncthreads();
        for (int w = 0; w < warp; ++w) base += s_warp[w];
    }
    const unsigned lt_mask = (1u << lane) - 1u;
    unsigned* o = out + row * ldo;
    for (int w = w0; w < w1; ++w) {
        const int u = w * 32 + lane;
        const unsigned k = u < M ? KEY(u) : 0u;
        const bool tied = u < M && k >= lo && k <= hi;
        const unsigned tmask = __ballot_sync(FULL, tied);
        const bool take = (u < M && k > hi) || (tied && base + __popc(tmask & lt_mask) < need);
        const unsigned word = __ballot_sync(FULL, take);
        base += __popc(tmask);
        if (lane == 0) o[w] = ballot_to_units(word);
    }
}
