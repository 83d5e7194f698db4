// The baseline build of the fused optimizer updates' loops (update_loops.h, update_builds.h):
// a translation unit of its own, so that the builds of update.cc compile in parallel.
#include "kernels/update_loops.h"

namespace leanemb::kernels::update_detail {

LEANEMB_ISA_BUILD(base, bool, run, (Loop k, const RangeJob& j), LEANEMB_RUN_BODY)

}  // namespace leanemb::kernels::update_detail
