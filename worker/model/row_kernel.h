// XMOD_ROW_KERNEL marks a hand-written loop over contiguous float rows: on
// x86-64 the compiler builds it for AVX-512, AVX2 and the baseline, and the
// program picks the widest the machine has when it loads, so one binary runs at
// the width of the machine it lands on. Files that use it are built with -O3
// -fopenmp-simd -fno-math-errno (worker/CMakeLists.txt) so that the loops,
// marked `#pragma omp simd`, are vectorised.
#ifndef XMOD_WORKER_MODEL_ROW_KERNEL_H_
#define XMOD_WORKER_MODEL_ROW_KERNEL_H_

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(XMOD_NO_TARGET_CLONES)
#define XMOD_ROW_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define XMOD_ROW_KERNEL
#endif

#endif  // XMOD_WORKER_MODEL_ROW_KERNEL_H_
