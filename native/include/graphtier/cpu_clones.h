// GRAPHTIER_CPU_CLONES: compile a function for AVX-512, for AVX2 with FMA and for the baseline
// x86-64, and let the loader pick the one the CPU runs (GCC's target_clones). The package is built
// for the baseline, so without it the multiply-add loops of the model ops ran on SSE2, four floats
// at a time. Elsewhere (other compilers, other CPUs) the function is compiled once, as usual.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define GRAPHTIER_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GRAPHTIER_CPU_CLONES
#endif
