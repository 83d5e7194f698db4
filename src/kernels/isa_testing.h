// Test helper: runs a test body once per kernel build the CPU runs (kernels/isa.h), with the
// dispatch capped to that build, so the x86-64-v3 and baseline builds are tested on AVX-512 hosts.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kernels/isa.h"

namespace leanemb::kernels {

// fn() for baseline, x86-64-v3 and x86-64-v4 in turn (those the CPU supports), each under a
// SCOPED_TRACE naming the build; the cap is lifted afterwards, and a fatal failure stops the loop.
template <typename Fn>
void for_each_isa(Fn&& fn) {
  for (Isa isa : {Isa::kBaseline, Isa::kV3, Isa::kV4}) {
    if (static_cast<int>(isa) > static_cast<int>(cpu_isa())) break;
    SCOPED_TRACE(std::string("isa ") + std::string(isa_name(isa)));
    set_isa_limit(isa);
    fn();
    set_isa_limit(Isa::kV4);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace leanemb::kernels
