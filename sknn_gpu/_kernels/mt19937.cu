// NumPy's legacy RandomState stream (MT19937) continued on the GPU (sknn_gpu/_mt19937.py).
// NumPy keeps that stream frozen (NEP 19), so the same outputs from the same state are the
// same draws: the FlyHash projection's and the MLP's initial weights.
//
// mt_raw: `count` tempered outputs from the state (key0, pos0), as NumPy's
// mt19937_next32 gives them; gens[g] receives the key of generation g (gens[0] = key0,
// then one per twist) so that the host can set the state where the draws stopped. The
// twist is NumPy's in-place loop in three dependent phases: key[i] reads key[i + 1]
// (old) and key[i + 397] (old for i < 227, else the new key[i - 227]); key[623] reads
// the new key[0]. One block of 1,024 threads.
//
// legacy_uniform: RandomState.uniform(low, high) from those outputs: low + range * d,
// rounded after the product and after the sum as NumPy's C code does (no fused
// multiply-add), with d = ((w0 >> 5) * 2^26 + (w1 >> 6)) / 2^53 from two consecutive
// outputs; then cast to T as NumPy's astype does.
#define MT_N 624
#define MT_M 397

__device__ __forceinline__ unsigned mt_mix(unsigned cur, unsigned next, unsigned far)
{
    const unsigned y = (cur & 0x80000000u) | (next & 0x7fffffffu);
    return far ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
}

__device__ __forceinline__ unsigned mt_temper(unsigned y)
{
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

extern "C" __global__ void __launch_bounds__(1024) mt_raw(const unsigned* __restrict__ key0, const int pos0,
                                                          const long long count, unsigned* __restrict__ out,
                                                          unsigned* __restrict__ gens)
{
    __shared__ unsigned ka[MT_N], kb[MT_N];
    const int tid = threadIdx.x;
    if (tid < MT_N) {
        ka[tid] = key0[tid];
        gens[tid] = key0[tid];
    }
    __syncthreads();
    unsigned* cur = ka;
    unsigned* nxt = kb;
    long long done = 0, g = 0;
    int pos = pos0;
    while (done < count) {  // uniform
        if (pos == MT_N) {
            if (tid < MT_N - MT_M) nxt[tid] = mt_mix(cur[tid], cur[tid + 1], cur[tid + MT_M]);
            __syncthreads();
            if (tid >= MT_N - MT_M && tid < 2 * (MT_N - MT_M))
                nxt[tid] = mt_mix(cur[tid], cur[tid + 1], nxt[tid - (MT_N - MT_M)]);
            __syncthreads();
            if (tid >= 2 * (MT_N - MT_M) && tid < MT_N - 1)
                nxt[tid] = mt_mix(cur[tid], cur[tid + 1], nxt[tid - (MT_N - MT_M)]);
            if (tid == MT_N - 1) nxt[tid] = mt_mix(cur[tid], nxt[0], nxt[MT_M - 1]);
            __syncthreads();
            unsigned* t = cur;
            cur = nxt;
            nxt = t;
            pos = 0;
            ++g;
            if (tid < MT_N) gens[g * MT_N + tid] = cur[tid];
        }
        const long long left = count - done;
        const int take = (int)(left < (long long)(MT_N - pos) ? left : (long long)(MT_N - pos));
        if (tid < take) out[done + tid] = mt_temper(cur[pos + tid]);
        done += take;
        pos += take;
    }
}


template <typename T>
__global__ void legacy_uniform(const unsigned* __restrict__ w, const long long n, const double low,
                               const double range, T* __restrict__ out)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const double a = (double)(w[2 * i] >> 5), b = (double)(w[2 * i + 1] >> 6);
        const double d = (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);  // exact
        out[i] = (T)__dadd_rn(low, __dmul_rn(range, d));
    }
}
