// DT-CNN halftoning kernels. Integer arithmetic throughout, so the
// GPU reproduces the NumPy reference bit for bit. Fixed-point conventions are
// documented in sknn_gpu/halftone/_templates.py:
//   Z  (int16)  cell outputs, level k held as 512 * (2k - (LEVELS - 1))
//   b  (int32)  B*u + T, computed once per image with a reflect-padded input
//   A  (int32)  feedback template, zero outside the image
// Compile-time defines (load_module(..., RAD=, LEVELS=, PER=, TX=, TY=)):
//   RAD     template radius r
//   PER     spacing of the colour classes of the sweeps (after a wide first sweep):
//           r + 1 by default (the fewest classes), up to 2 r + 1 (the paper's 3 x 3
//           sub-images of a 3 x 3 template: 9 classes)
//   LEVELS  number of output levels m
//   TX, TY  colour-class cells per block in x and y (TX a multiple of 32)
//   TILES   1: compile the tile kernels (async_class_pass, async_fused); 0 where even one
//           tile row of TX cells and its halo would not fit in shared memory
#ifndef RAD
#define RAD 1
#endif
#ifndef LEVELS
#define LEVELS 2
#endif
#ifndef TX
#define TX 32
#endif
#ifndef TY
#define TY 4
#endif
#ifndef TILES
#define TILES 1
#endif
#ifndef PER
#define PER (RAD + 1)
#endif
#define KW (2 * RAD + 1)
#define SH_W ((TX - 1) * PER + KW)
#define SH_H ((TY - 1) * PER + KW)
#define NTHREADS (TX * TY)
#define LOAD_BATCH 16
#define NWARPS ((NTHREADS + 31) / 32)

#include "grid_barrier.cuh"  // the persistent kernels' grid barrier (bounded wait)

typedef long long i64;
typedef unsigned long long u64;

// Symmetric extension (scipy 'reflect' / numpy 'symmetric'), period 2n.
__device__ __forceinline__ int reflect_index(int i, int n)
{
    const int period = 2 * n;
    i %= period;
    if (i < 0) i += period;
    return (i < n) ? i : period - 1 - i;
}

// The level nearest to x / gain; on an exact tie keep the current level, else the lower one.
// Level k is better than k-1 iff 2048*gain*k < R with R = 2x + 1024*gain*LEVELS.
__device__ __forceinline__ int decide(i64 x, int zcur, i64 gain)
{
#if LEVELS == 2
    // Same result as the general rule below for gain > 0 (gain_int >= 1 is enforced):
    // R = 2x + c with c = 2048 gain, so k = 1 iff R > c (x > 0), or R == c (x == 0,
    // a tie) while the cell already holds the upper level. No 64-bit division.
    (void)gain;
    return (x > 0 || (x == 0 && zcur == 512)) ? 512 : -512;
#else
    const i64 c = 2048 * gain;
    const i64 R = 2 * x + 1024 * gain * (i64)LEVELS;
    int k = 0;
    if (R > 0) {
        const i64 q = (R - 1) / c;
        k = (q > (i64)(LEVELS - 1)) ? (LEVELS - 1) : (int)q;
        if (R % c == 0) {
            const i64 up = R / c;
            if (up <= (i64)(LEVELS - 1) && zcur == 512 * (2 * (int)up - (LEVELS - 1))) k = (int)up;
        }
    }
    return 512 * (2 * k - (LEVELS - 1));
#endif
}

// out[n, i, j] = offset + sum_{dy,dx} T[dy, dx] * V[n, i + dy - r, j + dx - r]
// with V reflect-extended (reflect != 0) or zero outside the image. A block of
// (CONV_TX, CONV_TY) threads makes CONV_TY rows of CONV_OW outputs, CONV_CX consecutive
// ones per thread; its input window with the halo is staged in shared memory once. Per
// template row a thread reads its CONV_CX + 2 RAD inputs as 16-byte loads into registers
// and the row's taps once, for all its outputs (a thread per output read both for every
// tap: ~4x the shared-memory loads). int32 sums: the result does not depend on the
// staging or the order.
#define CONV_TX 32
#define CONV_TY 8
#define CONV_CX 4
#define CONV_OW (CONV_TX * CONV_CX)
#define CONV_VN ((CONV_CX + 2 * RAD + 3) / 4 * 4)  // inputs a thread reads per row (int4 loads)
#define CONV_SW ((CONV_OW + 2 * RAD + 3) / 4 * 4 + 4)  // staged row: 16-byte multiple, room for the last int4
#define CONV_SH (CONV_TY + 2 * RAD)
extern "C" __global__ void __launch_bounds__(CONV_TX * CONV_TY)
conv_int(const int* __restrict__ V, const int* __restrict__ T, int* __restrict__ out, const int H,
         const int W, const int reflect, const int offset)
{
    __shared__ int sT[KW * KW];
    __shared__ __align__(16) int sV[CONV_SH][CONV_SW];
    const int tid = threadIdx.y * CONV_TX + threadIdx.x;
    for (int t = tid; t < KW * KW; t += CONV_TX * CONV_TY) sT[t] = T[t];
    const int n = blockIdx.z;
    const int* Vn = V + (size_t)n * H * W;
    const int i0 = blockIdx.y * CONV_TY - RAD;
    const int j0 = blockIdx.x * CONV_OW - RAD;
    for (int t = tid; t < CONV_SH * CONV_SW; t += CONV_TX * CONV_TY) {
        const int yy = t / CONV_SW;
        const int xx = t - yy * CONV_SW;
        const int y = i0 + yy;
        const int x = j0 + xx;
        int v = 0;
        if (xx >= CONV_OW + 2 * RAD) {
            // padding: read into registers, never summed
        } else if (reflect) {
            v = __ldg(Vn + (size_t)reflect_index(y, H) * W + reflect_index(x, W));
        } else if (y >= 0 && y < H && x >= 0 && x < W) {
            v = __ldg(Vn + (size_t)y * W + x);
        }
        sV[yy][xx] = v;
    }
    __syncthreads();
    const int i = blockIdx.y * CONV_TY + threadIdx.y;
    const int jb = blockIdx.x * CONV_OW + threadIdx.x * CONV_CX;
    if (i >= H || jb >= W) return;
    int acc[CONV_CX];
#pragma unroll
    for (int c = 0; c < CONV_CX; ++c) acc[c] = offset;
#pragma unroll 1
    for (int dy = 0; dy < KW; ++dy) {
        const int4* row = reinterpret_cast<const int4*>(&sV[threadIdx.y + dy][threadIdx.x * CONV_CX]);
        int v[CONV_VN];
#pragma unroll
        for (int q = 0; q < CONV_VN / 4; ++q) {
            const int4 w = row[q];
            v[4 * q] = w.x;
            v[4 * q + 1] = w.y;
            v[4 * q + 2] = w.z;
            v[4 * q + 3] = w.w;
        }
        const int* trow = sT + dy * KW;
#pragma unroll
        for (int dx = 0; dx < KW; ++dx) {
            const int a = trow[dx];
#pragma unroll
            for (int c = 0; c < CONV_CX; ++c) acc[c] += a * v[c + dx];
        }
    }
    int* o = out + (size_t)n * H * W + (size_t)i * W;
#pragma unroll
    for (int c = 0; c < CONV_CX; ++c)
        if (jb + c < W) o[jb + c] = acc[c];
}

// Block-wide sum of (flips, 2 dE) committed with one atomic per counter per block: the one
// commit of every kernel below; thread 0 gets the block's flip count back (0 elsewhere).
// NW: warps per block. WARP_SUM: first sum the 32 lanes of each warp (false where only
// lane 0 of each warp holds values: the one-warp-per-cell sparse sweep). tid: the thread's linear index in the block (an int, or threadIdx.x
// itself). Every thread of the block must call it (block barriers inside). Integer sums:
// the order never changes the result.
template <int NW, bool WARP_SUM, typename Tid>
__device__ __forceinline__ int commit_counts(int f, i64 d, const Tid tid, int* flip_slot,
                                             u64* de_slot, int* total_slot, int* s_f, i64* s_d)
{
    int ft = 0;  // the block's flips, returned to thread 0 (0 elsewhere)
    if constexpr (WARP_SUM) {
        for (int o = 16; o > 0; o >>= 1) {
            f += __shfl_down_sync(0xffffffffu, f, o);
            d += __shfl_down_sync(0xffffffffu, d, o);
        }
    }
    if ((tid & 31) == 0) {
        s_f[tid >> 5] = f;
        s_d[tid >> 5] = d;
    }
    __syncthreads();
    if (tid == 0) {
        i64 dt = 0;
        for (int w = 0; w < NW; ++w) {
            ft += s_f[w];
            dt += s_d[w];
        }
        if (ft != 0) {
            atomicAdd(flip_slot, ft);
            atomicAdd(de_slot, (u64)dt);  // two's complement: wraps exactly
            atomicAdd(total_slot, ft);
        }
    }
    __syncthreads();
    return ft;
}

// Count one cell whose output changed from zcur to znew (state x): one flip and its exact
// energy change 2 dE, accumulated per thread into (my_f, my_d) for commit_counts.
__device__ __forceinline__ void count_flip(const i64 x, const int zcur, const int znew, const i64 gain,
                                           const int a_c, int& my_f, i64& my_d)
{
    const i64 dz = (i64)(znew - zcur);
    const i64 sz = (i64)(znew + zcur);
    my_f += 1;
    my_d += (gain - (i64)a_c) * dz * sz - 2 * (x - (i64)a_c * zcur) * dz;
}

// Whether image n may still change in sweep s (s == 0, or its previous sweep flipped a
// cell): read by thread 0 and broadcast to the block (uniform per block). s_go is a
// __shared__ slot the next tile or row rewrites, hence the second barrier.
__device__ __forceinline__ int image_active(const int tid, const int* flips, const int n, const int s,
                                            const int max_iter, int& s_go)
{
    if (tid == 0) s_go = (s == 0) || (__ldcg(flips + n * max_iter + s - 1) != 0);
    __syncthreads();
    const int go = s_go;
    __syncthreads();  // s_go is rewritten by the next tile / row
    return go;
}

// Whether row y of image n may still change in sweep s, broadcast from thread 0 (one
// barrier pair, like image_active, which it includes). rowmark[n][y'] holds 1 + the last
// sweep in which row y' flipped a cell (0: none yet in this launch). If no row within RAD
// of y flipped in sweep s - 1 or so far in sweep s, the window of every cell of row y is
// what it was when row y was last evaluated (in sweep s - 1, where row y itself flipped
// nothing): evaluating it again would decide every cell as it is, flip nothing and add
// no energy, so skipping it changes no result. Sweep 0 evaluates every row.
__device__ __forceinline__ int row_active(const int tid, const int* flips, const int* rowmark, const int n,
                                          const int y, const int H, const int s, const int max_iter,
                                          int& s_go)
{
    if (tid == 0) {
        int go = (s == 0);
        if (!go) {
            // every load issued before any is used: one L2 round trip, as image_active's
            const int* marks = rowmark + (size_t)n * H;
            const int prev = __ldcg(flips + n * max_iter + s - 1);
            int near = 0;
#pragma unroll
            for (int dy = -RAD; dy <= RAD; ++dy) {
                const int yy = y + dy;
                if (yy >= 0 && yy < H) near |= __ldcg(marks + yy) >= s;
            }
            go = prev != 0 && near;
        }
        s_go = go;
    }
    __syncthreads();
    const int go = s_go;
    __syncthreads();  // s_go is rewritten by the next row
    return go;
}

// Whether sweep s changed any cell of any image, broadcast from thread 0. Called after a
// grid barrier, when the counter is final: every block gets the same value.
__device__ __forceinline__ int sweep_changed(const int tid, const int* totals, const int s, int& s_go)
{
    if (tid == 0) s_go = __ldcg(totals + s) != 0;
    __syncthreads();
    const int go = s_go;
    __syncthreads();
    return go;
}

// sum of A * Z over the KW x KW window around (py, px), Z zero outside the image, read
// through the read-only path: callers read no cell that their launch writes (sync_step
// writes another buffer; a colour class never sees its own cells). A: shared or global.
__device__ __forceinline__ int window_sum(const short* __restrict__ Zn, const int* A, const int H,
                                          const int W, const int py, const int px)
{
    int acc = 0;
    for (int dy = 0; dy < KW; ++dy) {
        const int y = py + dy - RAD;
        if (y < 0 || y >= H) continue;
        for (int dx = 0; dx < KW; ++dx) {
            const int xx = px + dx - RAD;
            if (xx >= 0 && xx < W) acc += A[dy * KW + dx] * (int)__ldg(Zn + (size_t)y * W + xx);
        }
    }
    return acc;
}

#if TILES  // the tile kernels, compiled only where their tile fits in shared memory
// Update one tile (TY x TX cells of colour class (ci, cj)) of image n in place.
// The tile plus its halo is staged in shared memory; Z is read with __ldcg so a
// persistent kernel sees the other blocks' writes after a grid barrier.
__device__ __forceinline__ void update_tile(short* __restrict__ Z, const int* __restrict__ b,
                                            const int* sA, short (*tile)[SH_W], const int n,
                                            const int H, const int W, const int ci, const int cj,
                                            const int tile_r, const int tile_c, const i64 gain,
                                            const int a_c, int& my_f, i64& my_d)
{
    const int py0 = ci + tile_r * TY * PER - RAD;
    const int px0 = cj + tile_c * TX * PER - RAD;
    short* Zn = Z + (size_t)n * H * W;
    const int tid = threadIdx.y * TX + threadIdx.x;
    // Stage the tile in batches of LOAD_BATCH independent loads per thread so that
    // many L2/DRAM requests are in flight at once (a plain loop is latency bound).
    for (int base = tid; base < SH_H * SH_W; base += NTHREADS * LOAD_BATCH) {
        short v[LOAD_BATCH];
#pragma unroll
        for (int u = 0; u < LOAD_BATCH; ++u) {
            const int idx = base + u * NTHREADS;
            const int yy = idx / SH_W;
            const int py = py0 + yy;
            const int px = px0 + (idx - yy * SH_W);
            v[u] = 0;
            if (idx < SH_H * SH_W && py >= 0 && py < H && px >= 0 && px < W)
                v[u] = __ldcg(Zn + (size_t)py * W + px);
        }
#pragma unroll
        for (int u = 0; u < LOAD_BATCH; ++u) {
            const int idx = base + u * NTHREADS;
            if (idx < SH_H * SH_W) {
                const int yy = idx / SH_W;
                tile[yy][idx - yy * SH_W] = v[u];
            }
        }
    }
    __syncthreads();
    const int py = ci + (tile_r * TY + threadIdx.y) * PER;
    const int px = cj + (tile_c * TX + threadIdx.x) * PER;
    if (py < H && px < W) {
        const int ty = threadIdx.y * PER;
        const int tx = threadIdx.x * PER;
        int acc = 0;
#pragma unroll 1
        for (int dy = 0; dy < KW; ++dy) {
            const short* row = &tile[ty + dy][tx];
            const int* arow = sA + dy * KW;
#pragma unroll
            for (int dx = 0; dx < KW; ++dx) acc += arow[dx] * (int)row[dx];
        }
        const int zcur = tile[ty + RAD][tx + RAD];
        const i64 x = (i64)acc + (i64)__ldg(b + (size_t)n * H * W + (size_t)py * W + px);
        const int znew = decide(x, zcur, gain);
        if (znew != zcur) {
            Zn[(size_t)py * W + px] = (short)znew;
            count_flip(x, zcur, znew, gain, a_c, my_f, my_d);
        }
    }
    __syncthreads();
}

// One colour class of one sweep, one launch (grid: tiles_x, tiles_y, N).
// Images whose previous sweep changed nothing are at a fixed point and are skipped.
extern "C" __global__ void __launch_bounds__(NTHREADS)
async_class_pass(short* __restrict__ Z, const int* __restrict__ b, const int* __restrict__ A,
                 const int H, const int W, const int ci, const int cj, const long long gain,
                 const int a_c, int* __restrict__ flips, u64* __restrict__ de2,
                 int* __restrict__ totals, const int sweep, const int max_iter)
{
    __shared__ int sA[KW * KW];
    __shared__ short tile[SH_H][SH_W];
    __shared__ int s_f[NWARPS];
    __shared__ i64 s_d[NWARPS];
    const int n = blockIdx.z;
    if (sweep > 0 && flips[n * max_iter + sweep - 1] == 0) return;  // uniform per block
    const int tid = threadIdx.y * TX + threadIdx.x;
    for (int t = tid; t < KW * KW; t += NTHREADS) sA[t] = A[t];
    __syncthreads();
    int my_f = 0;
    i64 my_d = 0;
    update_tile(Z, b, sA, tile, n, H, W, ci, cj, blockIdx.y, blockIdx.x, gain, a_c, my_f, my_d);
    commit_counts<NWARPS, true>(my_f, my_d, tid, flips + n * max_iter + sweep,
                                de2 + n * max_iter + sweep, totals + sweep, s_f, s_d);
}

// Every sweep and colour class in one launch: a persistent grid walks the tiles
// of each class, then waits at a grid barrier before the next class. Stops after
// the first sweep in which no cell of any image changed, or after max_iter sweeps.
extern "C" __global__ void __launch_bounds__(NTHREADS)
async_fused(short* __restrict__ Z, const int* __restrict__ b, const int* __restrict__ A,
            const int N, const int H, const int W, const long long gain, const int a_c,
            int* __restrict__ flips, u64* __restrict__ de2, int* __restrict__ totals,
            const int max_iter, unsigned long long* bar, int* bar_err, const int s0)
{
    __shared__ int sA[KW * KW];
    __shared__ short tile[SH_H][SH_W];
    __shared__ int s_f[NWARPS];
    __shared__ i64 s_d[NWARPS];
    __shared__ int s_go;
    const int tid = threadIdx.y * TX + threadIdx.x;
    for (int t = tid; t < KW * KW; t += NTHREADS) sA[t] = A[t];
    __syncthreads();
    const int rows = (H + PER - 1) / PER;
    const int cols = (W + PER - 1) / PER;
    const int tiles_y = (rows + TY - 1) / TY;
    const int tiles_x = (cols + TX - 1) / TX;
    const int per_image = tiles_y * tiles_x;
    const int total = N * per_image;
    for (int s = s0; s < max_iter; ++s) {
        for (int ci = 0; ci < PER; ++ci) {
            for (int cj = 0; cj < PER; ++cj) {
                for (int t = blockIdx.x; t < total; t += gridDim.x) {
                    const int n = t / per_image;
                    const int rem = t - n * per_image;
                    const int tr = rem / tiles_x;
                    const int tc = rem - tr * tiles_x;
                    if (!image_active(tid, flips, n, s, max_iter, s_go)) continue;  // uniform per block
                    int my_f = 0;
                    i64 my_d = 0;
                    update_tile(Z, b, sA, tile, n, H, W, ci, cj, tr, tc, gain, a_c, my_f, my_d);
                    commit_counts<NWARPS, true>(my_f, my_d, tid, flips + n * max_iter + s,
                                                de2 + n * max_iter + s, totals + s, s_f, s_d);
                }
                if (!grid_barrier(bar, bar_err)) return;  // timed out: the host raises
            }
        }
        if (!sweep_changed(tid, totals, s, s_go)) break;  // same value in every block
    }
}

#endif  // TILES

// One synchronous (Jacobi) step: every cell from the previous outputs at once.
// Znew holds the outputs of two steps back on entry; changed[n] counts cells that
// differ from Zold, back[n] cells that differ from two steps back (0 => 2-cycle).
extern "C" __global__ void sync_step(const short* __restrict__ Zold, short* __restrict__ Znew,
                                     const int* __restrict__ b, const int* __restrict__ A,
                                     const int H, const int W, const long long gain,
                                     int* __restrict__ changed, int* __restrict__ back)
{
    __shared__ int sA[KW * KW];
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    for (int t = tid; t < KW * KW; t += blockDim.x * blockDim.y) sA[t] = A[t];
    __syncthreads();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    const int n = blockIdx.z;
    if (i >= H || j >= W) return;
    const short* Zn = Zold + (size_t)n * H * W;
    const int acc = window_sum(Zn, sA, H, W, i, j);
    const size_t at = (size_t)n * H * W + (size_t)i * W + j;
    const int zcur = Zn[(size_t)i * W + j];
    const int znew = decide((i64)acc + (i64)b[at], zcur, gain);
    const int zprev2 = Znew[at];
    Znew[at] = (short)znew;
    if (znew != zcur) atomicAdd(changed + n, 1);
    if (znew != zprev2) atomicAdd(back + n, 1);
}

// ---------------------------------------------------------------------------------
// Wide-spacing first sweep: colour classes spaced `sp` >= r + 1 apart (runtime value),
// one warp per cell. Each lane sums a strided subset of the window taps straight from
// global memory (__ldcg), then an exact integer warp reduction; lane 0 decides.
// Cells of one class are more than r apart, so no cell reads another one's write.
// ---------------------------------------------------------------------------------
#define SP_WARPS 4

__device__ __forceinline__ void sparse_cell(short* __restrict__ Z, const int* __restrict__ b,
                                            const int* sA, const int n, const int H, const int W,
                                            const int py, const int px, const i64 gain,
                                            const int a_c, int& my_f, i64& my_d)
{
    const int lane = threadIdx.x & 31;
    short* Zn = Z + (size_t)n * H * W;
    int acc = 0;
    for (int t = lane; t < KW * KW; t += 32) {
        const int dy = t / KW;
        const int y = py + dy - RAD;
        const int xx = px + (t - dy * KW) - RAD;
        if (y >= 0 && y < H && xx >= 0 && xx < W) acc += sA[t] * (int)__ldcg(Zn + (size_t)y * W + xx);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        const int zcur = __ldcg(Zn + (size_t)py * W + px);
        const i64 x = (i64)acc + (i64)__ldg(b + (size_t)n * H * W + (size_t)py * W + px);
        const int znew = decide(x, zcur, gain);
        if (znew != zcur) {
            Zn[(size_t)py * W + px] = (short)znew;
            count_flip(x, zcur, znew, gain, a_c, my_f, my_d);
        }
    }
}

// One wide-spacing colour class (ci, cj) of sweep 0, one launch: grid (blocks, N),
// block 32 * SP_WARPS threads, one cell per warp.
extern "C" __global__ void __launch_bounds__(32 * SP_WARPS)
sparse_class_pass(short* __restrict__ Z, const int* __restrict__ b, const int* __restrict__ A,
                  const int H, const int W, const int sp, const int ci, const int cj,
                  const long long gain, const int a_c, int* __restrict__ flips,
                  u64* __restrict__ de2, int* __restrict__ totals, const int max_iter)
{
    __shared__ int sA[KW * KW];
    __shared__ int s_f[SP_WARPS];
    __shared__ i64 s_d[SP_WARPS];
    for (int t = threadIdx.x; t < KW * KW; t += 32 * SP_WARPS) sA[t] = A[t];
    __syncthreads();
    const int n = blockIdx.y;
    const int nr = (H - ci + sp - 1) / sp;
    const int nc = (W - cj + sp - 1) / sp;
    const int cell = blockIdx.x * SP_WARPS + (threadIdx.x >> 5);
    int my_f = 0;
    i64 my_d = 0;
    if (cell < nr * nc) {
        const int a = cell / nc;
        sparse_cell(Z, b, sA, n, H, W, ci + a * sp, cj + (cell - a * nc) * sp, gain, a_c, my_f, my_d);
    }
    commit_counts<SP_WARPS, false>(my_f, my_d, threadIdx.x, flips + n * max_iter, de2 + n * max_iter,
                                   totals, s_f, s_d);
}

// The whole wide-spacing sweep 0 in one persistent launch, grid barriers between classes.
extern "C" __global__ void __launch_bounds__(32 * SP_WARPS)
sparse_fused(short* __restrict__ Z, const int* __restrict__ b, const int* __restrict__ A,
             const int N, const int H, const int W, const int sp, const long long gain,
             const int a_c, int* __restrict__ flips, u64* __restrict__ de2,
             int* __restrict__ totals, const int max_iter, unsigned long long* bar, int* bar_err)
{
    __shared__ int sA[KW * KW];
    __shared__ int s_f[SP_WARPS];
    __shared__ i64 s_d[SP_WARPS];
    for (int t = threadIdx.x; t < KW * KW; t += 32 * SP_WARPS) sA[t] = A[t];
    __syncthreads();
    for (int ci = 0; ci < sp; ++ci) {
        const int nr = (H - ci + sp - 1) / sp;
        for (int cj = 0; cj < sp; ++cj) {
            const int nc = (W - cj + sp - 1) / sp;
            const int per_image = (nr * nc + SP_WARPS - 1) / SP_WARPS;
            const int total = N * per_image;
            for (int t = blockIdx.x; t < total; t += gridDim.x) {
                const int n = t / per_image;
                const int cell = (t - n * per_image) * SP_WARPS + (threadIdx.x >> 5);
                int my_f = 0;
                i64 my_d = 0;
                if (cell < nr * nc) {
                    const int a = cell / nc;
                    sparse_cell(Z, b, sA, n, H, W, ci + a * sp, cj + (cell - a * nc) * sp, gain, a_c,
                                my_f, my_d);
                }
                commit_counts<SP_WARPS, false>(my_f, my_d, threadIdx.x, flips + n * max_iter,
                                               de2 + n * max_iter, totals, s_f, s_d);
            }
            if (!grid_barrier(bar, bar_err)) return;  // timed out: the host raises
        }
    }
}

// ---------------------------------------------------------------------------------
// Row-group schedule: every sweep in one persistent launch with far fewer grid
// barriers, same update order (and bits) as the colour-class passes above.
//
// A sweep with class spacing sp (sp0 for sweep 0 when given, else RAD + 1) runs the
// classes (ci, cj) in raster order. Group the sp classes of one ci: they only
// update rows y = ci (mod sp), and a cell of row y reads rows y - RAD .. y + RAD, of
// which only row y itself belongs to the group (RAD < sp). So during a group every
// row of it is independent of the others, and its neighbour rows are constant:
//   1. S[x] = b[y, x] + sum over the 2 RAD off-centre rows of A * Z (fixed for the
//      whole group), computed once per row, in parallel;
//   2. the sp classes cj = 0 .. sp-1 are then sp dependent steps along the row, each
//      adding only the centre-row taps, with a block barrier between steps.
// One block owns one row (of one image) at a time; a grid barrier separates groups:
// sp per sweep instead of sp^2 (30 + 5 per later sweep at radius 4 instead of
// 900 + 25). Integer sums are exact in any order (|sum| < 2^31, see _templates.py),
// so the result equals the class-by-class reference bit for bit.
// ---------------------------------------------------------------------------------
#ifndef RT
#define RT 256
#endif
#ifndef CPT
#define CPT 4  // columns per thread in the off-centre sum (2 for narrow rows: more threads)
#endif
#ifndef RMINB
#define RMINB 1  // blocks per SM the compiler must leave registers for (the host's per-SM target)
#endif
#ifndef RLOAD
#define RLOAD 8  // independent loads per thread in flight when staging the neighbour rows
#endif

// Update cell x of the block's row (one colour class step); S and the row in shared memory.
__device__ __forceinline__ void row_cell(const int x, const int* ca, short* row, const int* S,
                                         short* Zrow, const i64 gain, const int a_c, int& my_f,
                                         i64& my_d)
{
    int acc = 0;
#pragma unroll
    for (int dx = 0; dx < KW; ++dx) acc += ca[dx] * (int)row[x + dx];
    const int zcur = row[x + RAD];
    const i64 xv = (i64)acc + (i64)S[x];
    const int znew = decide(xv, zcur, gain);
    if (znew != zcur) {
        row[x + RAD] = (short)znew;
        Zrow[x] = (short)znew;
        count_flip(xv, zcur, znew, gain, a_c, my_f, my_d);
    }
}

// Grid: a persistent 1-D grid of RT-thread blocks, all resident. Dynamic shared
// memory: 4 W + 2 (W + 2 RAD) + 2 KW (chunk + 2 RAD) bytes; chunk % CPT == 0.
// rowmark: N x H int32, zero on entry (see row_active): rows with no flip near them
// since their last evaluation are skipped.
extern "C" __global__ void __launch_bounds__(RT, RMINB)
async_rows(short* __restrict__ Z, const int* __restrict__ b, const int* __restrict__ A,
           const int N, const int H, const int W, const long long gain, const int a_c,
           int* __restrict__ flips, u64* __restrict__ de2, int* __restrict__ totals,
           const int max_iter, unsigned long long* bar, int* bar_err, const int sp0,
           const int chunk, int* __restrict__ rowmark)
{
    extern __shared__ int smem[];
    int* S = smem;                            // [W] static part of x for the current row
    short* row = (short*)(smem + W);          // [W + 2 RAD] row[RAD + x] = Z[y, x], zero pads
    short* stage = row + W + 2 * RAD;         // [KW][chunk + 2 RAD] neighbour rows
    __shared__ int sA[KW * KW];
    __shared__ int s_f[RT / 32];
    __shared__ i64 s_d[RT / 32];
    __shared__ int s_go;
    const int tid = threadIdx.x;
    for (int t = tid; t < KW * KW; t += RT) sA[t] = A[t];
    __syncthreads();
    int ca[KW];  // centre row of A, in registers
#pragma unroll
    for (int dx = 0; dx < KW; ++dx) ca[dx] = sA[RAD * KW + dx];
    const int SW = chunk + 2 * RAD;
    for (int s = 0; s < max_iter; ++s) {
        const int sp = (s == 0 && sp0 > 0) ? sp0 : PER;
        for (int ci = 0; ci < sp; ++ci) {
            const int rows_g = (ci < H) ? (H - ci + sp - 1) / sp : 0;
            const int total = N * rows_g;
            for (int t = blockIdx.x; t < total; t += gridDim.x) {
                const int n = t / rows_g;
                const int y = ci + (t - n * rows_g) * sp;
                // image at a fixed point, or no flip near this row since its last
                // evaluation: skip (uniform per block; see row_active)
                if (!row_active(tid, flips, rowmark, n, y, H, s, max_iter, s_go)) continue;
                short* Zn = Z + (size_t)n * H * W;
                const int* bn = b + (size_t)n * H * W;
                for (int x = tid; x < W + 2 * RAD; x += RT) {
                    const int px = x - RAD;
                    row[x] = (px >= 0 && px < W) ? __ldcg(Zn + (size_t)y * W + px) : (short)0;
                }
                // 1. S = b + off-centre rows, chunk by chunk through shared memory.
                for (int c0 = 0; c0 < W; c0 += chunk) {
                    const int cw = min(chunk, W - c0);
                    // Stage the 2 RAD neighbour rows (S skips the centre row) of columns
                    // c0 - RAD .. c0 + cw + RAD - 1: a thread takes a column and loads up to
                    // RLOAD rows of it at once. No division: an earlier loop over the flat
                    // (row, column) index divided by SW per value and issued about half of
                    // the kernel's instructions (ncu, 64 x 512^2).
                    for (int j = tid; j < SW; j += RT) {
                        const int px = c0 + j - RAD;
                        const bool col_ok = px >= 0 && px < W;
                        const long long at = (long long)(y - RAD) * W + px;  // row y - RAD, column px
#pragma unroll
                        for (int d0 = 0; d0 < KW; d0 += RLOAD) {
                            short v[RLOAD];
#pragma unroll
                            for (int u = 0; u < RLOAD; ++u) {
                                const int dy = d0 + u;
                                const int yy = y + dy - RAD;
                                v[u] = 0;
                                if (dy < KW && dy != RAD && col_ok && yy >= 0 && yy < H)
                                    v[u] = __ldcg(Zn + at + (long long)dy * W);
                            }
#pragma unroll
                            for (int u = 0; u < RLOAD; ++u) {
                                const int dy = d0 + u;
                                if (dy < KW && dy != RAD) stage[dy * SW + j] = v[u];
                            }
                        }
                    }
                    __syncthreads();
                    for (int x0 = tid * CPT; x0 < cw; x0 += RT * CPT) {
                        int acc[CPT];
#pragma unroll
                        for (int c = 0; c < CPT; ++c) acc[c] = 0;
#pragma unroll 1
                        for (int dy = 0; dy < KW; ++dy) {
                            if (dy == RAD) continue;
                            const short* sr = stage + dy * SW + x0;
                            int v[CPT + 2 * RAD];
#pragma unroll
                            for (int k = 0; k < CPT + 2 * RAD; ++k) v[k] = sr[k];
                            const int* ar = sA + dy * KW;
#pragma unroll
                            for (int dx = 0; dx < KW; ++dx) {
                                const int a = ar[dx];
#pragma unroll
                                for (int c = 0; c < CPT; ++c) acc[c] += a * v[c + dx];
                            }
                        }
#pragma unroll
                        for (int c = 0; c < CPT; ++c) {
                            if (x0 + c < cw) {
                                const int x = c0 + x0 + c;
                                S[x] = acc[c] + __ldg(bn + (size_t)y * W + x);
                            }
                        }
                    }
                    __syncthreads();  // stage is reloaded by the next chunk; S, row complete
                }
                // 2. the sp classes of this row, one dependent step each. When a step
                // has at most 32 cells (wide spacing, narrow rows) warp 0 runs them all
                // with warp barriers; otherwise the block, with block barriers.
                int my_f = 0;
                i64 my_d = 0;
                short* Zrow = Zn + (size_t)y * W;
                if ((W + sp - 1) / sp <= 32) {
                    if (tid < 32) {
                        for (int cj = 0; cj < sp; ++cj) {
                            const int x = cj + tid * sp;
                            if (x < W) row_cell(x, ca, row, S, Zrow, gain, a_c, my_f, my_d);
                            __syncwarp();
                        }
                    }
                } else {
                    for (int cj = 0; cj < sp; ++cj) {
                        for (int x = cj + tid * sp; x < W; x += RT * sp)
                            row_cell(x, ca, row, S, Zrow, gain, a_c, my_f, my_d);
                        __syncthreads();
                    }
                }
                const int row_flips = commit_counts<RT / 32, true>(
                    my_f, my_d, tid, flips + n * max_iter + s, de2 + n * max_iter + s, totals + s, s_f, s_d);
                if (tid == 0 && row_flips != 0) rowmark[(size_t)n * H + y] = s + 1;
            }
            if (!grid_barrier(bar, bar_err)) return;  // timed out: the host raises
        }
        if (!sweep_changed(tid, totals, s, s_go)) break;  // same value in every block
    }
}

// ---------------------------------------------------------------------------------
// The paper's own GPU variants (Tanaka & Tanji, Sect. 3), as schedules of this engine:
// same class order, hence the same bits as every schedule above.
//
// paper_global_pass: "no shared memory" (their Fig. 3): one launch per colour class,
// one thread per cell, every tap read from global memory.
//
// paper_rows_step: shared memory "along x" (Fig. 4) and "along x and y" (Fig. 5).
// The image is cut into groups of PER rows; class row ci is row ci of every group.
// One launch runs the class rows [c0, c1) of every group: a block stages the lines
// its groups read (bs groups per block, the paper's "block size") in shared memory,
// runs the classes (ci, cj) of those rows in raster order with a block barrier after
// each, writes changed cells straight back and counts them. Along x: one class row per
// launch (PER launches a sweep; the paper reads the 3 lines of its 3 x 3 template).
// Along x and y: PER - RAD class rows per launch: a row of class row ci in [c0, c1)
// reads rows of the neighbouring groups of class rows outside [c0, c1) only when
// c1 - c0 <= PER - RAD, so no block reads what another one writes in the same launch,
// and every row it reads is in the state the sequential class order gives it (2
// launches a sweep for the paper's 3 x 3 template with 9 classes: 4 then 3 lines).
// ---------------------------------------------------------------------------------
#define PG_THREADS 256

extern "C" __global__ void __launch_bounds__(PG_THREADS)
paper_global_pass(short* __restrict__ Z, const int* __restrict__ b, const int* __restrict__ A,
                  const int H, const int W, const int ci, const int cj, const long long gain,
                  const int a_c, int* __restrict__ flips, u64* __restrict__ de2,
                  int* __restrict__ totals, const int sweep, const int max_iter)
{
    __shared__ int s_f[PG_THREADS / 32];
    __shared__ i64 s_d[PG_THREADS / 32];
    const int n = blockIdx.y;
    if (sweep > 0 && flips[n * max_iter + sweep - 1] == 0) return;  // uniform per block
    const int nr = (H - ci + PER - 1) / PER;
    const int nc = (W - cj + PER - 1) / PER;
    const int cell = blockIdx.x * PG_THREADS + threadIdx.x;
    short* Zn = Z + (size_t)n * H * W;
    int my_f = 0;
    i64 my_d = 0;
    if (cell < nr * nc) {
        const int a = cell / nc;
        const int py = ci + a * PER;
        const int px = cj + (cell - a * nc) * PER;
        const int acc = window_sum(Zn, A, H, W, py, px);
        const int zcur = Zn[(size_t)py * W + px];
        const i64 x = (i64)acc + (i64)__ldg(b + (size_t)n * H * W + (size_t)py * W + px);
        const int znew = decide(x, zcur, gain);
        if (znew != zcur) {
            Zn[(size_t)py * W + px] = (short)znew;
            count_flip(x, zcur, znew, gain, a_c, my_f, my_d);
        }
    }
    commit_counts<PG_THREADS / 32, true>(my_f, my_d, threadIdx.x, flips + n * max_iter + sweep,
                                         de2 + n * max_iter + sweep, totals + sweep, s_f, s_d);
}

// Grid (ceil(groups / bs), N), PG_THREADS threads; dynamic shared memory
// 2 * ((bs - 1) PER + (c1 - c0) + 2 RAD) * (W + 2 RAD) bytes.
extern "C" __global__ void __launch_bounds__(PG_THREADS)
paper_rows_step(short* __restrict__ Z, const int* __restrict__ b, const int* __restrict__ A,
                const int H, const int W, const int c0, const int c1, const int bs,
                const long long gain, const int a_c, int* __restrict__ flips,
                u64* __restrict__ de2, int* __restrict__ totals, const int sweep,
                const int max_iter)
{
    extern __shared__ short lines[];  // [L][W + 2 RAD], zero outside the image
    __shared__ int sA[KW * KW];
    __shared__ int s_f[PG_THREADS / 32];
    __shared__ i64 s_d[PG_THREADS / 32];
    const int n = blockIdx.y;
    if (sweep > 0 && flips[n * max_iter + sweep - 1] == 0) return;  // uniform per block
    const int tid = threadIdx.x;
    for (int t = tid; t < KW * KW; t += PG_THREADS) sA[t] = A[t];
    const int g0 = blockIdx.x * bs;
    const int y_lo = g0 * PER + c0 - RAD;  // image row of line 0
    const int L = (bs - 1) * PER + (c1 - c0) + 2 * RAD;
    const int LW = W + 2 * RAD;
    short* Zn = Z + (size_t)n * H * W;
    const int* bn = b + (size_t)n * H * W;
    for (int idx = tid; idx < L * LW; idx += PG_THREADS) {
        const int yy = y_lo + idx / LW;
        const int px = idx % LW - RAD;
        lines[idx] = (yy >= 0 && yy < H && px >= 0 && px < W) ? Zn[(size_t)yy * W + px] : (short)0;
    }
    __syncthreads();
    int my_f = 0;
    i64 my_d = 0;
    for (int ci = c0; ci < c1; ++ci) {
        for (int cj = 0; cj < PER; ++cj) {
            const int nc = (W - cj + PER - 1) / PER;
            for (int t = tid; t < bs * nc; t += PG_THREADS) {
                const int gi = t / nc;
                const int y = (g0 + gi) * PER + ci;
                if (y >= H) continue;
                const int x = cj + (t - gi * nc) * PER;
                const short* win = lines + (y - y_lo - RAD) * LW + x;  // window's top-left
                int acc = 0;
#pragma unroll 1
                for (int dy = 0; dy < KW; ++dy) {
#pragma unroll
                    for (int dx = 0; dx < KW; ++dx) acc += sA[dy * KW + dx] * (int)win[dy * LW + dx];
                }
                short* centre = lines + (y - y_lo) * LW + x + RAD;
                const int zcur = *centre;
                const i64 xv = (i64)acc + (i64)__ldg(bn + (size_t)y * W + x);
                const int znew = decide(xv, zcur, gain);
                if (znew != zcur) {
                    *centre = (short)znew;
                    Zn[(size_t)y * W + x] = (short)znew;
                    count_flip(xv, zcur, znew, gain, a_c, my_f, my_d);
                }
            }
            __syncthreads();
        }
    }
    commit_counts<PG_THREADS / 32, true>(my_f, my_d, tid, flips + n * max_iter + sweep,
                                         de2 + n * max_iter + sweep, totals + sweep, s_f, s_d);
}

// ---------------------------------------------------------------------------------
// Input and output conversions, one pass each (twins of _quantise_input,
// _initial_state for init='input' and _levels_to_output in _dtcnn.py).
// ---------------------------------------------------------------------------------
__device__ __forceinline__ void prep_store(const int U, int* Uo, int* Zu, short* Z0, const long long i)
{
    const int zu = (LEVELS - 1) * (U - 512);
    Uo[i] = U;
    Zu[i] = zu;
    Z0[i] = (short)zu;
}

extern "C" __global__ void prep_u8(const unsigned char* __restrict__ src, int* __restrict__ U,
                                   int* __restrict__ Zu, short* __restrict__ Z0, const long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) prep_store(((int)src[i] * 2048 + 255) / 510, U, Zu, Z0, i);  // round(1024 v / 255)
}

extern "C" __global__ void prep_f64(const double* __restrict__ src, int* __restrict__ U,
                                    int* __restrict__ Zu, short* __restrict__ Z0, const long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) prep_store((int)rint(src[i] * 1024.0), U, Zu, Z0, i);  // half to even, as np.rint
}

extern "C" __global__ void prep_f32(const float* __restrict__ src, int* __restrict__ U,
                                    int* __restrict__ Zu, short* __restrict__ Z0, const long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) prep_store((int)rint((double)src[i] * 1024.0), U, Zu, Z0, i);
}

// Level index k of a state value: floor(z / 512) + (m - 1), halved (exact for levels).
__device__ __forceinline__ int level_of(const int z)
{
    int q = z / 512;
    if (z % 512 != 0 && z < 0) q -= 1;  // floor division, as NumPy's //
    const int t = q + (LEVELS - 1);
    return (t >= 0) ? t / 2 : -((1 - t) / 2);  // floor(t / 2)
}

extern "C" __global__ void levels_u8(const short* __restrict__ Z, unsigned char* __restrict__ out,
                                     const long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (unsigned char)((level_of(Z[i]) * 510 + (LEVELS - 1)) / (2 * (LEVELS - 1)));
}

extern "C" __global__ void levels_f64(const short* __restrict__ Z, double* __restrict__ out,
                                      const long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (double)level_of(Z[i]) / (double)(LEVELS - 1);
}

extern "C" __global__ void levels_f32(const short* __restrict__ Z, float* __restrict__ out,
                                      const long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)((double)level_of(Z[i]) / (double)(LEVELS - 1));
}
