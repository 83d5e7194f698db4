// Little-endian byte encoding shared by every binary format of the project: checkpoint manifests
// (ckpt/format.cc), sharded-checkpoint records (dist/sharded_checkpoint_internal.h), the data
// reader's resume state (data/reader.cc), id-map state (tiered/id_map_io.cc) and the sharded
// collection's wire messages (dist/sharded_collection_internal.h).
//
// BasicByteWriter<Bytes> appends to a caller's byte vector (std::vector<uint8_t>, or a
// std::pmr::vector<uint8_t> for accounted buffers): scalars in little-endian order, spans of
// scalars back to back, strings as a u32 length then the bytes. ByteReader walks untrusted bytes:
// every read checks the bytes left first and returns false (reading nothing, moving nothing)
// instead of reading past the end, so a truncated or corrupt input fails cleanly at the first
// short read. Callers turn the false into their format's Status (DataLoss with the file name).
//
// Encoding: integers and floats are the bytes of the value in little-endian order; the host must
// be little-endian (static_assert), so that spans of scalars can be copied as they are in memory.
//
// Neither class is thread-safe; both are cheap to create (a pointer and an offset).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace leanemb {

static_assert(std::endian::native == std::endian::little, "the binary formats are little-endian");

template <typename Bytes>
class BasicByteWriter {
 public:
  // Appends to *out (not owned; must outlive the writer). REQUIRES: out != nullptr.
  explicit BasicByteWriter(Bytes* out) : out_(out) {}

  // One scalar (integer, enum-free arithmetic type): sizeof(T) bytes.
  template <typename T>
  void put(T v) {
    static_assert(std::is_arithmetic_v<T>, "put takes integers and floats");
    raw(&v, sizeof(T));
  }
  void u8(uint8_t v) { put(v); }
  void u32(uint32_t v) { put(v); }
  void u64(uint64_t v) { put(v); }
  void i32(int32_t v) { put(v); }
  void i64(int64_t v) { put(v); }
  // v.size() scalars back to back.
  template <typename T>
  void span(std::span<const T> v) {
    static_assert(std::is_arithmetic_v<T>, "span takes integers and floats");
    raw(v.data(), v.size_bytes());
  }
  // n bytes at p as they are.
  // resize + memcpy rather than vector::insert: GCC 12 at -O2 with -fsanitize=thread reports a
  // false -Wstringop-overflow for the inlined range insert.
  void raw(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out_->size();
    out_->resize(at + n);
    std::memcpy(out_->data() + at, p, n);
  }
  void raw(std::string_view s) { raw(s.data(), s.size()); }
  // A u32 length, then the bytes. REQUIRES: s.size() < 2^32.
  void str32(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s);
  }
  size_t size() const { return out_->size(); }
  Bytes& bytes() { return *out_; }

 private:
  Bytes* out_;
};

using ByteWriter = BasicByteWriter<std::vector<uint8_t>>;

// The scalar whose little-endian bytes start at p (for fixed-offset header fields).
// REQUIRES: p points at sizeof(T) readable bytes (check the size first; ByteReader does).
template <typename T>
T load_le(const uint8_t* p) {
  static_assert(std::is_arithmetic_v<T>, "load_le takes integers and floats");
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}

  // Each read returns false, leaving *v and the position alone, when fewer bytes are left than
  // it needs.
  template <typename T>
  [[nodiscard]] bool get(T* v) {
    static_assert(std::is_arithmetic_v<T>, "get takes integers and floats");
    return raw(v, sizeof(T));
  }
  [[nodiscard]] bool u8(uint8_t* v) { return get(v); }
  [[nodiscard]] bool u32(uint32_t* v) { return get(v); }
  [[nodiscard]] bool u64(uint64_t* v) { return get(v); }
  [[nodiscard]] bool i32(int32_t* v) { return get(v); }
  [[nodiscard]] bool i64(int64_t* v) { return get(v); }
  // n bytes into p.
  [[nodiscard]] bool raw(void* p, size_t n) {
    if (n > left()) return false;
    if (n != 0) std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  // n bytes into *s.
  [[nodiscard]] bool raw(size_t n, std::string* s) {
    if (n > left()) return false;
    s->assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  // The next n bytes, in place (a view into the input).
  [[nodiscard]] bool view(size_t n, std::span<const uint8_t>* out) {
    if (n > left()) return false;
    *out = in_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  // n scalars into *out (resized to n; a std::vector or std::pmr::vector of an arithmetic type).
  template <typename Vec>
  [[nodiscard]] bool array(size_t n, Vec* out) {
    using T = typename Vec::value_type;
    static_assert(std::is_arithmetic_v<T>, "array takes vectors of integers and floats");
    if (n > left() / sizeof(T)) return false;
    out->resize(n);
    return raw(out->data(), n * sizeof(T));
  }
  // A u32 length (at most max_len), then that many bytes. On a length over max_len the position
  // stays after the length.
  [[nodiscard]] bool str32(std::string* s, size_t max_len) {
    uint32_t n = 0;
    return u32(&n) && n <= max_len && raw(n, s);
  }
  [[nodiscard]] bool skip(size_t n) {
    if (n > left()) return false;
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return in_.size() - pos_; }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace leanemb
