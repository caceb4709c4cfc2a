// Conversions that must give NumPy's bits (see ieee.cuh: CuPy's own astype runs
// under -ftz=true and flushes float32 subnormals to zero).
#include "ieee.cuh"

// y[i] = (float)x[i], rounded to nearest even, subnormals kept (NumPy's astype).
extern "C" __global__ void f64_to_f32(const double* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = f64_to_f32_ieee(x[i]);
}
