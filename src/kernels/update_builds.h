// The shared pieces of the fused optimizer updates' builds (update.cc, update_loops.h): the
// arguments of one thread's share of a kernel call and the declarations of the loops' builds,
// one per ISA, each defined in a file of its own (update_base.cc, update_v3.cc, update_v4.cc) so
// that the builds compile in parallel (isa_builds.h, LEANEMB_ISA_BUILD).
#pragma once

#include <cstdint>

#include "kernels/isa_builds.h"
#include "kernels/kernels.h"

namespace leanemb::kernels::update_detail {

struct Scratch {
  float* w;
  float* g;
  float* m;
  float* v;
  // SM3: the table's column accumulators before the step [dim], and this thread's max of the
  // step's nu per column [dim] (combined with the other threads' after the loop).
  const float* sm3_col = nullptr;
  float* sm3_part = nullptr;
};

// The arguments of one thread's share of a kernel call.
struct RangeJob {
  const TableView* t;
  const SegmentSource* s;  // fused and reduce jobs
  const int64_t* rows;
  const float* grads;      // update jobs
  int64_t u0, u1;
  const UpdateStep* step;
  Scratch sc;
  float* out;              // fused: the reduced row; reduce: the output
};

enum class Loop { kUpdate, kFused, kReduce };

// run_base, run_v3, run_v4: the update, fused and reduce loops of one ISA (update_loops.h's
// LEANEMB_RUN_BODY); false if a reduce produced Inf or NaN.
LEANEMB_ISA_DECLARE_BUILDS(bool, run, (Loop k, const RangeJob& j))

}  // namespace leanemb::kernels::update_detail
