// IEEE float32 arithmetic that keeps subnormals, whatever the compile flags.
//
// CuPy appends -ftz=true to every NVRTC compile (RawModule included; a user
// "--ftz=false" comes first and loses), so plain float32 adds, conversions and
// comparisons in our kernels flush subnormal inputs and results to zero, while
// NumPy on the CPU keeps them. Where a kernel promises the CPU's bits (FlyHash
// activations), it uses these inline-PTX forms: the instructions carry no .ftz
// modifier, so the hardware computes the IEEE result.
#pragma once

__device__ __forceinline__ float fadd_ieee(float a, float b)
{
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float f64_to_f32_ieee(double x)
{
    float r;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(x));
    return r;
}

__device__ __forceinline__ float fmul_ieee(float a, float b)
{
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float fsub_ieee(float a, float b)
{
    float r;
    asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// float32 -> float16 bits (round to nearest even) and back, subnormals kept
__device__ __forceinline__ unsigned short f32_to_f16_ieee(float v)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

__device__ __forceinline__ float f16_to_f32_ieee(unsigned short h)
{
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
}
