// FlyHash helpers shared by flyhash.cu (fused kernel) and flyhash_select.cu
// (selection from materialised activations): the order key and the bit layout.
#pragma once

// uint32 key of a float32 that orders as the values do; -0.0 and +0.0 are equal.
__device__ __forceinline__ unsigned ord_key(float v)
{
    unsigned b = __float_as_uint(v);
    if ((b << 1) == 0u) b = 0u;  // -0.0 -> +0.0
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// the float32 whose ord_key is k
__device__ __forceinline__ float key_value(unsigned k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// bit of unit u inside its little-endian uint32 word (np.packbits byte order)
__device__ __forceinline__ unsigned unit_bit(int u)
{
    const int i = u & 31;
    return 1u << (((i >> 3) << 3) + (7 - (i & 7)));
}

// A warp ballot (bit i = lane i = unit 32 w + i) in that layout: each byte's bits
// reversed, i.e. bit i moves to unit_bit(i).
__device__ __forceinline__ unsigned ballot_to_units(unsigned ballot)
{
    return __byte_perm(__brev(ballot), 0u, 0x0123u);
}
