// Training kernels for the built-in CNN (agent/gpu/net/): GEMM, bias, ReLU, im2col /
// col2im, 2x2 max pooling, fused softmax + cross-entropy, SGD with momentum. FP32,
// row-major, header-free (NVRTC compiles it as is).
//
// Launches (agent/gpu/ops.rs builds them and bounds-checks every buffer first):
//   gemm_f32                  block (16, 16), grid (ceil(n/16), ceil(m/16))
//   bias_grad_f32             block 256, one block per channel (grid c)
//   softmax_xent_f32          block 256, one block per sample (grid batch)
//   everything else           block 256, any grid: grid-stride loops over the outputs
// The two reductions assume exactly 256 threads per block (BLOCK). Sizes are `int`: the
// host checks that every buffer a kernel indexes holds at most 2^31 - 1 elements.
// The CPU mirror is agent/gpu/reference.rs; keep the two in step.

#define BLOCK 256
#define TILE 16
#define NEG_FLT_MAX (-3.402823466e+38f)

// Grid-stride loop over [0, n) with a 64-bit index, so `i += stride` cannot overflow.
#define FOR_EACH(i, n)                                                              \
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < (unsigned long long)(n); i += (unsigned long long)blockDim.x * gridDim.x)

struct Sum {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces `v` over the block (BLOCK threads) with `op`; every thread gets the result.
template <class Op>
static __device__ __forceinline__ float block_reduce(float v, Op op) {
    __shared__ float sh[BLOCK];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();  // sh may be reused by the next call
    return r;
}

// C[m x n] = alpha * op(A) * op(B) + beta * C, row-major. op(A) is m x k (A is stored
// k x m when trans_a), op(B) is k x n (B is stored n x k when trans_b). C is not read
// when beta == 0. Each thread owns one C element and accumulates over k in order.
extern "C" __global__ void gemm_f32(int trans_a, int trans_b, int m, int n, int k, float alpha,
                                    const float* A, const float* B, float beta, float* C) {
    __shared__ float sa[TILE][TILE];
    __shared__ float sb[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < k; t += TILE) {
        const int ka = t + tx;  // op(A)[row][ka]
        const int kb = t + ty;  // op(B)[kb][col]
        sa[ty][tx] = (row < m && ka < k) ? (trans_a ? A[ka * m + row] : A[row * k + ka]) : 0.0f;
        sb[ty][tx] = (kb < k && col < n) ? (trans_b ? B[col * k + kb] : B[kb * n + col]) : 0.0f;
        __syncthreads();
        const int len = min(TILE, k - t);
        for (int p = 0; p < len; ++p) acc = fmaf(sa[ty][p], sb[p][tx], acc);
        __syncthreads();
    }
    if (row < m && col < n) {
        float* c = &C[row * n + col];
        *c = beta == 0.0f ? alpha * acc : fmaf(alpha, acc, beta * *c);
    }
}

// y[i][ch][p] += bias[ch] for y of shape [n][c][hw]; a row-major matrix of `cols`
// columns is n = rows, c = cols, hw = 1.
extern "C" __global__ void add_bias_f32(float* y, const float* bias, int n, int c, int hw) {
    FOR_EACH(i, n * c * hw) y[i] += bias[((int)i / hw) % c];
}

// db[ch] = sum over i < n, p < hw of dy[i][ch][p]: block ch reduces channel ch.
extern "C" __global__ void bias_grad_f32(const float* dy, float* db, int n, int c, int hw) {
    const int ch = blockIdx.x;
    if (ch >= c) return;  // whole block: no barrier is skipped by part of it
    float s = 0.0f;
    for (int e = threadIdx.x; e < n * hw; e += BLOCK) s += dy[(e / hw * c + ch) * hw + e % hw];
    s = block_reduce(s, Sum());
    if (threadIdx.x == 0) db[ch] = s;
}

// y = max(x, 0).
extern "C" __global__ void relu_fwd_f32(const float* x, float* y, int n) {
    FOR_EACH(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// dx = dy where the saved pre-activation x > 0, else 0.
extern "C" __global__ void relu_bwd_f32(const float* x, const float* dy, float* dx, int n) {
    FOR_EACH(i, n) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

// One image: col[(ci*kh + ky)*kw + kx][oy*ow + ox] = x[ci][oy*stride + ky - pad][ox*stride + kx - pad],
// 0 where that falls in the padding. One thread per col element.
extern "C" __global__ void im2col_f32(const float* x, float* col, int c, int h, int w, int kh, int kw,
                                      int pad, int stride, int oh, int ow) {
    FOR_EACH(idx, c * kh * kw * oh * ow) {
        const int i = (int)idx;
        const int row = i / (oh * ow), p = i % (oh * ow);
        const int ci = row / (kh * kw), ky = row / kw % kh, kx = row % kw;
        const int iy = p / ow * stride + ky - pad, ix = p % ow * stride + kx - pad;
        col[i] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x[(ci * h + iy) * w + ix] : 0.0f;
    }
}

// The adjoint of im2col in gather form: dx[ci][iy][ix] = sum of the col entries im2col
// read from x[ci][iy][ix] (ky outer, kx inner). One thread per dx element, no atomics;
// dx is overwritten.
extern "C" __global__ void col2im_f32(const float* col, float* dx, int c, int h, int w, int kh, int kw,
                                      int pad, int stride, int oh, int ow) {
    FOR_EACH(idx, c * h * w) {
        const int i = (int)idx;
        const int ci = i / (h * w), iy = i / w % h, ix = i % w;
        float acc = 0.0f;
        for (int ky = 0; ky < kh; ++ky) {
            const int ty = iy + pad - ky;
            if (ty < 0 || ty % stride != 0 || ty / stride >= oh) continue;
            for (int kx = 0; kx < kw; ++kx) {
                const int tx = ix + pad - kx;
                if (tx < 0 || tx % stride != 0 || tx / stride >= ow) continue;
                acc += col[((ci * kh + ky) * kw + kx) * (oh * ow) + ty / stride * ow + tx / stride];
            }
        }
        dx[i] = acc;
    }
}

// 2x2 max pooling, stride 2, over nc planes of h x w; output (h/2) x (w/2) per plane.
// argmax = flat input index of the maximum (the first one in row order on ties).
extern "C" __global__ void maxpool2_fwd_f32(const float* x, float* y, int* argmax, int nc, int h, int w) {
    const int oh = h / 2, ow = w / 2;
    FOR_EACH(idx, nc * oh * ow) {
        const int o = (int)idx;
        const int plane = o / (oh * ow), oy = o / ow % oh, ox = o % ow;
        const int top = (plane * h + 2 * oy) * w + 2 * ox;
        int best = top;
        if (x[top + 1] > x[best]) best = top + 1;
        if (x[top + w] > x[best]) best = top + w;
        if (x[top + w + 1] > x[best]) best = top + w + 1;
        y[o] = x[best];
        argmax[o] = best;
    }
}

// dx[argmax[o]] = dy[o] for every output o; dx is zeroed by the caller. An argmax outside
// output o's own window is ignored, so every write is in bounds and no two outputs write
// the same element (the windows are disjoint): no atomics.
extern "C" __global__ void maxpool2_bwd_f32(const float* dy, const int* argmax, float* dx, int nc, int h,
                                            int w) {
    const int oh = h / 2, ow = w / 2;
    FOR_EACH(idx, nc * oh * ow) {
        const int o = (int)idx;
        const int j = argmax[o];
        if (j < 0) continue;
        const int plane = o / (oh * ow), oy = o / ow % oh, ox = o % ow;
        if (j / (h * w) == plane && j / w % h / 2 == oy && j % w / 2 == ox) dx[j] = dy[o];
    }
}

// Fused softmax + cross-entropy, one block per sample i:
//   loss[i] = log(sum_c exp(z_c - m)) - (z_label - m), m = max_c z_c
//   dlogits[i][c] = (softmax_c - [c == label]) / batch
// A label outside [0, classes) gives loss NaN and no one-hot term.
extern "C" __global__ void softmax_xent_f32(const float* logits, const int* labels, float* loss,
                                            float* dlogits, int batch, int classes) {
    const int i = blockIdx.x;
    if (i >= batch) return;  // whole block
    const float* z = logits + i * classes;
    float m = NEG_FLT_MAX;
    for (int c = threadIdx.x; c < classes; c += BLOCK) m = fmaxf(m, z[c]);
    m = block_reduce(m, Max());
    float s = 0.0f;
    for (int c = threadIdx.x; c < classes; c += BLOCK) s += expf(z[c] - m);
    s = block_reduce(s, Sum());
    const int label = labels[i];
    const bool valid = label >= 0 && label < classes;
    if (threadIdx.x == 0) loss[i] = valid ? logf(s) - (z[label] - m) : __int_as_float(0x7fc00000);
    for (int c = threadIdx.x; c < classes; c += BLOCK) {
        const float p = expf(z[c] - m) / s;
        dlogits[i * classes + c] = (p - (c == label ? 1.0f : 0.0f)) / (float)batch;
    }
}

// SGD with momentum and L2 weight decay: v = momentum*v + g + weight_decay*w; w -= lr*v.
extern "C" __global__ void sgd_momentum_f32(float* w, const float* g, float* v, int n, float lr,
                                            float momentum, float weight_decay) {
    FOR_EACH(i, n) {
        const float vi = fmaf(momentum, v[i], fmaf(weight_decay, w[i], g[i]));
        v[i] = vi;
        w[i] = fmaf(-lr, vi, w[i]);
    }
}
