// GradientGroups: the dense gradient of a batch as a fixed-order sum of per-group gradients, so
// that one process and P ranks compute it bit-identically (docs/dist.md, "Gradient groups").
//
// A batch of B records is cut into G contiguous groups of sizes differing by at most one
// (group g = records [B*g/G, B*(g+1)/G)); rank r of P computes groups [r*G/P, (r+1)*G/P).
// After each group's backward the parameters' gradients are moved into that group's slot
// (save); reduce() sums the slots in fixed order (Communicator::reduce_in_fixed_order) and,
// with several ranks, all-reduces the partial sums in the same fixed order, leaving the step's
// gradient in the parameters' grad spans. With G and P powers of two (or P = G) the two orders
// form the same tree, so P = 1, 2, 4 give the same bits.
//
// Memory: [groups here + 1, total params] floats, category kGradients, kept between steps.
// Thread safety: one caller.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "leanemb/memory.h"
#include "nn/tensor.h"

namespace leanemb::nn {

// Which records and groups rank `rank` of `world` computes for a batch of B with G groups.
struct GroupSlice {
  int64_t B = 0, G = 1;
  int64_t g0 = 0, g1 = 1;  // groups [g0, g1)
  int64_t lo = 0, hi = 0;  // records [lo, hi)
  std::pair<int64_t, int64_t> group(int64_t g) const { return {B * g / G, B * (g + 1) / G}; }
};
inline GroupSlice group_slice(int64_t B, int64_t G, int rank, int world) {
  GroupSlice s;
  s.B = B;
  s.G = G;
  s.g0 = static_cast<int64_t>(rank) * G / world;
  s.g1 = static_cast<int64_t>(rank + 1) * G / world;
  s.lo = B * s.g0 / G;
  s.hi = B * s.g1 / G;
  return s;
}

class GradientGroups {
 public:
  // Sizes the slots for `groups_here` groups of `params`. Errors: ResourceExhausted.
  Status begin(std::span<const DenseParam> params, int64_t groups_here, Allocator* alloc) {
    floats_ = 0;
    for (const DenseParam& p : params) floats_ += p.grad.size();
    const size_t bytes = std::max<size_t>(static_cast<size_t>(groups_here + 1) * floats_ * 4, 4);
    if (buf_.size_bytes() < bytes) {
      buf_.reset();
      LEANEMB_ASSIGN_OR_RETURN(buf_, alloc->allocate(bytes, Category::kGradients));
    }
    return Status();
  }
  // Moves the parameters' gradients into slot `slot` and zeroes them.
  void save(std::span<const DenseParam> params, int64_t slot) {
    float* dst = buf_.as<float>() + static_cast<size_t>(slot) * floats_;
    for (const DenseParam& p : params) {
      dst = std::copy(p.grad.begin(), p.grad.end(), dst);
      std::fill(p.grad.begin(), p.grad.end(), 0.0f);
    }
  }
  // The fixed-order sum of slots [0, groups_here) (all-reduced when comm has several ranks)
  // into the parameters' gradients. Errors: the communicator's.
  Status reduce(std::span<const DenseParam> params, int64_t groups_here, dist::Communicator* comm) {
    float* base = buf_.as<float>();
    std::vector<std::span<const float>> parts;
    for (int64_t g = 0; g < groups_here; ++g) parts.emplace_back(base + static_cast<size_t>(g) * floats_, floats_);
    const std::span<float> sum(base + static_cast<size_t>(groups_here) * floats_, floats_);
    dist::Communicator::reduce_in_fixed_order(parts, sum, dist::ReduceOp::kSum);
    if (comm && comm->size() > 1) LEANEMB_RETURN_IF_ERROR(comm->all_reduce(sum, dist::ReduceOp::kSum));
    const float* src = sum.data();
    for (const DenseParam& p : params) {
      std::copy(src, src + p.grad.size(), p.grad.begin());
      src += p.grad.size();
    }
    return Status();
  }
  void release() { buf_.reset(); }

 private:
  Allocation buf_;
  size_t floats_ = 0;
};

}  // namespace leanemb::nn
