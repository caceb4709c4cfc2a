// Thread-block cluster helpers (compute capability 9.0 and newer) of the kernels that run
// as clusters (sparsenet.cu's forward_cluster, mlp.cu's mlp_sgd1_cluster). Include it with
//   #include "cluster.cuh"
// The barrier halves are the .aligned forms: every thread of every block of the cluster
// calls each, at a point its warp reaches converged. On older GPUs the helpers compile to
// nothing (their callers are never launched there).
#pragma once

// this block's rank in its cluster
__device__ __forceinline__ unsigned cluster_ctarank()
{
#if __CUDA_ARCH__ >= 900
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
#else
    return 0u;
#endif
}

// arrive at the cluster barrier: this thread's earlier writes (shared memory of any block
// of the cluster included) are released to the threads that wait
__device__ __forceinline__ void cluster_arrive_release()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}

// wait until every thread of the cluster has arrived, acquiring their writes
__device__ __forceinline__ void cluster_wait_acquire()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// the shared::cluster address of block `rank`'s copy of this block's shared variable *p
__device__ __forceinline__ unsigned cluster_map(const void* p, unsigned rank)
{
#if __CUDA_ARCH__ >= 900
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    return r;
#else
    return 0u;
#endif
}

// block `rank`'s copy of this block's shared value *p
__device__ __forceinline__ float cluster_load(const float* p, unsigned rank)
{
    float v = 0.0f;
#if __CUDA_ARCH__ >= 900
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cluster_map(p, rank)) : "memory");
#endif
    return v;
}

__device__ __forceinline__ double cluster_load(const double* p, unsigned rank)
{
    double v = 0.0;
#if __CUDA_ARCH__ >= 900
    asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(cluster_map(p, rank)) : "memory");
#endif
    return v;
}
