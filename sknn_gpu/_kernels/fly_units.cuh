// FlyHash units: a unit's activation from its connection table, shared by the fused
// kernel (flyhash.cu) and the exact check of the tensor-core selection
// (flyhash_select.cu, BAND). Compile-time defines: S (connections), SP (index row
// stride: S rounded up to a multiple of 8, rows 16-byte aligned), IDX_T (unsigned
// short or int).
#pragma once

#include "ieee.cuh"

#ifndef S
#define S 8
#endif
#ifndef SP
#define SP (((S) + 7) / 8 * 8)
#endif
#ifndef IDX_T
#define IDX_T int
#endif

// Connection indices are read 16 bytes at a time (8 x uint16 or 4 x int; SP is a
// multiple of 8 and every index row is 16-byte aligned); the additions stay in
// ascending connection order, one fadd_ieee each.
#define IDX_PER_VEC (16 / (int)sizeof(IDX_T))

__device__ __forceinline__ int unpack_index(const uint4& w, int t)
{
    const unsigned word = t / (IDX_PER_VEC / 4) == 0 ? w.x
                        : t / (IDX_PER_VEC / 4) == 1 ? w.y
                        : t / (IDX_PER_VEC / 4) == 2 ? w.z
                                                     : w.w;
    if (IDX_PER_VEC == 8) return (t & 1) ? (int)(word >> 16) : (int)(word & 0xffffu);
    return (int)word;
}

// Activation of unit u: the float32 sum of x[j * STRIDE] over its S connections j,
// in ascending connection order, one fadd_ieee each. The one place both kernels
// compute an activation: the fused kernel reads its transposed shared-memory rows
// (STRIDE = ROWSP, plain loads), flyhash_activations a global row (STRIDE = 1,
// read-only cached loads), so the two give the same bits.
template <int STRIDE, bool GLOBAL>
__device__ __forceinline__ float unit_activation(const IDX_T* __restrict__ idx, int u,
                                                 const float* __restrict__ x)
{
    const uint4* p = reinterpret_cast<const uint4*>(idx + (size_t)u * SP);
    float acc = 0.0f;
#pragma unroll
    for (int v = 0; v < (S + IDX_PER_VEC - 1) / IDX_PER_VEC; ++v) {
        const uint4 w = __ldg(p + v);
#pragma unroll
        for (int t = 0; t < IDX_PER_VEC; ++t) {
            if (v * IDX_PER_VEC + t < S) {
                const float* xj = x + unpack_index(w, t) * STRIDE;
                if constexpr (GLOBAL) {
                    acc = fadd_ieee(acc, __ldg(xj));
                } else {
                    acc = fadd_ieee(acc, *xj);
                }
            }
        }
    }
    return acc;
}

