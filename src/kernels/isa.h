// Run-time choice of the instruction set the fast kernels use. Each hot kernel is built three
// times from one source (templates over the ISA): for x86-64-v4 (AVX-512 F/BW/CD/DQ/VL, 16-lane
// vectors), x86-64-v3 (AVX2, FMA, F16C, BMI2; 8 lanes) and the baseline x86-64 ISA, and every
// call picks the best build the CPU runs, by CPU feature (never by vendor). All builds perform
// the same arithmetic per element in the same order (and -ffp-contract=off forbids FMA
// contraction), so they give bit-identical results; the tests run every build the test machine
// supports against the scalar reference.
//
// The choice can be capped, to compare builds on one machine or to test the narrower ones:
//   * the environment variable LEANEMB_ISA = baseline | x86-64-v3 | x86-64-v4 (read once, at the
//     first kernel call; unknown values are ignored with a warning on stderr);
//   * set_isa_limit() (tests and benchmarks).
// A cap above what the CPU supports has no effect.
//
// Thread safety: all functions may be called concurrently; set_isa_limit takes effect for calls
// that start after it returns.
#pragma once

#include <string_view>

namespace leanemb::kernels {

enum class Isa : int { kBaseline = 0, kV3 = 1, kV4 = 2 };

// The best ISA this CPU runs (x86-64-v4 needs AVX-512 F, BW, CD, DQ and VL) that the build has
// kernels for. Non-x86 builds and builds without optimization (see vec8.h) report kBaseline; a
// build configured with LEANEMB_KERNEL_ISAS=host has only the ISAs of the machine that built it
// (docs/package.md, "Build time") and reports at most the best of those.
Isa cpu_isa();
// The ISA the kernels use now: cpu_isa() capped by LEANEMB_ISA and set_isa_limit().
Isa active_isa();
// Caps active_isa() (kV4 removes the cap).
void set_isa_limit(Isa limit);
std::string_view isa_name(Isa isa);  // "baseline", "x86-64-v3", "x86-64-v4"

}  // namespace leanemb::kernels
