// Training kernels for GPUMLPClassifier (sknn_gpu/neural_network/_mlp.py).
//
// ACT (hidden activation): 0 identity, 1 logistic, 2 tanh, 3 relu.
// OUT (output activation):  0 softmax, 1 logistic.
// SOLVER: 0 sgd without momentum, 1 sgd with momentum, 2 sgd with Nesterov momentum, 3 adam.
//
// mlp_sgd1: per-sample SGD (batch_size=1) for one hidden layer in ONE persistent launch
//   per chunk of samples. Block b owns hidden units [b*J, b*J + J): their rows of W1^T
//   (n_hid, n_in), of W2 (n_hid, n_out) and of b1, plus their optimizer state. For
//   sample k the block applies the pending update of sample k-1 to its rows and, in the
//   same pass over the weights, computes its hidden units for sample k and its partial
//   output sum_j W2[j, :] h_j. One grid-wide barrier per sample sums the partial outputs
//   (and the partial sums of squared weights for the L2 term of the loss) in a fixed
//   order, so every block sees the same logits, computes the same softmax and output
//   delta, keeps an identical copy of b2, and backpropagates into its own hidden units.
//   The launch must have every block resident (grid <= number of SMs); the barrier
//   (grid_barrier.cuh, monotonic 64-bit counter) times out and sets *err instead of hanging.
//   With resident (when they fit), a block copies its rows of W1^T, W2, b1 and their
//   optimizer state into shared memory for the launch and writes them back at its end.
//   mlp_sgd1_cluster: the same for a grid that is one thread-block cluster (at most 8
//   blocks, compute capability 9.0): a cluster barrier, and the partial outputs read from
//   the other blocks' shared memory, in the same order (the same bits).
//   KR > 0 (both kernels; one hidden unit a warp, at most 32 * KR inputs, plain SGD or
//   momentum): each lane keeps its KR values of its unit's row of W1^T (and their velocity)
//   in registers for the whole launch; the same operations in the same order (the same bits)
//   with half the shared-memory traffic.
//
// Minibatch helpers (the GEMMs are cuBLAS through CuPy): bias_act, out_delta
// (out_delta_w with sample weights), act_deriv, params_update.
//
// Prediction (forward_cuda). float32 on sm_80 and newer: every hidden layer is one
// dense_tc launch (tensor cores, 3xTF32: the product, then the bias and activation); a last
// hidden layer of at most 128 units with at most 32 outputs takes the output layer in the
// same launch. Otherwise (float64, older GPUs) a cuBLAS product and bias_act_rows each hidden
// layer, and tail_fused (a last hidden layer of at most 128 units, at most 32 outputs: that
// layer and the output layer in one launch). Where no kernel takes the output layer,
// out_fused (the last hidden layer's bias and activation, the output layer's product, its
// bias and activation, for at most 32 outputs) or, for wider outputs, a product and
// bias_out. The kernel that reads X or the first layer's products also flags a value that
// is not finite, which stands in for a separate pass over the input.
//
// Graph-replayed minibatch steps (_mlp_graph.py): a step captured once as a CUDA graph
// learns which minibatch it is from the device counter *step: gather_batch copies that
// minibatch's rows (in the epoch's order) into the static batch buffers, out_delta_w_step
// and params_update_step read the step's row of the per-epoch table tab (STEP_TAB
// doubles a step: learning rate, 1/B, loss scale, scale of the squared weights), and
// step_advance moves the counter on after the update.

#include "grid_barrier.cuh"
#include "cluster.cuh"

template <typename T>
__device__ __forceinline__ T act_fn(T z, int act)
{
    if (act == 1) return (T)1 / ((T)1 + exp(-z));
    if (act == 2) return tanh(z);
    if (act == 3) return z > (T)0 ? z : (T)0;
    return z;
}

// derivative expressed with the activation's output h
template <typename T>
__device__ __forceinline__ T act_grad(T h, int act)
{
    if (act == 1) return h * ((T)1 - h);
    if (act == 2) return (T)1 - h * h;
    if (act == 3) return h == (T)0 ? (T)0 : (T)1;
    return (T)1;
}

template <typename T> struct Eps;
template <> struct Eps<float> { static __device__ __forceinline__ float v() { return 1.1920928955078125e-07f; } };
template <> struct Eps<double> { static __device__ __forceinline__ double v() { return 2.220446049250313e-16; } };

template <typename T>
__device__ __forceinline__ T clip01(T p)
{
    const T e = Eps<T>::v();
    return p < e ? e : (p > (T)1 - e ? (T)1 - e : p);
}

template <typename T>
__device__ __forceinline__ T wsum(T v)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// Sum of v over the warp, in every lane.
template <typename T>
__device__ __forceinline__ T wsum_all(T v)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

template <typename T>
__device__ __forceinline__ T wmax_all(T v)
{
    for (int off = 16; off > 0; off >>= 1) {
        const T o = __shfl_xor_sync(0xffffffffu, v, off);
        v = o > v ? o : v;
    }
    return v;
}

// Logit c of a row: z[c], plus the bias b[c] when BIAS.
template <typename T, bool BIAS>
__device__ __forceinline__ T logit(const T* z, const T* b, const int c)
{
    return BIAS ? z[c] + b[c] : z[c];
}

// One row of logits through the output activation (OUT), by one thread (out_delta and
// out_delta_w; mlp_sgd1 has the warp's version, out_loss_delta_warp): returns the row's
// log-loss against the 0/1 targets y (in double) and writes the output delta p - y into d.
// d may be z itself: each z[c] is read before d[c] is written.
template <typename T, int OUT, bool BIAS>
__device__ __forceinline__ double out_loss_delta(const T* z, const T* b, const T* y, T* d, const int cols)
{
    double l = 0.0;
    if (OUT == 0) {
        T mx = logit<T, BIAS>(z, b, 0);
        for (int c = 1; c < cols; ++c) { const T v = logit<T, BIAS>(z, b, c); mx = v > mx ? v : mx; }
        T tot = (T)0;
        for (int c = 0; c < cols; ++c) { const T e = exp(logit<T, BIAS>(z, b, c) - mx); d[c] = e; tot += e; }
        for (int c = 0; c < cols; ++c) {
            const T p = d[c] / tot;
            if (y[c] != (T)0) l -= (double)y[c] * log((double)clip01(p));
            d[c] = p - y[c];
        }
    } else {
        for (int c = 0; c < cols; ++c) {
            const T p = (T)1 / ((T)1 + exp(-logit<T, BIAS>(z, b, c)));
            const T pc = clip01(p);
            l -= (double)y[c] * log((double)pc) + (1.0 - (double)y[c]) * log(1.0 - (double)pc);
            d[c] = p - y[c];
        }
    }
    return l;
}

// out_loss_delta (no bias, d not z) by the 32 lanes of a warp: lane l takes outputs l,
// l + 32, ... The softmax's sum is a butterfly over the lanes (every lane gets the same
// bits). Returns this lane's share of the row's loss (its outputs' terms): the caller sums
// the lanes' shares once, at the end of its rows.
template <typename T, int OUT>
__device__ __forceinline__ double out_loss_delta_warp(const T* z, const T* y, T* d, const int cols, const int lane)
{
    double l = 0.0;
    if (OUT == 0) {
        T mx = z[0];
        for (int c = lane; c < cols; c += 32) mx = z[c] > mx ? z[c] : mx;
        mx = wmax_all(mx);
        T tot = (T)0;
        for (int c = lane; c < cols; c += 32) {
            const T e = exp(z[c] - mx);
            d[c] = e;
            tot += e;
        }
        tot = wsum_all(tot);
        for (int c = lane; c < cols; c += 32) {
            const T p = d[c] / tot;
            if (y[c] != (T)0) l -= (double)y[c] * log((double)clip01(p));
            d[c] = p - y[c];
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            const T p = (T)1 / ((T)1 + exp(-z[c]));
            const T pc = clip01(p);
            l -= (double)y[c] * log((double)pc) + (1.0 - (double)y[c]) * log(1.0 - (double)pc);
            d[c] = p - y[c];
        }
    }
    return l;
}

// cp.async (sm_80 and newer): one value of 4 or 8 bytes from global to shared memory,
// without a register; the copies of a thread are waited for with cp_async_wait_all
template <typename T>
__device__ __forceinline__ void cp_async_value(T* dst, const T* src)
{
#if __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    if (sizeof(T) == 8) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(a), "l"(src) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(a), "l"(src) : "memory");
    }
#else
    *dst = __ldg(src);
#endif
}

__device__ __forceinline__ void cp_async_wait_all()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// One optimizer step on registers (SOLVER fixed at compile time): returns the new
// weight and updates the state a (velocity / first moment) and b (second moment).
// lr is the plain rate for sgd and the bias-corrected rate for adam.
template <typename T, int SOLVER>
__device__ __forceinline__ T opt_reg(T w, T g, T& a, T& b, T lr, T mu, T b1, T b2, T eps)
{
    if (SOLVER == 0) {
        return w - lr * g;
    } else if (SOLVER == 1) {
        a = mu * a - lr * g;
        return w + a;
    } else if (SOLVER == 2) {
        a = mu * a - lr * g;
        return w + (mu * a - lr * g);
    } else {
        a = b1 * a + ((T)1 - b1) * g;
        b = b2 * b + ((T)1 - b2) * g * g;
        return w - lr * a / (sqrt(b) + eps);
    }
}

// The same step with the state in global (or shared) arrays at index k.
template <typename T, int SOLVER>
__device__ __forceinline__ T opt_step(T w, T g, T* sa, T* sb, long long k, T lr, T mu, T b1, T b2, T eps)
{
    T a = SOLVER >= 1 ? sa[k] : (T)0;
    T b = SOLVER == 3 ? sb[k] : (T)0;
    const T r = opt_reg<T, SOLVER>(w, g, a, b, lr, mu, b1, b2, eps);
    if (SOLVER >= 1) sa[k] = a;
    if (SOLVER == 3) sb[k] = b;
    return r;
}

#define MLP_UNROLL 8

// With SGD1_PHASES defined (benchmarks/tools/profile_mlp.py --per-sample-phases), thread 0
// of block 0 adds the SM clock cycles of each phase of a sample to sgd1_phases[k]: where
// the per-sample time goes. Marks sit after block barriers (or right before the grid
// barrier), so each phase is the block's, not one thread's.
#ifdef SGD1_PHASES
__device__ unsigned long long sgd1_phases[8];
#define SGD1_MARK(k)                                                   \
    if (blockIdx.x == 0 && threadIdx.x == 0) {                         \
        const long long now_ = clock64();                              \
        sgd1_phases[k] += (unsigned long long)(now_ - sgd1_last_);     \
        sgd1_last_ = now_;                                             \
    }
#else
#define SGD1_MARK(k)
#endif

// the parameters of mlp_sgd1 and mlp_sgd1_cluster, and the same names as arguments
#define SGD1_PARAMS                                                                                          \
    const T *__restrict__ X, const T *__restrict__ Y, const long long *__restrict__ order,                  \
        const long long n_samples, const int n_in, const int n_hid, const int n_out, const int J,          \
        T *__restrict__ W1T, T *__restrict__ b1, T *__restrict__ W2, T *__restrict__ b2,                    \
        T *__restrict__ sW1a, T *__restrict__ sW1b, T *__restrict__ sb1a, T *__restrict__ sb1b,             \
        T *__restrict__ sW2a, T *__restrict__ sW2b, T *__restrict__ sb2a, T *__restrict__ sb2b,             \
        T *__restrict__ partials, unsigned long long *__restrict__ counter, double *__restrict__ loss_out,   \
        int *__restrict__ err, const double lr_d, const double mu_d, const double alpha_d,                  \
        const double beta1_d, const double beta2_d, const double eps_d, const long long t0, const int resident
#define SGD1_ARGS                                                                                            \
    X, Y, order, n_samples, n_in, n_hid, n_out, J, W1T, b1, W2, b2, sW1a, sW1b, sb1a, sb1b, sW2a, sW2b, sb2a, \
        sb2b, partials, counter, loss_out, err, lr_d, mu_d, alpha_d, beta1_d, beta2_d, eps_d, t0, resident

// The body of both: CL = 0 sums the blocks' partial outputs through global memory after the
// grid barrier; CL > 0 (the grid is one cluster of CL <= 32 blocks, compute capability 9.0)
// reads them from the other blocks' shared memory after a cluster barrier, in the same order,
// so both give the same bits.
template <typename T, int ACT, int OUT, int SOLVER, int KR, int CL>
__device__ __forceinline__ void sgd1_run(SGD1_PARAMS)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sm = reinterpret_cast<T*>(smem_raw);
    const int NW = blockDim.x >> 5;  // warps per block
    const int P = n_out + 1;          // partial outputs + sum of squared weights
    T* xbuf = sm;                       // 2 * n_in
    T* hcur = xbuf + 2 * n_in;          // J
    T* hprev = hcur + J;                // J
    T* d1 = hprev + J;                  // J
    T* contrib = d1 + J;                // NW * P
    T* b2s = contrib + NW * P;          // n_out (block-private copy of b2)
    T* b2a = b2s + n_out;               // n_out
    T* b2b = b2a + n_out;               // n_out
    T* d2 = b2b + n_out;                // n_out (delta of the previous sample)
    T* ys = d2 + n_out;                 // 2 * n_out (this sample's targets, the next one's)
    T* zs = ys + 2 * n_out;             // P
    T* csum = zs + P;                   // 2 * P (CL > 0: this block's partial outputs, by parity)
    __shared__ T lr_s;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int G = gridDim.x;
    const int j0 = blockIdx.x * J;
    const T lr0 = (T)lr_d, mu = (T)mu_d, alpha = (T)alpha_d, bt1 = (T)beta1_d, bt2 = (T)beta2_d, eps = (T)eps_d;

    // The block's own rows, rebased so that its row jj sits at jj * n_in (W1^T and its
    // state), jj * n_out (W2 and its state) and jj (b1 and its state). With resident, they
    // are copied into shared memory for the launch and written back at its end: every
    // sample then reads and writes them there instead of in L2.
    const int Jb = min(J, n_hid - j0);  // rows this block owns
    const long long o1 = (long long)j0 * n_in, o2 = (long long)j0 * n_out;
    T* w1 = W1T + o1;
    T* w1a = SOLVER >= 1 ? sW1a + o1 : nullptr;
    T* w1b = SOLVER == 3 ? sW1b + o1 : nullptr;
    T* w2 = W2 + o2;
    T* w2a = SOLVER >= 1 ? sW2a + o2 : nullptr;
    T* w2b = SOLVER == 3 ? sW2b + o2 : nullptr;
    T* v1 = b1 + j0;
    T* v1a = SOLVER >= 1 ? sb1a + j0 : nullptr;
    T* v1b = SOLVER == 3 ? sb1b + j0 : nullptr;
    T* const g_rows[9] = {w1, w1a, w1b, w2, w2a, w2b, v1, v1a, v1b};
    const long long sizes[9] = {(long long)Jb * n_in, (long long)Jb * n_in, (long long)Jb * n_in,
                                (long long)Jb * n_out, (long long)Jb * n_out, (long long)Jb * n_out,
                                Jb, Jb, Jb};
    T* s_rows[9] = {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    if (resident) {
        T* r = csum + 2 * P;
        const long long room[9] = {(long long)J * n_in, (long long)J * n_in, (long long)J * n_in,
                                   (long long)J * n_out, (long long)J * n_out, (long long)J * n_out, J, J, J};
        for (int q = 0; q < 9; ++q) {
            if (g_rows[q] == nullptr || (KR > 0 && q < 3)) continue;  // KR: W1^T's rows in registers
            s_rows[q] = r;
            r += room[q];
            for (long long i = tid; i < sizes[q]; i += blockDim.x) s_rows[q][i] = g_rows[q][i];
        }
        if (KR == 0) { w1 = s_rows[0]; w1a = s_rows[1]; w1b = s_rows[2]; }
        w2 = s_rows[3]; w2a = s_rows[4]; w2b = s_rows[5];
        v1 = s_rows[6]; v1a = s_rows[7]; v1b = s_rows[8];
        __syncthreads();
    }

    for (int c = tid; c < n_out; c += blockDim.x) {
        b2s[c] = b2[c];
        b2a[c] = SOLVER >= 1 ? sb2a[c] : (T)0;
        b2b[c] = SOLVER == 3 ? sb2b[c] : (T)0;
    }
    // KR: lane l of warp jj holds W1^T[j0 + jj, l + 32 u] (and its velocity) in wr[u] (ar[u])
    constexpr int KW = KR > 0 ? KR : 1;
    T wr[KW], ar[KW];
    if (KR > 0) {
#pragma unroll
        for (int u = 0; u < KW; ++u) {
            const int i = lane + 32 * u;
            const bool ok = warp < Jb && i < n_in;
            wr[u] = ok ? g_rows[0][(long long)warp * n_in + i] : (T)0;
            ar[u] = SOLVER >= 1 && ok ? g_rows[1][(long long)warp * n_in + i] : (T)0;
        }
    }
    double loss_acc = 0.0;
    long long row_next = n_samples > 1 ? __ldg(order + 1) : 0;  // the row of sample s + 1
#ifdef SGD1_PHASES
    long long sgd1_last_ = clock64();
#endif

    for (long long s = 0; s <= n_samples; ++s) {
        const bool prev = s > 0;
        const bool fwd = s < n_samples;
        T* xc = xbuf + (s & 1) * n_in;
        T* xp = xbuf + ((s + 1) & 1) * n_in;
        if (tid == 0) {
            if (SOLVER == 3) {  // bias-corrected rate for update number t0 + s (1-based)
                const double t = (double)(t0 + s);
                lr_s = (T)(lr_d * sqrt(1.0 - pow(beta2_d, t)) / (1.0 - pow(beta1_d, t)));
            } else {
                lr_s = lr0;
            }
        }
        if (fwd && s == 0) {  // later samples are loaded while the grid syncs (step 3)
            const long long row = __ldg(order);
            for (int i = tid; i < n_in; i += blockDim.x) xc[i] = __ldg(X + row * n_in + i);
            for (int c = tid; c < n_out; c += blockDim.x) ys[c] = __ldg(Y + row * n_out + c);
        }
        for (int c = tid; c < NW * P; c += blockDim.x) contrib[c] = (T)0;
        __syncthreads();
        SGD1_MARK(0)
        const T lr = lr_s;
        T sq = (T)0;

        // (1) W1 rows: pending update of the previous sample, hidden units of this one.
        //     MLP_UNROLL loads per lane are issued before any of them is used.
        for (int jj = warp; jj < J; jj += NW) {
            if (jj >= Jb) break;
            const long long off = (long long)jj * n_in;
            T* w = w1 + off;
            const T dj = prev ? d1[jj] : (T)0;
            T acc = (T)0;
            if (KR > 0) {  // the row in registers (jj == warp): the loop below, value for value
#pragma unroll
                for (int u = 0; u < KW; ++u) {
                    const int i = lane + 32 * u;
                    if (i < n_in) {
                        T wi = wr[u];
                        if (prev) {
                            const T g = xp[i] * dj + alpha * wi;
                            T unused = (T)0;
                            wi = opt_reg<T, SOLVER>(wi, g, ar[u], unused, lr, mu, bt1, bt2, eps);
                            wr[u] = wi;
                        }
                        sq += wi * wi;
                        acc += wi * xc[i];
                    }
                }
            }
            for (int base = 0; KR == 0 && base < n_in; base += 32 * MLP_UNROLL) {
                T wv[MLP_UNROLL], av[MLP_UNROLL], bv[MLP_UNROLL];
#pragma unroll
                for (int u = 0; u < MLP_UNROLL; ++u) {
                    const int i = base + lane + 32 * u;
                    const bool ok = i < n_in;
                    wv[u] = ok ? w[i] : (T)0;
                    av[u] = (SOLVER >= 1 && prev && ok) ? w1a[off + i] : (T)0;
                    bv[u] = (SOLVER == 3 && prev && ok) ? w1b[off + i] : (T)0;
                }
#pragma unroll
                for (int u = 0; u < MLP_UNROLL; ++u) {
                    const int i = base + lane + 32 * u;
                    if (i < n_in) {
                        T wi = wv[u];
                        if (prev) {
                            const T g = xp[i] * dj + alpha * wi;
                            wi = opt_reg<T, SOLVER>(wi, g, av[u], bv[u], lr, mu, bt1, bt2, eps);
                            w[i] = wi;
                            if (SOLVER >= 1) w1a[off + i] = av[u];
                            if (SOLVER == 3) w1b[off + i] = bv[u];
                        }
                        sq += wi * wi;
                        acc += wi * xc[i];
                    }
                }
            }
            acc = wsum(acc);
            if (lane == 0) {
                T bj = v1[jj];
                if (prev) {
                    bj = opt_step<T, SOLVER>(bj, dj, v1a, v1b, (long long)jj, lr, mu, bt1, bt2, eps);
                    v1[jj] = bj;
                }
                hprev[jj] = hcur[jj];
                hcur[jj] = act_fn<T>(acc + bj, ACT);
            }
        }
        __syncwarp();
        // (2) W2 rows: pending update, partial output sums for this sample
        for (int jj = warp; jj < J; jj += NW) {
            if (jj >= Jb) break;
            const T hp = hprev[jj], hc = hcur[jj];
            for (int c = lane; c < n_out; c += 32) {
                const long long k = (long long)jj * n_out + c;
                T w = w2[k];
                if (prev) {
                    const T g = hp * d2[c] + alpha * w;
                    w = opt_step<T, SOLVER>(w, g, w2a, w2b, k, lr, mu, bt1, bt2, eps);
                    w2[k] = w;
                }
                sq += w * w;
                contrib[warp * P + c] += w * hc;
            }
        }
        // b2 (every block keeps the same copy)
        if (prev) {
            for (int c = tid; c < n_out; c += blockDim.x) {
                b2s[c] = opt_step<T, SOLVER>(b2s[c], d2[c], b2a, b2b, (long long)c, lr, mu, bt1, bt2, eps);
            }
        }
        sq = wsum(sq);
        if (lane == 0) contrib[warp * P + n_out] += sq;
        __syncthreads();
        SGD1_MARK(1)
        if (!fwd) break;

        // (3) block partials -> grid-wide sum in a fixed order
        const int par = (int)(s & 1);
        T* part = partials + (long long)par * G * P;
        T* mine = csum + par * P;
        for (int c = tid; c < P; c += blockDim.x) {
            T v = (T)0;
            for (int w8 = 0; w8 < NW; ++w8) v += contrib[w8 * P + c];
            if (CL > 0) {
                mine[c] = v;  // read by every block of the cluster
            } else {
                part[(long long)c * G + blockIdx.x] = v;  // by output, then block: read coalesced below
            }
        }
        if (s + 1 < n_samples) {  // the next sample's row and targets, copied while the grid syncs
            // (cp.async: waited for before the barrier that ends this sample); its buffers held
            // the previous sample's, read for the last time in (1). Its row index was read one
            // sample ahead.
            T* xn = xbuf + ((s + 1) & 1) * n_in;
            T* yn = ys + ((s + 1) & 1) * n_out;
            for (int i = tid; i < n_in; i += blockDim.x) cp_async_value(xn + i, X + row_next * n_in + i);
            for (int c = tid; c < n_out; c += blockDim.x) cp_async_value(yn + c, Y + row_next * n_out + c);
            row_next = s + 2 < n_samples ? __ldg(order + s + 2) : 0;
        }
        SGD1_MARK(2)
        if (CL > 0) {
            // the buffer of this parity is written again two samples on, after the next
            // cluster barrier, which no block passes before every block has read it here
            cluster_arrive_release();
            cluster_wait_acquire();
            SGD1_MARK(3)
            for (int c = warp; c < P; c += NW) {  // lane b: block b's partial, then the warp's sum
                T v = lane < CL ? cluster_load(mine + c, (unsigned)lane) : (T)0;
                v = wsum(v);
                if (lane == 0) zs[c] = c < n_out ? v + b2s[c] : v;
            }
        } else {
        if (!grid_barrier(counter, err)) return;  // timed out: the host raises
        SGD1_MARK(3)
        for (int c = warp; c < P; c += NW) {  // a lane's blocks lane, lane + 32, ...: all loads first
            T r[5];
#pragma unroll
            for (int i = 0; i < 5; ++i) r[i] = lane + 32 * i < G ? __ldcg(part + (long long)c * G + lane + 32 * i) : (T)0;
            T v = (T)0;
#pragma unroll
            for (int i = 0; i < 5; ++i) {
                if (lane + 32 * i < G) v += r[i];
            }
            for (int b = lane + 160; b < G; b += 32) v += __ldcg(part + (long long)c * G + b);
            v = wsum(v);
            if (lane == 0) zs[c] = c < n_out ? v + b2s[c] : v;
        }
        }
        __syncthreads();
        SGD1_MARK(4)
        // (4) output activation, loss, output delta (warp 0; each lane keeps its share of the loss)
        if (warp == 0) {
            loss_acc += out_loss_delta_warp<T, OUT>(zs, ys + (s & 1) * n_out, d2, n_out, lane);
            if (lane == 0) loss_acc += 0.5 * alpha_d * (double)zs[n_out];
        }
        __syncthreads();
        SGD1_MARK(5)
        // (5) hidden deltas of this sample for the block's own units (W2 not yet updated)
        for (int jj = warp; jj < J; jj += NW) {
            if (jj >= Jb) break;
            T acc = (T)0;
            for (int c = lane; c < n_out; c += 32) acc += w2[(long long)jj * n_out + c] * d2[c];
            acc = wsum(acc);
            if (lane == 0) d1[jj] = acc * act_grad<T>(hcur[jj], ACT);
        }
        cp_async_wait_all();  // the next sample's row and targets, before the barrier
        __syncthreads();
        SGD1_MARK(6)
    }
    if (CL > 0) {  // no block leaves while another may still read its partial outputs
        cluster_arrive_release();
        cluster_wait_acquire();
    }
    if (KR > 0 && warp < Jb) {
#pragma unroll
        for (int u = 0; u < KW; ++u) {
            const int i = lane + 32 * u;
            if (i < n_in) {
                g_rows[0][(long long)warp * n_in + i] = wr[u];
                if (SOLVER >= 1) g_rows[1][(long long)warp * n_in + i] = ar[u];
            }
        }
    }
    if (resident) {  // the block's rows back to global memory
        __syncthreads();
        for (int q = 0; q < 9; ++q) {
            if (s_rows[q] == nullptr) continue;
            for (long long i = tid; i < sizes[q]; i += blockDim.x) g_rows[q][i] = s_rows[q][i];
        }
    }
    if (blockIdx.x == 0) {
        for (int c = tid; c < n_out; c += blockDim.x) {
            b2[c] = b2s[c];
            if (SOLVER >= 1) sb2a[c] = b2a[c];
            if (SOLVER == 3) sb2b[c] = b2b[c];
        }
        if (warp == 0) {
            const double total = wsum_all(loss_acc);  // the lanes' shares of every sample's loss
            if (lane == 0) loss_out[0] = total;
        }
    }
}

template <typename T, int ACT, int OUT, int SOLVER, int KR>
__global__ void __launch_bounds__(512) mlp_sgd1(SGD1_PARAMS)
{
    sgd1_run<T, ACT, OUT, SOLVER, KR, 0>(SGD1_ARGS);
}

// mlp_sgd1 as one cluster of CL blocks (the whole grid): a hardware cluster barrier and the
// other blocks' shared memory instead of the grid barrier and L2. Compute capability 9.0
// (older targets do not accept __cluster_dims__; the host never asks for it there).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
template <typename T, int ACT, int OUT, int SOLVER, int KR, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(512) mlp_sgd1_cluster(SGD1_PARAMS)
{
    sgd1_run<T, ACT, OUT, SOLVER, KR, CL>(SGD1_ARGS);
}
#endif

// ------------------------------------------------------------------ minibatch helpers
// Sum v over the block (red: blockDim.x doubles of shared memory, blockDim.x a power of
// two) in a fixed tree order, and add the block's total to *out.
__device__ __forceinline__ void block_add(const double v, double* red, double* out)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int off = blockDim.x / 2; off > 0; off >>= 1) {
        if ((int)threadIdx.x < off) red[threadIdx.x] += red[threadIdx.x + off];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, red[0]);
}

// Z (rows, cols) += b, then the hidden activation, in place.
template <typename T, int ACT>
__global__ void bias_act(T* __restrict__ Z, const T* __restrict__ b, const long long rows, const long long cols)
{
    const long long total = rows * cols;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (long long)gridDim.x * blockDim.x) {
        Z[k] = act_fn<T>(Z[k] + b[k % cols], ACT);
    }
}

// One thread per row: Z += b, output activation, loss (summed into *loss, double),
// then Z := probabilities - Y (the output delta). With store_prob, P gets the probabilities.
template <typename T, int OUT>
__global__ void out_delta(T* __restrict__ Z, const T* __restrict__ b, const T* __restrict__ Y,
                          const long long rows, const int cols, double* __restrict__ loss)
{
    __shared__ double red[256];
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    double l = 0.0;
    if (r < rows) {
        T* z = Z + r * cols;
        l = out_loss_delta<T, OUT, true>(z, b, Y + r * cols, z, cols);
    }
    block_add(l, red, loss);
}

// out_delta with sample weights w (rows): the delta of row r is w[r] * (p - y) and its
// loss counts w[r] * loss_scale times (loss_scale = rows / sum of the batch's weights,
// so *loss gets the batch's weighted mean loss times its size, as scikit-learn sums it).
template <typename T, int OUT>
__device__ __forceinline__ void weighted_out_delta(T* __restrict__ Z, const T* __restrict__ b,
                                                   const T* __restrict__ Y, const T* __restrict__ w,
                                                   const long long rows, const int cols,
                                                   const double loss_scale, double* __restrict__ loss)
{
    __shared__ double red[256];
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    double l = 0.0;
    if (r < rows) {
        T* z = Z + r * cols;
        const T wr = w[r];
        l = out_loss_delta<T, OUT, true>(z, b, Y + r * cols, z, cols) * ((double)wr * loss_scale);
        for (int c = 0; c < cols; ++c) z[c] *= wr;
    }
    block_add(l, red, loss);
}

template <typename T, int OUT>
__global__ void out_delta_w(T* __restrict__ Z, const T* __restrict__ b, const T* __restrict__ Y,
                            const T* __restrict__ w, const long long rows, const int cols,
                            const double loss_scale, double* __restrict__ loss)
{
    weighted_out_delta<T, OUT>(Z, b, Y, w, rows, cols, loss_scale, loss);
}

// Prediction's last layer, one thread per row: Z += b, then the output activation in
// place (softmax: the row's maximum subtracted, exp, divided by the row's sum).
template <typename T, int OUT>
__global__ void bias_out(T* __restrict__ Z, const T* __restrict__ b, const long long rows, const int cols)
{
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    T* z = Z + r * cols;
    if (OUT == 0) {
        T mx = z[0] + b[0];
        for (int c = 1; c < cols; ++c) { const T v = z[c] + b[c]; mx = v > mx ? v : mx; }
        T tot = (T)0;
        for (int c = 0; c < cols; ++c) { const T e = exp(z[c] + b[c] - mx); z[c] = e; tot += e; }
        for (int c = 0; c < cols; ++c) z[c] /= tot;
    } else {
        for (int c = 0; c < cols; ++c) z[c] = (T)1 / ((T)1 + exp(-(z[c] + b[c])));
    }
}

// Prediction's hidden layers: Z (rows, cols) += b, then the activation, in place. Block
// (x, y) covers columns [x * blockDim.x, (x + 1) * blockDim.x) of rows y, y + gridDim.y, ...
// (no division by cols per value). With flag not null, a value of Z that is not finite
// (before the bias) sets *flag: the caller's check of the input, since every product of a
// row holding NaN or infinity is itself NaN or infinite.
template <typename T, int ACT>
__global__ void bias_act_rows(T* __restrict__ Z, const T* __restrict__ b, const long long rows, const int cols,
                              int* __restrict__ flag)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    bool bad = false;
    if (c < cols) {
        const T bc = b[c];
        for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
            T* p = Z + r * cols + c;
            const T z = *p;
            bad |= !isfinite(z);
            *p = act_fn<T>(z + bc, ACT);
        }
    }
    if (flag != nullptr && __any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *flag = 1;
}

template <typename T, int N> struct VecLoad;
template <> struct VecLoad<float, 1> { static __device__ __forceinline__ void f(float* r, const float* p) { r[0] = p[0]; } };
template <> struct VecLoad<float, 2> {
    static __device__ __forceinline__ void f(float* r, const float* p)
    { const float2 v = *reinterpret_cast<const float2*>(p); r[0] = v.x; r[1] = v.y; }
};
template <> struct VecLoad<float, 4> {
    static __device__ __forceinline__ void f(float* r, const float* p)
    { const float4 v = *reinterpret_cast<const float4*>(p); r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w; }
};
template <> struct VecLoad<double, 1> { static __device__ __forceinline__ void f(double* r, const double* p) { r[0] = p[0]; } };
template <> struct VecLoad<double, 2> {
    static __device__ __forceinline__ void f(double* r, const double* p)
    { const double2 v = *reinterpret_cast<const double2*>(p); r[0] = v.x; r[1] = v.y; }
};

// V = 16 / sizeof(T) consecutive values p[0 .. V) into r: one 16-byte load when VEC (p
// 16-byte aligned and all V inside), else value by value, zero from p[left] on
template <typename T, int V, bool VEC>
__device__ __forceinline__ void load_cols(T* r, const T* __restrict__ p, const int left)
{
    if (VEC) {
        VecLoad<T, V>::f(r, p);
    } else {
#pragma unroll
        for (int v = 0; v < V; ++v) r[v] = v < left ? p[v] : (T)0;
    }
}


// Prediction's output layer, fused with the last hidden layer's bias and activation. Warp w
// takes rows [R w, R w + R) of Z (rows, H: the last hidden layer's products before their
// bias) and reads each once: lane l takes V = 16 / sizeof(T) consecutive columns at a time
// (columns c = V l + 32 V j .. c + V - 1, j = 0, 1, ...), one 16-byte read a row when VEC (H
// a multiple of V; Z and b1 16-byte aligned), applies b1 and the activation, and multiplies
// them by the same rows of the output coefficients W2 (H, O): O columns, the layer's
// n_out and zeros after them (out_weights), so that a row of them is O / WV vector reads
// with no arithmetic on addresses, read through L1 (which every warp of the SM shares) once
// for the warp's R rows: a value of Z costs O FMAs and O / (WV R) reads of coefficients.
// Then the sums across the warp (every lane gets them); lane k writes output k of each row
// (b2 added, the output activation) to P (rows, n_out). flag: as for bias_act_rows, on the
// values of Z.
template <typename T, int ACT, int OUT, int O, int R, bool VEC>
__global__ void __launch_bounds__(256) out_fused(const T* __restrict__ Z, const T* __restrict__ b1,
                                                 const T* __restrict__ W2, const T* __restrict__ b2,
                                                 T* __restrict__ P, const long long rows, const int H,
                                                 const int n_out, int* __restrict__ flag)
{
    constexpr int V = 16 / sizeof(T);
    // values of a vector read of a row of W2 (O of them, a multiple of WV)
    constexpr int WV = (O * sizeof(T)) % 16 == 0 ? 16 / sizeof(T) : ((O * sizeof(T)) % 8 == 0 ? 8 / sizeof(T) : 1);
    const int lane = threadIdx.x & 31;
    const long long r0 = (((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * R;
    if (r0 >= rows) return;  // the whole warp: no barrier follows
    T acc[R][O];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int k = 0; k < O; ++k) acc[r][k] = (T)0;
    }
    T chk = (T)0;  // becomes NaN once a value of Z read is not finite (x * 0 is NaN then)
    for (int c = V * lane; c < H; c += 32 * V) {
        T a[R][V], bv[V];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r0 + r < rows) {
                load_cols<T, V, VEC>(a[r], Z + (r0 + r) * H + c, H - c);
            } else {
#pragma unroll
                for (int v = 0; v < V; ++v) a[r][v] = (T)0;
            }
        }
        load_cols<T, V, VEC>(bv, b1 + c, H - c);
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                chk = fma(a[r][v], (T)0, chk);
                a[r][v] = (VEC || c + v < H) ? act_fn<T>(a[r][v] + bv[v], ACT) : (T)0;
            }
        }
#pragma unroll
        for (int v = 0; v < V; ++v) {
            if (VEC || c + v < H) {
                T w[O];
                const T* wr = W2 + (long long)(c + v) * O;
#pragma unroll
                for (int q = 0; q < O; q += WV) VecLoad<T, WV>::f(w + q, wr + q);
#pragma unroll
                for (int r = 0; r < R; ++r) {
#pragma unroll
                    for (int k = 0; k < O; ++k) acc[r][k] += a[r][v] * w[k];
                }
            }
        }
    }
    if (flag != nullptr && __any_sync(0xffffffffu, chk != chk) && lane == 0) *flag = 1;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        T mine = (T)0;  // this lane's output's sum
#pragma unroll
        for (int k = 0; k < O; ++k) {
            const T t = wsum_all(acc[r][k]);
            mine = lane == k ? t : mine;
        }
        if (r0 + r >= rows) break;  // the same for the whole warp
        const bool own = lane < n_out;
        const T z = own ? mine + b2[lane] : (T)0;
        const T z0 = __shfl_sync(0xffffffffu, z, 0);  // every lane: lane 0 owns an output
        T p;
        if (OUT == 0) {
            const T mx = wmax_all(own ? z : z0);
            const T e = own ? exp(z - mx) : (T)0;
            p = e / wsum_all(e);
        } else {
            p = (T)1 / ((T)1 + exp(-z));
        }
        if (own) P[(r0 + r) * n_out + lane] = p;
    }
}

// D *= f'(H) elementwise (H is the hidden activation output).
template <typename T, int ACT>
__global__ void act_deriv(T* __restrict__ D, const T* __restrict__ H, const long long total)
{
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (long long)gridDim.x * blockDim.x) {
        D[k] = D[k] * act_grad<T>(H[k], ACT);
    }
}

// All parameters live in one flat buffer W (coefficients first, n_coef of them, then
// intercepts); G holds the raw gradients (A^T delta and column sums of delta). The
// effective gradient is g = G * inv_b + (k < n_coef ? alpha * inv_b * W : 0).
// Before updating, the sum of squared coefficients (the L2 term of the loss) is added
// to *sumsq.
// The block's share of the update; returns its sum of squared coefficients.
template <typename T, int SOLVER>
__device__ __forceinline__ double update_share(T* __restrict__ W, const T* __restrict__ G, T* __restrict__ SA,
                                               T* __restrict__ SB, const long long total, const long long n_coef,
                                               const T inv_b, const T alpha, const T lr, const T mu, const T b1,
                                               const T b2, const T eps)
{
    double sq = 0.0;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (long long)gridDim.x * blockDim.x) {
        const T w = W[k];
        T g = G[k] * inv_b;
        if (k < n_coef) {
            g += alpha * inv_b * w;
            sq += (double)w * (double)w;
        }
        W[k] = opt_step<T, SOLVER>(w, g, SA, SB, k, lr, mu, b1, b2, eps);
    }
    return sq;
}

template <typename T, int SOLVER>
__global__ void params_update(T* __restrict__ W, const T* __restrict__ G, T* __restrict__ SA, T* __restrict__ SB,
                              const long long total, const long long n_coef, const T inv_b, const T alpha,
                              const T lr, const T mu, const T b1, const T b2, const T eps,
                              double* __restrict__ sumsq)
{
    __shared__ double red[256];
    const double sq = update_share<T, SOLVER>(W, G, SA, SB, total, n_coef, inv_b, alpha, lr, mu, b1, b2, eps);
    block_add(sq, red, sumsq);
}

// ------------------------------------------------------------------ graph-replayed steps
#define STEP_TAB 4

// Block r copies row order[step * bs + r] of X, Y (and w) into row r of Xb, Yb (wb).
template <typename T>
__global__ void gather_batch(const T* __restrict__ X, const T* __restrict__ Y, const T* __restrict__ w,
                             const long long* __restrict__ order, const long long* __restrict__ step,
                             const long long bs, const int rows, const int n_in, const int n_out,
                             T* __restrict__ Xb, T* __restrict__ Yb, T* __restrict__ wb)
{
    const int r = blockIdx.x;
    if (r >= rows) return;
    const long long src = order[step[0] * bs + r];
    const T* x = X + src * n_in;
    T* xb = Xb + (long long)r * n_in;
    for (int i = threadIdx.x; i < n_in; i += blockDim.x) xb[i] = x[i];
    for (int c = threadIdx.x; c < n_out; c += blockDim.x) Yb[(long long)r * n_out + c] = Y[src * n_out + c];
    if (w != nullptr && threadIdx.x == 0) wb[r] = w[src];
}

// out_delta_w with the loss scale of this step (tab[step][2]).
template <typename T, int OUT>
__global__ void out_delta_w_step(T* __restrict__ Z, const T* __restrict__ b, const T* __restrict__ Y,
                                 const T* __restrict__ w, const long long rows, const int cols,
                                 const double* __restrict__ tab, const long long* __restrict__ step,
                                 double* __restrict__ loss)
{
    weighted_out_delta<T, OUT>(Z, b, Y, w, rows, cols, tab[step[0] * STEP_TAB + 2], loss);
}

// params_update with this step's learning rate, 1/B and squared-weight scale from tab
// (cast to T here as the per-step launch casts them on the host: both round to nearest).
template <typename T, int SOLVER>
__global__ void params_update_step(T* __restrict__ W, const T* __restrict__ G, T* __restrict__ SA,
                                   T* __restrict__ SB, const long long total, const long long n_coef,
                                   const double* __restrict__ tab, const long long* __restrict__ step,
                                   const T alpha, const T mu, const T b1, const T b2, const T eps,
                                   double* __restrict__ sumsq)
{
    __shared__ double red[256];
    const double* t = tab + step[0] * STEP_TAB;
    const T lr = (T)t[0], inv_b = (T)t[1];
    const double sq = update_share<T, SOLVER>(W, G, SA, SB, total, n_coef, inv_b, alpha, lr, mu, b1, b2, eps);
    block_add(sq * t[3], red, sumsq);
}

extern "C" __global__ void step_advance(long long* __restrict__ step)
{
    step[0] += 1;
}

// ---------------------------------------------------------------- fused tails' output
// The output layer of a block's BM rows from their last hidden activations Hs (BM, LDH) in
// shared memory: the logits L = Hs W2 + b2 (W2s (H, O) in shared memory; four running sums
// a logit) into Ls (BM, O), the output activation (OUT) there, then rows [row0, row0 + BM)
// of P (rows, O), consecutive threads on consecutive outputs. All NTHR threads of the block
// call it after a barrier that follows the writes of Hs and W2s.
template <typename T, int OUT, int NTHR>
__device__ __forceinline__ void tail_output(const T* Hs, const int LDH, const T* W2s, const T* __restrict__ b2,
                                            T* Ls, T* __restrict__ P, const long long row0, const long long rows,
                                            const int BM, const int H, const int O)
{
    const int tid = threadIdx.x;
    for (int e = tid; e < BM * O; e += NTHR) {
        const int r = e / O, o = e - r * O;
        const T* h = Hs + r * LDH;
        T z[4] = {(T)0, (T)0, (T)0, (T)0};
        int c = 0;
        for (; c + 4 <= H; c += 4) {
#pragma unroll
            for (int q = 0; q < 4; ++q) z[q] += h[c + q] * W2s[(c + q) * O + o];
        }
        for (; c < H; ++c) z[0] += h[c] * W2s[c * O + o];
        Ls[e] = b2[o] + ((z[0] + z[1]) + (z[2] + z[3]));
    }
    __syncthreads();
    if (OUT == 0) {
        if (tid < BM) {
            T* l = Ls + tid * O;
            T mx = l[0];
            for (int o = 1; o < O; ++o) mx = l[o] > mx ? l[o] : mx;
            T tot = (T)0;
            for (int o = 0; o < O; ++o) { l[o] = exp(l[o] - mx); tot += l[o]; }
            for (int o = 0; o < O; ++o) l[o] = l[o] / tot;
        }
    } else {
        for (int e = tid; e < BM * O; e += NTHR) Ls[e] = (T)1 / ((T)1 + exp(-Ls[e]));
    }
    __syncthreads();
    const long long valid = rows - row0 < BM ? rows - row0 : BM;
    for (int e = tid; e < valid * O; e += NTHR) P[row0 * O + e] = Ls[e];
}

// ---------------------------------------------------------------- tail_fused
// Prediction's last hidden layer and output layer in one launch, for a last hidden layer of
// H <= HP units (HP = 32, 64 or 128) and O <= 32 outputs: no cuBLAS call, no product
// in memory. Block b takes rows [BM b, BM b + BM), BM = 16 TM, of A (rows, K): X itself, or
// (IN_ACT >= 0) the previous hidden layer's products before its bias bin and activation
// IN_ACT, which are applied as A is read. 512 threads in two groups of 256 that split the
// K chunks (of BK columns) between them, even and odd; a group is 16 x 16 threads, thread
// (ty, tx) owning rows ty*TM .. ty*TM+TM-1 and the columns j*16*VN + tx*VN + q (interleaved
// so that the vector loads of a row of W by a warp's threads are contiguous). Each group keeps
// its A chunk transposed (k, row) and its W chunk (W (K, H) row-major) in two shared
// buffers: the next chunk is read into registers while this one is multiplied, and
// checked / transformed only when stored. The second group's sums are then added to the
// first's through shared memory, H = act(Z + b) is stored there, and the logits
// L = H W2 + b2 (W2 (H, O) row-major, copied to shared memory) go through the output
// activation to P (rows, O), consecutive threads on consecutive outputs. The host picks TM
// so that the blocks fill the SMs once where it can (one block of 512 threads an SM).
// With flag not null, a value of A that is not finite (before bin) sets *flag.
// Dynamic shared memory, in values of T: the largest of 4 BK LDA + 4 BK HP (the product),
// 256 TM TN (the second group's sums) and BM (HP + 1) + H O + BM O (the output).
#define TAIL_BK 16  // the A chunk's mapping to threads (t / BK + 16 i) assumes 16
template <typename T, int IN_ACT, int ACT, int OUT, int HP, int TM>
__global__ void __launch_bounds__(512, 1) tail_fused(const T* __restrict__ A, const T* __restrict__ bin,
                                                     const T* __restrict__ W, const T* __restrict__ b,
                                                     const T* __restrict__ W2, const T* __restrict__ b2,
                                                     T* __restrict__ P, const long long rows, const int K,
                                                     const int H, const int O, int* __restrict__ flag)
{
    constexpr int BK = TAIL_BK, BM = 16 * TM, TN = HP / 16;
    constexpr int VB = 16 / (int)sizeof(T);  // values in 16 bytes
    constexpr int VM = TM % VB == 0 ? VB : (TM % 2 == 0 ? 2 : 1), VN = TN < VB ? TN : VB;
    constexpr int LDA = (BM + VB - 1) / VB * VB + VB;  // a row of a transposed A chunk (16-byte aligned)
    constexpr int W_PER = BK * HP / 256;  // values of W each thread moves (of A: TM)
    extern __shared__ __align__(16) unsigned char tail_raw[];
    T* sh = reinterpret_cast<T*>(tail_raw);
    // a warp is 8 x 4 threads (rows x columns) and a group 2 x 4 warps, so that a warp's
    // loads of its A values and of its W values each read at most 128 contiguous bytes
    const int g = threadIdx.x >> 8, tid = threadIdx.x & 255, lane = tid & 31, wid = tid >> 5;
    const int ty = (wid >> 2) * 8 + (lane >> 2), tx = (wid & 3) * 4 + (lane & 3);
    T* As = sh + g * 2 * BK * LDA;                  // group g: [2][BK][LDA]
    T* Ws = sh + 4 * BK * LDA + g * 2 * BK * HP;    // group g: [2][BK][HP]
    const long long row0 = (long long)blockIdx.x * BM;
    bool bad = false;

    // a chunk's values into registers (thread t of a group: rows t / BK + 16 i, column
    // t % BK of A, coalesced along the rows), nothing else: whatever uses them waits for
    // store, after this chunk's products
    T ra[TM], rw[W_PER], rb = (T)0;
    auto load = [&](int k0) {
        const int k = k0 + tid % BK;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const long long gr = row0 + tid / BK + 16 * i;
            ra[i] = (gr < rows && k < K) ? A[gr * K + k] : (T)0;
        }
        if (IN_ACT >= 0) rb = k < K ? bin[k] : (T)0;
#pragma unroll
        for (int i = 0; i < W_PER; ++i) {
            const int e = tid + 256 * i, kw = k0 + e / HP, c = e % HP;
            rw[i] = (kw < K && c < H) ? W[(long long)kw * H + c] : (T)0;
        }
    };
    auto store = [&](int buf, int k0) {
        T* as = As + buf * BK * LDA;
        T* ws = Ws + buf * BK * HP;
        const bool kin = k0 + tid % BK < K;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            T v = ra[i];
            if (flag != nullptr) bad |= !isfinite(v);
            if (IN_ACT >= 0 && kin && row0 + tid / BK + 16 * i < rows) v = act_fn<T>(v + rb, IN_ACT);
            as[(tid % BK) * LDA + tid / BK + 16 * i] = v;
        }
#pragma unroll
        for (int i = 0; i < W_PER; ++i) ws[tid + 256 * i] = rw[i];
    };

    T acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = (T)0;
    }
    const int steps = ((K + BK - 1) / BK + 1) / 2;  // chunks a group takes (the last may be empty)
    load(g * BK);
    store(0, g * BK);
    __syncthreads();
    for (int s = 0; s < steps; ++s) {
        const int buf = s & 1, knext = (2 * (s + 1) + g) * BK;
        if (s + 1 < steps) load(knext);
        const T* as = As + buf * BK * LDA + ty * TM;
        const T* ws = Ws + buf * BK * HP + tx * VN;
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            T a[TM], w[TN];
#pragma unroll
            for (int i = 0; i < TM; i += VM) VecLoad<T, VM>::f(a + i, as + kk * LDA + i);
#pragma unroll
            for (int j = 0; j < TN; j += VN) VecLoad<T, VN>::f(w + j, ws + kk * HP + j * 16);
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * w[j];
            }
        }
        if (s + 1 < steps) store(buf ^ 1, knext);
        __syncthreads();
    }
    if (flag != nullptr && __any_sync(0xffffffffu, bad) && (tid & 31) == 0) *flag = 1;

    // the second group's sums to the first (each thread's own positions: no bank conflicts)
    T* R = sh;  // [TM * TN][256]
    if (g == 1) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
#pragma unroll
            for (int j = 0; j < TN; ++j) R[(i * TN + j) * 256 + tid] = acc[i][j];
        }
    }
    __syncthreads();
    if (g == 0) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += R[(i * TN + j) * 256 + tid];
        }
    }
    __syncthreads();

    constexpr int LDH = HP + 1;
    T* Hs = sh;                 // [BM][LDH]
    T* W2s = Hs + BM * LDH;     // [H][O]
    T* Ls = W2s + H * O;        // [BM][O]: logits, then the outputs
    if (g == 0) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = (j / VN) * 16 * VN + tx * VN + (j % VN);
            const T bc = c < H ? b[c] : (T)0;
#pragma unroll
            for (int i = 0; i < TM; ++i) Hs[(ty * TM + i) * LDH + c] = c < H ? act_fn<T>(acc[i][j] + bc, ACT) : (T)0;
        }
    } else {
        for (int e = tid; e < H * O; e += 256) W2s[e] = W2[e];
    }
    __syncthreads();
    tail_output<T, OUT, 512>(Hs, LDH, W2s, b2, Ls, P, row0, rows, BM, H, O);
}

// ---------------------------------------------------------------- tensor-core helpers
// float32 products on tensor cores to float32 accuracy: each product a w is taken as the
// three TF32 products a_s w_b + a_b w_s + a_b w_b, where x_b = tf32(x) (rounded to nearest,
// ties away) and x_s = tf32(x - x_b), summed in float32 by mma.sync m16n8k8 (the "3xTF32"
// split: the dropped a_s w_s is below float32's rounding).
__device__ __forceinline__ unsigned tf32_round(const float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// four (two) 8 x 4 tiles of 32-bit values from shared memory, lane l giving the address of
// row l % 8 of tile l / 8; lane l gets element (l / 4, l % 4) of each tile: the A and B
// fragments of mma m16n8k8 TF32 (A by rows, B by columns)
__device__ __forceinline__ void ldsm_x4(unsigned* d, const unsigned* p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a)
                 : "memory");
}

// ---------------------------------------------------------------- dense_tc
// A hidden layer on tensor cores to float32 accuracy (the 3xTF32 split above): the product
// Z = A (rows, K) W (K, N), then
//  - OUT < 0 (a layer whose values stay in memory): ACT >= 0 writes act(Z + b) to Out
//    (rows, N); ACT < 0 writes the product alone (the kernel after it applies b and the
//    activation as it reads it);
//  - OUT >= 0 (the last hidden layer, N <= BN, with the output layer, as tail_fused):
//    H = act(Z + b) stays in shared memory and the output layer (W2 (N, O), b2, the output
//    activation OUT) writes Out (rows, O).
// W comes split already: Wp (2, Np, Kp) words, the TF32 halves of W by columns, zero padded
// to Np (a multiple of BN = 128) columns of Kp (a multiple of BK = 32) values
// (pack_tc_weights). Block i of the 1-D grid takes column tile i % (Np / BN) and row tile
// i / (Np / BN) (BM rows): consecutive blocks share their rows of A, read from DRAM once.
// 256 threads, 2 x 4 warps: warp (wm, wn) owns rows BM / 2 wm .. + BM / 2 (MT = BM / 32
// tiles of 16) and columns 32 wn .. + 32 (NT = 4 tiles of 8) of the tile. K in chunks of
// BK: the next chunk is read into registers while this one is multiplied, then checked
// (flag), split and stored into the other of two shared buffers (one barrier a chunk). A is
// read in 16-byte vectors when VEC (K a multiple of 4, A 16-byte aligned). The buffers' rows
// are LDA = BK + 4 words, so that ldmatrix reads the fragments (four 8 x 4 tiles a lane
// group) without bank conflicts. With
// flag not null, a value of A that is not finite sets *flag. The host picks BM (64, 96 or
// 128) by how evenly the blocks fill the SMs. Dynamic shared memory, in 4-byte words: the
// larger of 4 (BM + BN) LDA (two stages) and, with OUT >= 0, BM (BN + 1) + N O + BM O.
template <int BM, int ACT, int OUT, bool VEC>
__global__ void __launch_bounds__(256, 1) dense_tc(const float* __restrict__ A, const uint4* __restrict__ Wp,
                                                   const float* __restrict__ b, const float* __restrict__ W2,
                                                   const float* __restrict__ b2, float* __restrict__ Out,
                                                   const long long rows, const int K, const int N, const int Np,
                                                   const int O, int* __restrict__ flag)
{
#if __CUDA_ARCH__ >= 800
    constexpr int BN = 128, WN = 4, BK = 32, LDA = BK + 4;
    constexpr int MT = BM / 32, NT = 4;
    static_assert(BM % 32 == 0, "dense_tc: BM a multiple of 32");
    constexpr int AV = BM * BK / 4 / 256;  // A's 4-value groups a thread moves (VEC)
    constexpr int AS = BM * BK / 256;      // A's values a thread moves (not VEC)
    constexpr int WQ = BN * BK / 4;        // 16-byte pieces of one half of a W chunk
    constexpr int WV = 2 * WQ / 256;       // of both halves, a thread
    constexpr int STAGE = 2 * (BM + BN) * LDA;
    extern __shared__ __align__(16) unsigned char tc_raw[];
    unsigned* const smem = reinterpret_cast<unsigned*>(tc_raw);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
    const int wm = warp / WN, wn = warp - wm * WN;
    const int ntiles = Np / BN;
    const int col0 = (int)(blockIdx.x % ntiles) * BN;
    const long long row0 = (long long)(blockIdx.x / ntiles) * BM;
    const long long kp4 = (K + BK - 1) / BK * (BK / 4);  // Kp / 4: a column of Wp in 16-byte pieces
    float chk = 0.0f;  // becomes NaN once a value read is not finite (x * 0 is NaN then)

    // VEC: group e = tid + 256 i of a chunk is row e / 8, columns 4 (e % 8) .. + 3 (the same
    // columns for every i); else value e is row e / BK, column e % BK = lane
    float4 ra4[VEC ? AV : 1];
    float ra[VEC ? 1 : AS];
    uint4 rw[WV];
    const int kc = VEC ? 4 * (tid & 7) : lane;
    auto load = [&](int k0) {
        const bool kin = k0 + kc < K;
        if (VEC) {
#pragma unroll
            for (int i = 0; i < AV; ++i) {
                const long long gr = row0 + (tid >> 3) + 32 * i;
                ra4[i] = (kin && gr < rows) ? *reinterpret_cast<const float4*>(A + gr * K + k0 + kc)
                                            : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        } else {
#pragma unroll
            for (int i = 0; i < AS; ++i) {
                const long long gr = row0 + (tid >> 5) + 8 * i;
                ra[i] = (kin && gr < rows) ? A[gr * K + k0 + kc] : 0.0f;
            }
        }
        // piece e: half e / WQ, column q / 8 of the tile, values 4 (q % 8) .. + 3 (q = e % WQ)
#pragma unroll
        for (int i = 0; i < WV; ++i) {
            const int e = tid + 256 * i, h = e / WQ, q = e - h * WQ;
            rw[i] = Wp[((long long)h * Np + col0 + (q >> 3)) * kp4 + (k0 >> 2) + (q & 7)];
        }
    };
    auto split = [&](const float v, unsigned& hi, unsigned& lo) {
        if (flag != nullptr) chk = fmaf(v, 0.0f, chk);
        hi = tf32_round(v);
        lo = tf32_round(v - __uint_as_float(hi));
    };
    auto store = [&](unsigned* Ab) {
        unsigned* As = Ab + BM * LDA;
        unsigned* Wb = As + BM * LDA;
        if (VEC) {
#pragma unroll
            for (int i = 0; i < AV; ++i) {
                const int r = (tid >> 3) + 32 * i;
                uint4 hi, lo;
                split(ra4[i].x, hi.x, lo.x);
                split(ra4[i].y, hi.y, lo.y);
                split(ra4[i].z, hi.z, lo.z);
                split(ra4[i].w, hi.w, lo.w);
                *reinterpret_cast<uint4*>(Ab + r * LDA + kc) = hi;
                *reinterpret_cast<uint4*>(As + r * LDA + kc) = lo;
            }
        } else {
#pragma unroll
            for (int i = 0; i < AS; ++i) {
                const int r = (tid >> 5) + 8 * i;
                unsigned hi, lo;
                split(ra[i], hi, lo);
                Ab[r * LDA + kc] = hi;
                As[r * LDA + kc] = lo;
            }
        }
#pragma unroll
        for (int i = 0; i < WV; ++i) {
            const int e = tid + 256 * i, h = e / WQ, q = e - h * WQ;
            *reinterpret_cast<uint4*>(Wb + (h * BN + (q >> 3)) * LDA + 4 * (q & 7)) = rw[i];
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[m][n][q] = 0.0f;
        }
    }
    const int chunks = (K + BK - 1) / BK;
    // ldmatrix row addresses: A tile m: rows 16 MT wm + 16 m + (lane % 8) +
    // 8 ((lane / 8) % 2), columns ks + 4 (lane / 16); B tiles 2 p, 2 p + 1: columns 32 wn +
    // 16 p + (lane % 8) + 8 (lane / 16), rows of W ks + 4 ((lane / 8) % 2)
    const int a_off = (16 * MT * wm + (lane & 7) + 8 * ((lane >> 3) & 1)) * LDA + 4 * (lane >> 4);
    const int b_off = (8 * NT * wn + (lane & 7) + 8 * (lane >> 4)) * LDA + 4 * ((lane >> 3) & 1);
    load(0);
    store(smem);
    __syncthreads();
    for (int t = 0; t < chunks; ++t) {
        if (t + 1 < chunks) load((t + 1) * BK);
        const unsigned* Ab = smem + (t & 1) * STAGE;
        const unsigned* As = Ab + BM * LDA;
        const unsigned* Wb = As + BM * LDA;
        const unsigned* Ws = Wb + BN * LDA;
#pragma unroll
        for (int ks = 0; ks < BK; ks += 8) {
            unsigned bb[NT][2], bs[NT][2], ab[MT][4], as[MT][4];
#pragma unroll
            for (int p = 0; p < NT; p += 2) {
                unsigned r[4];
                ldsm_x4(r, Wb + b_off + 8 * p * LDA + ks);
                bb[p][0] = r[0]; bb[p][1] = r[1]; bb[p + 1][0] = r[2]; bb[p + 1][1] = r[3];
                ldsm_x4(r, Ws + b_off + 8 * p * LDA + ks);
                bs[p][0] = r[0]; bs[p][1] = r[1]; bs[p + 1][0] = r[2]; bs[p + 1][1] = r[3];
            }
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                ldsm_x4(ab[m], Ab + 16 * m * LDA + a_off + ks);
                ldsm_x4(as[m], As + 16 * m * LDA + a_off + ks);
            }
            // the three products of every tile in turn: no tile waits on its previous product
#pragma unroll
            for (int m = 0; m < MT; ++m) {
#pragma unroll
                for (int n = 0; n < NT; ++n) mma_tf32(acc[m][n], as[m], bb[n]);
            }
#pragma unroll
            for (int m = 0; m < MT; ++m) {
#pragma unroll
                for (int n = 0; n < NT; ++n) mma_tf32(acc[m][n], ab[m], bs[n]);
            }
#pragma unroll
            for (int m = 0; m < MT; ++m) {
#pragma unroll
                for (int n = 0; n < NT; ++n) mma_tf32(acc[m][n], ab[m], bb[n]);
            }
        }
        if (t + 1 < chunks) store(smem + ((t + 1) & 1) * STAGE);
        __syncthreads();
    }
    if (flag != nullptr && __any_sync(0xffffffffu, chk != chk) && lane == 0) *flag = 1;

    // lane (gq, tq) holds rows gq, gq + 8 and columns 2 tq, 2 tq + 1 of each 16 x 8 tile
    if (OUT < 0) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const int c = col0 + 8 * NT * wn + 8 * n + 2 * tq;
            if (c >= N) continue;
            const bool two = c + 1 < N;
            float b0 = 0.0f, b1 = 0.0f;
            if (ACT >= 0) {
                b0 = b[c];
                b1 = two ? b[c + 1] : 0.0f;
            }
#pragma unroll
            for (int m = 0; m < MT; ++m) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const long long r = row0 + 16 * MT * wm + 16 * m + gq + 8 * h;
                    if (r >= rows) continue;
                    float v0 = acc[m][n][2 * h], v1 = acc[m][n][2 * h + 1];
                    if (ACT >= 0) {
                        v0 = act_fn<float>(v0 + b0, ACT);
                        v1 = act_fn<float>(v1 + b1, ACT);
                    }
                    float* z = Out + r * N + c;
                    if (two && (N & 1) == 0) {  // 8-byte aligned: N even, c even
                        *reinterpret_cast<float2*>(z) = make_float2(v0, v1);
                    } else {
                        z[0] = v0;
                        if (two) z[1] = v1;
                    }
                }
            }
        }
    } else {
        constexpr int LDH = BN + 1;
        float* Hs = reinterpret_cast<float*>(tc_raw);  // [BM][LDH]
        float* W2s = Hs + BM * LDH;                    // [N][O]
        float* Ls = W2s + N * O;                       // [BM][O]
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int c = 8 * NT * wn + 8 * n + 2 * tq + (q & 1);
                const float bc = c < N ? b[c] : 0.0f;
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    const int r = 16 * MT * wm + 16 * m + gq + 8 * (q >> 1);
                    Hs[r * LDH + c] = c < N ? act_fn<float>(acc[m][n][q] + bc, ACT > 0 ? ACT : 0) : 0.0f;
                }
            }
        }
        for (int e = tid; e < N * O; e += 256) W2s[e] = W2[e];
        __syncthreads();
        tail_output<float, OUT < 0 ? 0 : OUT, 256>(Hs, LDH, W2s, b2, Ls, Out, row0, rows, BM, N, O);
    }
#endif
}
