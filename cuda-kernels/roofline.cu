// Roofline microbenchmarks: an arithmetic-intensity sweep (FP32 and FP16 half2) and the
// copy / triad bandwidth kernels. Header-free, so NVRTC compiles it as is (no cuda_fp16.h:
// half2 arithmetic is inline PTX, sm_53 and newer).
//
// Work per element (FMA = 2 FLOPs; bytes are what the kernel logically moves):
//   sweep_f32    one float in, one out: 8 chains x iters FMAs  -> 16*iters FLOPs, 8 bytes
//   sweep_f16x2  one half2 in, one out: 8 chains x iters HFMA2s -> 32*iters FLOPs, 8 bytes
//   copy_f32     b = a over float4s:                            -> 0 FLOPs, 32 bytes per float4
//   triad_f32    a = b + s*c over float4s:                      -> 8 FLOPs, 48 bytes per float4
// The seeding (x + j, bit flips) and the final sum of the chains are not counted.
//
// Launch: block 256 threads, grid ceil(n/256) (ops.rs `Launch`) or SMs * k; every kernel
// is a grid-stride loop, so any grid covers all n elements. The host keeps |a| < 1 so the
// chains converge to b / (1 - a) instead of overflowing; a and b are kernel arguments, so
// the compiler cannot fold the chains (the PTX holds 8 FMAs per chain step). The step loop
// is unrolled 16 times (FP16: 32, since sm_87 reloads the half2 constant in the loop), so
// FMAs are 96-98% of the loop's SASS on sm_87 and sm_90 (the compiler's default of 4
// leaves 32 of 36, capping the sweep near 0.89 of the peak); a test checks it.
// The CPU mirror is agent/gpu/reference.rs; keep the two in step.

#define CHAINS 8

// Grid-stride loop over [0, n) with a 64-bit index, so `i += stride` cannot overflow.
#define FOR_EACH(i, n)                                                              \
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < (unsigned long long)(n); i += (unsigned long long)blockDim.x * gridDim.x)

// d = x * a + b on both halves of a half2, rounded to nearest.
static __device__ __forceinline__ unsigned int hfma2(unsigned int x, unsigned int a, unsigned int b) {
    unsigned int d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(a), "r"(b));
    return d;
}

// d = x + y on both halves of a half2, rounded to nearest.
static __device__ __forceinline__ unsigned int hadd2(unsigned int x, unsigned int y) {
    unsigned int d;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
    return d;
}

// out[i] = sum over j < 8 of chain j, where chain j starts at in[i] + j and does
// `iters` times c = fma(c, a, b). The sum runs in chain order.
extern "C" __global__ void sweep_f32(const float* in, float* out, unsigned long long n,
                                     unsigned int iters, float a, float b) {
    FOR_EACH(i, n) {
        const float x = in[i];
        float c[CHAINS];
#pragma unroll
        for (int j = 0; j < CHAINS; ++j) c[j] = x + (float)j;
#pragma unroll 16
        for (unsigned int t = 0; t < iters; ++t) {
#pragma unroll
            for (int j = 0; j < CHAINS; ++j) c[j] = fmaf(c[j], a, b);
        }
        float s = c[0];
#pragma unroll
        for (int j = 1; j < CHAINS; ++j) s += c[j];
        out[i] = s;
    }
}

// As sweep_f32 on half2 bit patterns: chain j starts at in[i] with the low mantissa bits
// of both halves XORed with j (distinct, and finite whenever in[i] is), does `iters`
// HFMA2s c = c * a + b (a, b: half2 bit patterns), and the chains are summed with HADD2.
extern "C" __global__ void sweep_f16x2(const unsigned int* in, unsigned int* out,
                                       unsigned long long n, unsigned int iters, unsigned int a,
                                       unsigned int b) {
    FOR_EACH(i, n) {
        const unsigned int x = in[i];
        unsigned int c[CHAINS];
#pragma unroll
        for (int j = 0; j < CHAINS; ++j) c[j] = x ^ ((unsigned int)j * 0x00010001u);
#pragma unroll 32
        for (unsigned int t = 0; t < iters; ++t) {
#pragma unroll
            for (int j = 0; j < CHAINS; ++j) c[j] = hfma2(c[j], a, b);
        }
        unsigned int s = c[0];
#pragma unroll
        for (int j = 1; j < CHAINS; ++j) s = hadd2(s, c[j]);
        out[i] = s;
    }
}

// b = a over n4 float4s.
extern "C" __global__ void copy_f32(const float4* a, float4* b, unsigned long long n4) {
    FOR_EACH(i, n4) b[i] = a[i];
}

// a = b + s * c over n4 float4s, as one FMA per float.
extern "C" __global__ void triad_f32(float4* a, const float4* b, const float4* c, float s,
                                     unsigned long long n4) {
    FOR_EACH(i, n4) {
        const float4 x = b[i];
        const float4 y = c[i];
        float4 r;
        r.x = fmaf(s, y.x, x.x);
        r.y = fmaf(s, y.y, x.y);
        r.z = fmaf(s, y.z, x.z);
        r.w = fmaf(s, y.w, x.w);
        a[i] = r;
    }
}
