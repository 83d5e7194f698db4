// Configure-time probe of LEANEMB_KERNEL_ISAS=host (cmake/KernelIsas.cmake): prints the best ISA
// of src/kernels/isa.h this machine runs, by the same CPU features as isa.cc's detect().
#include <cstdio>

int main() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  std::puts(v4 ? "x86-64-v4" : v3 ? "x86-64-v3" : "baseline");
#else
  std::puts("baseline");
#endif
  return 0;
}
