// Small shared vocabulary of the nn module: named fp32 views for checkpoints (NamedTensor), the
// parameter + gradient pairs that dense optimizers update (DenseParam), and StoredTensor, the
// buffer in which layers keep activations for backward in their precision's storage format (a DType of DTypeUse::kActivations).
//
// Ownership: NamedTensor and DenseParam are non-owning views into the buffers of the module or
// optimizer that produced them; they stay valid while that object lives (moving the object does
// not move its buffers). A StoredTensor owns its Allocation. Thread safety: plain values; a
// StoredTensor is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "amp/precision.h"
#include "leanemb/memory.h"
#include "leanemb/status.h"

namespace leanemb::nn {

using ::leanemb::DType;

// The largest batch (rows) a layer accepts: BLAS dimensions are 32-bit, and products such as
// batch * width must not overflow.
inline constexpr int64_t kMaxBatch = int64_t{1} << 30;

// A named read-only view of fp32 values: what modules and optimizers export for checkpoints,
// e.g. {"top.0.weight", [out * in]}. Names follow torch's state_dict style.
struct NamedTensor {
  std::string name;
  std::span<const float> values;
};

// A trainable parameter and its gradient, as a dense optimizer sees them.
struct DenseParam {
  std::string name;
  std::span<float> value;  // [n] master weights (fp32)
  std::span<float> grad;   // [n] accumulated gradient (fp32), same size as value
};

// A named writable destination of load_named().
struct NamedTarget {
  std::string name;
  std::span<float> values;
};

// Copies every src tensor into the dst tensor of the same name. All-or-nothing: every check runs
// before the first copy. `what` names the loading object in messages ("mlp 'top'").
// Errors: InvalidArgument when a dst name is missing from src, src holds a name dst lacks, a
// src name repeats, or a size differs (the message names the tensor and both sizes).
Status load_named(std::span<const NamedTensor> src, std::span<const NamedTarget> dst, std::string_view what);

// Allocates `count` (>= 1) floats in `category` from `alloc`, 64-byte aligned, uninitialized.
// Errors: ResourceExhausted (or InvalidArgument for count 0) from the allocator.
Result<Allocation> allocate_floats(Allocator* alloc, size_t count, Category category);

// `numel` activation values stored in `precision`'s format (fp32: 4 bytes each; bf16, fp16:
// 2 bytes each, round to nearest even), allocated in Category::kActivations.
class StoredTensor {
 public:
  StoredTensor() = default;
  // Errors: ResourceExhausted from the allocator; InvalidArgument for numel <= 0.
  static Result<StoredTensor> create(Allocator* alloc, int64_t numel, DType precision);

  // Stores x [numel] (rounded to the precision's grid; exact when x already is on it).
  void store(std::span<const float> x);
  // out [numel] = the stored values in fp32.
  void load(std::span<float> out) const;
  // The values themselves when the precision is fp32 (no copy needed); null otherwise.
  const float* f32_data() const;
  // The stored bf16 bit patterns [numel] when the precision is bf16; null otherwise.
  const uint16_t* bf16_data() const;

  int64_t numel() const { return numel_; }
  size_t size_bytes() const { return buffer_.size_bytes(); }
  bool empty() const { return buffer_.empty(); }
  void reset() { buffer_.reset(); numel_ = 0; }

 private:
  Allocation buffer_;
  int64_t numel_ = 0;
  DType precision_ = DType::kF32;
};

}  // namespace leanemb::nn
