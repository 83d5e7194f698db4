// The builds of a kernel entry point, one per ISA (isa.h), and the call of the build that the
// active ISA selects: the two pieces every fast kernel file (lookup.cc, update.cc, quant8.cc)
// needs, written once.
//
//   #define FOO_BODY(I) return foo_t<I>(args);
//   LEANEMB_ISA_BUILDS(R, foo, (params), FOO_BODY)
// defines, in the enclosing namespace, `R foo_base(params) { FOO_BODY(Isa::kBaseline) }`,
// `R foo_v3(params) { FOO_BODY(Isa::kV3) }` and `R foo_v4(params) { FOO_BODY(Isa::kV4) }`:
// the body macro names the kernel's templates for the build's ISA. foo_v3 and foo_v4 exist only
// where the compiler builds those ISAs (LEANEMB_HAVE_V3, LEANEMB_HAVE_V4: GCC, x86-64,
// optimized). Each build is `flatten` and carries its ISA's target attribute, so that the
// templates and every helper they call are inlined into it and compiled for that ISA.
// The body is pasted into each build, with the ISA as a literal, because anything else changes
// GCC's code for the flattened kernels (checked by disassembly against the hand-written
// builds): one more inline template level, and even a constexpr local holding the ISA, moved
// registers and blocks of the 50k-instruction update loops.
//
//   LEANEMB_RETURN_ISA_CALL(isa, name, args...);
// returns name_v4(args...) when isa is kV4, else name_v3(args...) when isa >= kV3, else
// name_base(args...), naming only the builds that exist: the if-chain the kernel files had,
// direct calls (no function pointer). Call it once per kernel call or per thread's share of
// one, never per row.
#pragma once

#include "kernels/isa.h"
#include "kernels/vec16.h"  // LEANEMB_HAVE_V3 / _V4, LEANEMB_TARGET_V3 / _V4
#include "kernels/vec8.h"

#if defined(LEANEMB_HAVE_V3)
#define LEANEMB_ISA_IF_V3_(...) __VA_ARGS__
#else
#define LEANEMB_ISA_IF_V3_(...)
#endif
#if defined(LEANEMB_HAVE_V4)
#define LEANEMB_ISA_IF_V4_(...) __VA_ARGS__
#else
#define LEANEMB_ISA_IF_V4_(...)
#endif

#define LEANEMB_ISA_BUILD_base_(R, name, params, BODY)                                                   \
  __attribute__((flatten)) R name##_base params { BODY(::leanemb::kernels::Isa::kBaseline) }
#define LEANEMB_ISA_BUILD_v3_(R, name, params, BODY)                                                     \
  LEANEMB_ISA_IF_V3_(LEANEMB_TARGET_V3 __attribute__((flatten)) R name##_v3 params {                     \
    BODY(::leanemb::kernels::Isa::kV3)                                                                   \
  })
#define LEANEMB_ISA_BUILD_v4_(R, name, params, BODY)                                                     \
  LEANEMB_ISA_IF_V4_(LEANEMB_TARGET_V4 __attribute__((flatten)) R name##_v4 params {                     \
    BODY(::leanemb::kernels::Isa::kV4)                                                                   \
  })
#define LEANEMB_ISA_BUILDS(R, name, params, BODY)                                                         \
  LEANEMB_ISA_BUILD_base_(R, name, params, BODY)                                                          \
  LEANEMB_ISA_BUILD_v3_(R, name, params, BODY)                                                            \
  LEANEMB_ISA_BUILD_v4_(R, name, params, BODY)

// The same builds, one translation unit each, so that the compiler's cores build them in
// parallel (update.cc's loops: update_base.cc, update_v3.cc, update_v4.cc; in one file they were
// the build's longest step by minutes, docs/package.md "Build time"). Where the call is, and
// before each build,
//   LEANEMB_ISA_DECLARE_BUILDS(R, name, params)
// declares the builds (external linkage, with their target attributes); each build's file has
//   LEANEMB_ISA_BUILD(v3, R, name, params, BODY)
// (base, v3 or v4), which defines exactly what LEANEMB_ISA_BUILDS defines for that ISA (nothing
// where the ISA is not built). The build's body and its flattening are the same as in one file,
// and so are GCC's instructions for it (checked by disassembly), but for where some spill slots
// lie in the stack frame; its symbol is no longer file-local.
#define LEANEMB_ISA_BUILD(ISA, R, name, params, BODY) LEANEMB_ISA_BUILD_##ISA##_(R, name, params, BODY)
#define LEANEMB_ISA_DECLARE_BUILDS(R, name, params)                                                      \
  R name##_base params;                                                                                  \
  LEANEMB_ISA_IF_V3_(LEANEMB_TARGET_V3 R name##_v3 params;)                                              \
  LEANEMB_ISA_IF_V4_(LEANEMB_TARGET_V4 R name##_v4 params;)

// LEANEMB_ISA_KERNEL(R, name, params, args) defines the entry point `R name params` of a kernel
// whose body is the inline function `R name##_impl params` (defined before it): three builds
// of the body (name##_build_base / _v3 / _v4, file-local, each `flatten` with its ISA's target
// attribute, so name##_impl and its helpers are compiled for that ISA) and the call of the one
// active_isa() selects. `args` names the parameters, in parentheses: for example
//   inline int64_t count_outside_impl(const int64_t* v, int64_t n, int64_t bound) { ... }
//   LEANEMB_ISA_KERNEL(int64_t, count_outside, (const int64_t* v, int64_t n, int64_t bound), (v, n, bound))
// For kernels whose body GCC vectorizes on its own (plain loops); the cap of active_isa()
// (LEANEMB_ISA, set_isa_limit) selects their builds like every other kernel's, so the tests run
// each build the CPU has.
#define LEANEMB_ISA_UNPAREN_(...) __VA_ARGS__
#define LEANEMB_ISA_KERNEL(R, name, params, args)                                                       \
  __attribute__((flatten)) static R name##_build_base params { return name##_impl args; }              \
  LEANEMB_ISA_IF_V3_(LEANEMB_TARGET_V3 __attribute__((flatten)) static R name##_build_v3 params {      \
    return name##_impl args;                                                                           \
  })                                                                                                   \
  LEANEMB_ISA_IF_V4_(LEANEMB_TARGET_V4 __attribute__((flatten)) static R name##_build_v4 params {      \
    return name##_impl args;                                                                           \
  })                                                                                                   \
  R name params {                                                                                      \
    LEANEMB_RETURN_ISA_CALL(::leanemb::kernels::active_isa(), name##_build, LEANEMB_ISA_UNPAREN_ args); \
  }

#define LEANEMB_RETURN_ISA_CALL(isa, name, ...)                                                         \
  LEANEMB_ISA_IF_V4_(if ((isa) == ::leanemb::kernels::Isa::kV4) return name##_v4(__VA_ARGS__);)        \
  LEANEMB_ISA_IF_V3_(if ((isa) >= ::leanemb::kernels::Isa::kV3) return name##_v3(__VA_ARGS__);)        \
  (void)(isa);                                                                                          \
  return name##_base(__VA_ARGS__)
