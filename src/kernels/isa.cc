#include "kernels/isa.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/enum_names.h"
#include "kernels/vec16.h"  // LEANEMB_HAVE_V4
#include "kernels/vec8.h"

namespace leanemb {
template <>
struct EnumNames<kernels::Isa> {
  static constexpr std::string_view kWhat = "ISA";
  static constexpr EnumName<kernels::Isa> kNames[] = {{kernels::Isa::kBaseline, "baseline", ""},
                                                      {kernels::Isa::kV3, "x86-64-v3", ""},
                                                      {kernels::Isa::kV4, "x86-64-v4", ""}};
};
}  // namespace leanemb

namespace leanemb::kernels {

namespace {

Isa detect() {
#if defined(LEANEMB_HAVE_V3)
  __builtin_cpu_init();
  const bool v4 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
#if defined(LEANEMB_HAVE_V4)
  if (v4 && cpu_has_v3()) return Isa::kV4;
#else
  (void)v4;  // this build has no x86-64-v4 builds of the kernels (LEANEMB_KERNEL_ISAS=host)
#endif
  if (cpu_has_v3()) return Isa::kV3;
#endif
  return Isa::kBaseline;
}

// The cap from LEANEMB_ISA, or kV4 (none).
Isa env_limit() {
  const char* s = std::getenv("LEANEMB_ISA");
  if (s == nullptr || *s == '\0') return Isa::kV4;
  const std::string v(s);
  if (v == "baseline" || v == "x86-64") return Isa::kBaseline;
  if (v == "x86-64-v3" || v == "v3" || v == "avx2") return Isa::kV3;
  if (v == "x86-64-v4" || v == "v4" || v == "avx512") return Isa::kV4;
  std::fprintf(stderr, "leanemb: ignoring LEANEMB_ISA=%s (expected baseline, x86-64-v3 or x86-64-v4)\n", s);
  return Isa::kV4;
}

std::atomic<int> g_limit{static_cast<int>(Isa::kV4)};

}  // namespace

Isa cpu_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  static const Isa env = env_limit();
  int v = static_cast<int>(cpu_isa());
  v = std::min(v, static_cast<int>(env));
  v = std::min(v, g_limit.load(std::memory_order_relaxed));
  return static_cast<Isa>(v);
}

void set_isa_limit(Isa limit) { g_limit.store(static_cast<int>(limit), std::memory_order_relaxed); }

std::string_view isa_name(Isa isa) { return enum_name(isa); }

}  // namespace leanemb::kernels
