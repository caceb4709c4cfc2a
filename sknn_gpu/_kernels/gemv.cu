// Matrix-vector products for sknn_gpu.linalg.gemv, row-major A of shape (m, n).
//
//   y = alpha * A   x + beta * y      (non-transposed, len(y) = m)
//   y = alpha * A^T x + beta * y      (transposed,     len(y) = n)
//
// Variants (chosen on the host by shape, see sknn_gpu/linalg.py):
//   gemv_rows      LANES lanes of a warp per row (LANES = 1..32), optional 16-byte
//                  vector loads; the warp-per-row case is LANES = 32, the
//                  tall-skinny case uses LANES < 32 so short rows do not idle a warp.
//   gemv_rows_multi  R rows per warp sharing each load of x, A streamed (large m x n).
//   gemv_block_row one block per row (the paper's block-per-row shared-memory
//                  reduction), optionally split along the row (split-K).
//   gemv_t_cols    transposed: a 32x8 block owns 32*VW consecutive columns and a
//                  range of rows; coalesced row reads (U rows in flight per thread),
//                  shared-memory reduction over the 8 row lanes, optional split over rows.
//   gemv_t_cluster the same tiles split over rows into the blocks of one thread-block
//                  cluster (compute capability 9.0, compiled with T_CLUSTER defined);
//                  the partial sums meet in distributed shared memory.
//   gemv_t_small   transposed, small matrix (float32, 256..1024 x 256..1024): one block
//                  per narrow column tile sums every row, all loads at once.
//   gemv_t_flat    transposed, few columns (n <= 32): consecutive threads read
//                  consecutive elements of the flat matrix, each thread keeps one column.
// beta == 0 never reads y (BLAS semantics: NaN in y is not propagated).
//
// Split variants stay ONE launch: each block writes its partial sums to a workspace,
// and the last block to finish a group (atomic ticket in `cnt`, reset by that block so
// the counters stay zero between calls) sums the partials in a fixed order, so results
// are deterministic.

template <typename T> struct VecOf;
template <> struct VecOf<float> { typedef float4 type; static const int N = 4; };
template <> struct VecOf<double> { typedef double2 type; static const int N = 2; };

__device__ __forceinline__ float dotv(const float4 a, const float4 b)
{
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
__device__ __forceinline__ double dotv(const double2 a, const double2 b)
{
    return a.x * b.x + a.y * b.y;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v, int width)
{
    for (int off = width / 2; off > 0; off >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, off, width);
    }
    return v;
}

// Partial dot product of a[0:n] and x[0:n] for one lane out of nlanes.
template <typename T, bool VECTOR>
__device__ __forceinline__ T dot_part(const T* __restrict__ a, const T* __restrict__ x,
                                      const long long n, const int lane, const int nlanes)
{
    T acc = (T)0;
    if (VECTOR) {
        typedef typename VecOf<T>::type V;
        const int W = VecOf<T>::N;
        const long long nv = n / W;
        const V* av = reinterpret_cast<const V*>(a);
        const V* xv = reinterpret_cast<const V*>(x);
#pragma unroll 4
        for (long long k = lane; k < nv; k += nlanes) {
            acc += dotv(av[k], __ldg(xv + k));
        }
        for (long long k = nv * W + lane; k < n; k += nlanes) {
            acc += a[k] * __ldg(x + k);
        }
    } else {
        for (long long k = lane; k < n; k += nlanes) {
            acc += a[k] * __ldg(x + k);
        }
    }
    return acc;
}

template <typename T>
__device__ __forceinline__ T finish(const T acc, const T alpha, const T beta, const T* y, const long long i)
{
    return beta == (T)0 ? alpha * acc : alpha * acc + beta * y[i];
}

// ---------------------------------------------------------------- non-transposed
template <typename T, int LANES, bool VECTOR>
__global__ void gemv_rows(const T* __restrict__ A, const T* __restrict__ x, T* __restrict__ y,
                          const long long m, const long long n, const T alpha, const T beta)
{
    const int rows_per_warp = 32 / LANES;
    const int lane = threadIdx.x % LANES;
    const int sub = (threadIdx.x % 32) / LANES;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) / 32;
    // the loop bound is uniform within a warp, so every lane reaches the shuffles
    for (long long base = warp * rows_per_warp; base < m; base += nwarps * rows_per_warp) {
        const long long row = base + sub;
        T acc = (T)0;
        if (row < m) {
            acc = dot_part<T, VECTOR>(A + row * n, x, n, lane, LANES);
        }
        acc = warp_sum(acc, LANES);
        if (lane == 0 && row < m) {
            y[row] = finish(acc, alpha, beta, y, row);
        }
    }
}

// R rows per warp (large matrices): each lane loads a vector of x once and uses it
// for R rows, so x is read from cache R times less often than by gemv_rows, where
// every warp's x reads doubled the L2 traffic; A is streamed with evict-first loads
// (__ldcs) so it does not push x out of the caches. Rows must be 16-byte aligned (the
// VECTOR case of gemv_rows). Each row's sum is formed in the same order as gemv_rows
// <T, 32, true>: the same bits.
template <typename T, int R>
__global__ void gemv_rows_multi(const T* __restrict__ A, const T* __restrict__ x, T* __restrict__ y,
                                const long long m, const long long n, const T alpha, const T beta)
{
    typedef typename VecOf<T>::type V;
    const int W = VecOf<T>::N;
    const int lane = threadIdx.x % 32;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) / 32;
    const long long nv = n / W;
    const V* xv = reinterpret_cast<const V*>(x);
    for (long long base = warp * R; base < m; base += nwarps * R) {
        T acc[R];
        const V* av[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            acc[r] = (T)0;
            // rows past m read row m-1 again (in bounds); their sums are never stored
            const long long row = base + r < m ? base + r : m - 1;
            av[r] = reinterpret_cast<const V*>(A + row * n);
        }
#pragma unroll 2
        for (long long k = lane; k < nv; k += 32) {
            const V xk = __ldg(xv + k);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] += dotv(__ldcs(av[r] + k), xk);
        }
        for (long long k = nv * W + lane; k < n; k += 32) {
            const T xk = __ldg(x + k);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] += reinterpret_cast<const T*>(av[r])[k] * xk;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const T v = warp_sum(acc[r], 32);
            if (lane == 0 && base + r < m) y[base + r] = finish(v, alpha, beta, y, base + r);
        }
    }
}

template <typename T, bool VECTOR>
__global__ void gemv_block_row(const T* __restrict__ A, const T* __restrict__ x, T* __restrict__ y,
                               T* __restrict__ ws, unsigned int* __restrict__ cnt, const long long m,
                               const long long n, const T alpha, const T beta, const long long chunk)
{
    __shared__ T partial[32];
    __shared__ bool last;
    const long long row = blockIdx.x;
    const long long c0 = (long long)blockIdx.y * chunk;
    long long len = n - c0;
    if (len > chunk) len = chunk;
    T acc = (T)0;
    if (len > 0) {
        acc = dot_part<T, VECTOR>(A + row * n + c0, x + c0, len, threadIdx.x, blockDim.x);
    }
    acc = warp_sum(acc, 32);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x / 32;
        acc = lane < nw ? partial[lane] : (T)0;
        acc = warp_sum(acc, 32);
        if (lane == 0) {
            if (gridDim.y == 1) {
                y[row] = finish(acc, alpha, beta, y, row);
            } else {
                ws[(long long)blockIdx.y * m + row] = acc;
                __threadfence();
                const unsigned int ticket = atomicAdd(cnt + row, 1u);
                last = (ticket == gridDim.y - 1);
            }
        }
    }
    if (gridDim.y == 1) return;
    __syncthreads();
    if (last && warp == 0) {
        T s = (T)0;
        for (int k = lane; k < (int)gridDim.y; k += 32) s += __ldcg(ws + (long long)k * m + row);
        s = warp_sum(s, 32);
        if (lane == 0) {
            y[row] = finish(s, alpha, beta, y, row);
            cnt[row] = 0u;
        }
    }
}

// ---------------------------------------------------------------- transposed
// gemv_t_cols, row ty == 0 of a block: sum the RL row lanes of sm for the thread's VW
// columns and store them, finished, into y or (to_ws) raw into ws[split * n + c], the
// split's row of the workspace.
template <typename T, int VW, int RL, int C>
__device__ __forceinline__ void t_cols_store(const T (&sm)[RL][C], const int tx, const long long col, const long long n,
                                             T* y, T* ws, const bool to_ws, const long long split, const T alpha,
                                             const T beta)
{
    for (int v = 0; v < VW; ++v) {
        const long long c = col + v;
        if (c < n) {
            T s = (T)0;
#pragma unroll
            for (int k = 0; k < RL; ++k) s += sm[k][tx * VW + v];
            if (!to_ws) {
                y[c] = finish(s, alpha, beta, y, c);
            } else {
                ws[split * n + c] = s;
            }
        }
    }
}

// A load of the streamed matrix (read once per call, read-only during the kernel): no L1
// allocation, 256-byte L2 fetches (a warp reads 512 contiguous bytes of a row). H100,
// 4096^2 float32 A.T @ x in clusters of 8, queued: 25.6 us against 26.2 us with a plain
// load (__ldcs measured the same as the hint); gemv_t_cluster only: the unsplit
// gemv_t_cols of short, wide matrices (128 x 8192, 256 x 16384) lost 0.2-0.3 us with it.
__device__ __forceinline__ float4 ld_stream(const float4* p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p));
    return v;
#else
    return __ldg(p);
#endif
}
__device__ __forceinline__ double2 ld_stream(const double2* p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    double2 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.f64 {%0, %1}, [%2];" : "=d"(v.x), "=d"(v.y) : "l"(p));
    return v;
#else
    return __ldg(p);
#endif
}

// gemv_t_cols / gemv_t_cluster, one thread: acc[v] = sum of A[i, col + v] * x[i] over its
// row lane's rows i = i0, i0 + RL, ... < r1, in row order (VW = VecOf<T>::N columns on the
// vector path, one otherwise; acc is zeroed here). The vector path loads U rows at once
// (with ld_stream when STREAM).
template <typename T, bool VECTOR, int U, int RL, bool STREAM>
__device__ __forceinline__ void t_cols_lane_sum(const T* __restrict__ A, const T* __restrict__ x, const long long n,
                                                const long long col, const long long i_first, const long long r1,
                                                T (&acc)[VecOf<T>::N])
{
#pragma unroll
    for (int v = 0; v < VecOf<T>::N; ++v) acc[v] = (T)0;
    if (col >= n) return;
    if (VECTOR) {
        typedef typename VecOf<T>::type V;
        // U rows of loads in flight per thread, then the sums in row order
        for (long long i0 = i_first; i0 < r1; i0 += (long long)RL * U) {
            V a[U];
            T xi[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long i = i0 + (long long)u * RL;
                if (i < r1) {
                    xi[u] = __ldg(x + i);
                    const V* p = reinterpret_cast<const V*>(A + i * n + col);
                    a[u] = STREAM ? ld_stream(p) : *p;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (i0 + (long long)u * RL < r1) {
                    const T* ap = reinterpret_cast<const T*>(&a[u]);
#pragma unroll
                    for (int v = 0; v < VecOf<T>::N; ++v) acc[v] += ap[v] * xi[u];
                }
            }
        }
    } else {
#pragma unroll 4
        for (long long i = i_first; i < r1; i += RL) {
            acc[0] += A[i * n + col] * __ldg(x + i);
        }
    }
}

// block (32, 8); blockIdx.x: group of 32*VW columns; blockIdx.y: range of rows; the vector
// path loads U rows per thread at once (16 or 32: the host picks by rows per thread).
template <typename T, bool VECTOR, int U>
__global__ void __launch_bounds__(256) gemv_t_cols(const T* __restrict__ A, const T* __restrict__ x, T* __restrict__ y,
                            T* __restrict__ ws, unsigned int* __restrict__ cnt, const long long m,
                            const long long n, const T alpha, const T beta, const long long rows_per_split)
{
    const int VW = VECTOR ? VecOf<T>::N : 1;
    constexpr int RL = 8;  // row lanes (blockDim.y)
    __shared__ T sm[RL][32 * VecOf<T>::N + 1];
    __shared__ bool last;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long col = ((long long)blockIdx.x * 32 + tx) * VW;
    const long long r0 = (long long)blockIdx.y * rows_per_split;
    long long r1 = r0 + rows_per_split;
    if (r1 > m) r1 = m;
    T acc[VecOf<T>::N];
    t_cols_lane_sum<T, VECTOR, U, RL, false>(A, x, n, col, r0 + ty, r1, acc);
#pragma unroll
    for (int v = 0; v < VW; ++v) sm[ty][tx * VW + v] = acc[v];
    __syncthreads();
    if (ty == 0) {  // unsplit: the result; split: this split's partial sums
        t_cols_store<T, VW, RL>(sm, tx, col, n, y, ws, gridDim.y != 1, (long long)blockIdx.y, alpha, beta);
    }
    if (gridDim.y == 1) return;
    __threadfence();
    __syncthreads();
    if (tx == 0 && ty == 0) {
        const unsigned int ticket = atomicAdd(cnt + blockIdx.x, 1u);
        last = (ticket == gridDim.y - 1);
    }
    __syncthreads();
    if (!last) return;
    // the last block of this column group: sum the partials over the splits in a fixed order
    T part[VecOf<T>::N];
#pragma unroll
    for (int v = 0; v < VecOf<T>::N; ++v) part[v] = (T)0;
    for (int s = ty; s < (int)gridDim.y; s += RL) {
        for (int v = 0; v < VW; ++v) {
            const long long c = col + v;
            if (c < n) part[v] += __ldcg(ws + (long long)s * n + c);
        }
    }
    __syncthreads();
#pragma unroll
    for (int v = 0; v < VW; ++v) sm[ty][tx * VW + v] = part[v];
    __syncthreads();
    if (ty == 0) {
        t_cols_store<T, VW, RL>(sm, tx, col, n, y, ws, false, 0, alpha, beta);
        if (tx == 0) cnt[blockIdx.x] = 0u;
    }
}

#ifdef T_CLUSTER
// gemv_t_cluster: gemv_t_cols split over rows into the T_CLUSTER blocks of one thread-block
// cluster (compute capability 9.0; grid (column tiles, T_CLUSTER)), whose partial sums
// meet in distributed shared memory instead of a global workspace: no atomic ticket, no
// fence, no second pass over global memory. Block `rank` sums rows
// [rank * R, (rank + 1) * R), R = ceil(m / T_CLUSTER), and stores each column's partial
// into the inbox of the block that finishes that column (block j / PER finishes the
// tile's column j, PER = 32 * VW / T_CLUSTER), slot [rank]; after a cluster barrier
// every block adds its inbox in rank order (deterministic). Nothing is read remotely,
// so a block may exit as soon as it has passed that barrier. (A first, split barrier
// makes sure every block has started before any store into its shared memory.)
template <typename T, bool VECTOR, int U>
__global__ void __cluster_dims__(1, T_CLUSTER, 1) __launch_bounds__(256)
    gemv_t_cluster(const T* __restrict__ A, const T* __restrict__ x, T* __restrict__ y, const long long m,
                   const long long n, const T alpha, const T beta)
{
    const int VW = VECTOR ? VecOf<T>::N : 1;
    constexpr int RL = 8;  // row lanes (blockDim.y)
    const int PER = 32 * VW / T_CLUSTER;  // columns a block finishes
    __shared__ T sm[RL][32 * VecOf<T>::N + 1];
    __shared__ T inbox[32 * VecOf<T>::N];  // [rank][column - this block's first], PER per rank
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long col0 = (long long)blockIdx.x * 32 * VW;
    const long long col = col0 + (long long)tx * VW;
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    // every block of the cluster must have started before another stores into its shared
    // memory: arrive now, wait just before the stores (the row sums hide the wait)
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    const long long R = (m + T_CLUSTER - 1) / T_CLUSTER;
    const long long r0 = (long long)rank * R;
    const long long r1 = r0 + R < m ? r0 + R : m;
    T acc[VecOf<T>::N];
    t_cols_lane_sum<T, VECTOR, U, RL, true>(A, x, n, col, r0 + ty, r1, acc);
#pragma unroll
    for (int v = 0; v < VW; ++v) sm[ty][tx * VW + v] = acc[v];
    __syncthreads();
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    if (ty == 0) {
        for (int v = 0; v < VW; ++v) {
            const int j = tx * VW + v;
            T s = (T)0;
#pragma unroll
            for (int k = 0; k < RL; ++k) s += sm[k][j];
            const unsigned local = (unsigned)__cvta_generic_to_shared(inbox + rank * PER + j % PER);
            unsigned remote;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(j / PER));
            if (sizeof(T) == 4) {
                asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"((float)s) : "memory");
            } else {
                asm volatile("st.shared::cluster.f64 [%0], %1;" ::"r"(remote), "d"((double)s) : "memory");
            }
        }
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    const int t = ty * 32 + tx;
    const long long c = col0 + (long long)rank * PER + t;
    if (t < PER && c < n) {
        T s = (T)0;
#pragma unroll
        for (int q = 0; q < T_CLUSTER; ++q) s += inbox[q * PER + t];
        y[c] = finish(s, alpha, beta, y, c);
    }
}
#endif

// gemv_t_small: A.T @ x of a small matrix (linalg._t_small_config), one block per tile of
// TC columns summing every row: RL row lanes, each loading all of its rows at once (UR >=
// ceil(m / RL) loads in flight, guarded), then a tree sum over the lanes in shared memory.
// No split, no workspace, no cluster barrier: at these sizes a call is one round trip to
// memory and the launch (H100, queued: 512^2 3.0 us against 3.3 us for clusters of
// 32-column tiles, 256^2 2.6 against 3.4 us; docs/performance.md). Deterministic.
template <typename T, int TC, int RL, int UR>
__global__ void __launch_bounds__(TC * RL)
    gemv_t_small(const T* __restrict__ A, const T* __restrict__ x, T* __restrict__ y, const long long m,
                 const long long n, const T alpha, const T beta)
{
    __shared__ T sm[RL][TC + 1];
    const int tx = threadIdx.x % TC, ty = threadIdx.x / TC;
    const long long col = (long long)blockIdx.x * TC + tx;
    T acc = (T)0;
    if (col < n) {
        T a[UR], xi[UR];
#pragma unroll
        for (int u = 0; u < UR; ++u) {
            const long long i = ty + (long long)u * RL;
            a[u] = i < m ? __ldg(A + i * n + col) : (T)0;
            xi[u] = i < m ? __ldg(x + i) : (T)0;
        }
#pragma unroll
        for (int u = 0; u < UR; ++u) acc += a[u] * xi[u];
    }
    sm[ty][tx] = acc;
    __syncthreads();
#pragma unroll
    for (int s = RL / 2; s > 0; s >>= 1) {
        if (ty < s) sm[ty][tx] += sm[ty + s][tx];
        __syncthreads();
    }
    if (ty == 0 && col < n) y[col] = finish(sm[0][tx], alpha, beta, y, col);
}

// n <= 32 columns; blockDim.x == 256; blockIdx.x: range of rows.
template <typename T>
__global__ void gemv_t_flat(const T* __restrict__ A, const T* __restrict__ x, T* __restrict__ y,
                            T* __restrict__ ws, unsigned int* __restrict__ cnt, const long long m,
                            const int n, const T alpha, const T beta, const long long rows_per_split)
{
    __shared__ T sm[256];
    __shared__ bool last;
    const int t = threadIdx.x;
    const int R = blockDim.x / n;  // rows per pass
    const long long r0 = (long long)blockIdx.x * rows_per_split;
    long long r1 = r0 + rows_per_split;
    if (r1 > m) r1 = m;
    T acc = (T)0;
    if (t < R * n) {
        const int col = t % n;
#pragma unroll 4
        for (long long i = r0 + t / n; i < r1; i += R) acc += A[i * n + col] * __ldg(x + i);
    }
    sm[t] = acc;
    __syncthreads();
    if (t < n) {
        T s = (T)0;
        for (int r = 0; r < R; ++r) s += sm[r * n + t];
        if (gridDim.x == 1) {
            y[t] = finish(s, alpha, beta, y, (long long)t);
        } else {
            ws[(long long)blockIdx.x * n + t] = s;
        }
    }
    if (gridDim.x == 1) return;
    __threadfence();
    __syncthreads();
    if (t == 0) {
        const unsigned int ticket = atomicAdd(cnt, 1u);
        last = (ticket == gridDim.x - 1);
    }
    __syncthreads();
    if (!last) return;
    T p = (T)0;
    if (t < R * n) {
        for (int s = t / n; s < (int)gridDim.x; s += R) p += __ldcg(ws + (long long)s * n + t % n);
    }
    sm[t] = p;
    __syncthreads();
    if (t < n) {
        T s = (T)0;
        for (int r = 0; r < R; ++r) s += sm[r * n + t];
        y[t] = finish(s, alpha, beta, y, (long long)t);
        if (t == 0) cnt[0] = 0u;
    }
}
