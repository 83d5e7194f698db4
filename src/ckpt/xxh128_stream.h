// Xxh128Stream: streaming XXH3-128 with little-endian integer framing, and the canonical
// 32-hex-digit form of a 128-bit hash. Internal (not installed): the checkpoint digest
// (ckpt::digest), the embedding digests and the training digest (src/dist) hash with it.
//
// Thread safety: a value; one thread at a time.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "leanemb/status.h"

namespace leanemb::ckpt {

// 32 lowercase hex digits of h's canonical (big-endian) form.
inline std::string xxh128_hex(XXH128_hash_t h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : c.digest) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

class Xxh128Stream {
 public:
  Xxh128Stream() : state_(XXH3_createState(), &XXH3_freeState) {
    LEANEMB_CHECK(state_ != nullptr, "XXH3_createState failed");
    XXH3_128bits_reset(state_.get());
  }
  void bytes(const void* p, size_t n) { XXH3_128bits_update(state_.get(), p, n); }
  void u8(uint8_t v) { bytes(&v, 1); }
  void u64(uint64_t v) {  // little-endian whatever the host
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    bytes(b, 8);
  }
  // u64 length, then the bytes.
  void sized(std::span<const uint8_t> b) {
    u64(b.size());
    bytes(b.data(), b.size());
  }
  std::string hex() const { return xxh128_hex(XXH3_128bits_digest(state_.get())); }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state_;
};

}  // namespace leanemb::ckpt
