// One table of names per enum, and the parse/name pair every enum of the project derives from it.
//
// An enum E gets its names by specializing EnumNames<E> next to its parse/name functions:
//
//   template <> struct EnumNames<CachePolicy> {
//     static constexpr std::string_view kWhat = "cache policy";   // used in error messages
//     static constexpr EnumName<CachePolicy> kNames[] = {
//         {CachePolicy::kLru, "lru"}, {CachePolicy::kLfu, "lfu"}, {CachePolicy::kClock, "clock"}};
//   };
//
// then parse_enum<CachePolicy>("lfu") returns kLfu, enum_name(CachePolicy::kClock) returns
// "clock", and parse_enum<CachePolicy>("mru") fails with
//   InvalidArgument "unknown cache policy 'mru' (expected lru, lfu or clock)".
// An entry's `aliases` is a space-separated list of further accepted spellings ("f32 float32").
// The canonical name is what enum_name returns and what files, configs and digests record; an
// alias is only ever read. A value may appear in the table under one name only, but two values
// may share a name when a subset decides between them (DType: "int8" is the row format for rows
// and the block-wise format for optimizer state); parse_enum_in takes that subset.
//
// Everything here is constexpr data and pure functions: thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "leanemb/status.h"

namespace leanemb {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;     // canonical: written to files, configs, JSON
  std::string_view aliases;  // space-separated further spellings accepted by parse ("" = none)
};

// Specialize with kWhat (a noun for messages) and kNames (an array of EnumName<E>).
template <typename E>
struct EnumNames;

namespace enum_names_internal {

inline bool alias_matches(std::string_view aliases, std::string_view s) {
  while (!aliases.empty()) {
    const size_t sp = aliases.find(' ');
    const std::string_view a = aliases.substr(0, sp);
    if (!a.empty() && a == s) return true;
    if (sp == std::string_view::npos) break;
    aliases.remove_prefix(sp + 1);
  }
  return false;
}

// "a", "a or b", "a, b or c": the canonical names of the values that `keep` accepts.
template <typename E, typename Keep>
std::string name_list(Keep keep) {
  std::string out;
  size_t n = 0, total = 0;
  for (const EnumName<E>& e : EnumNames<E>::kNames) total += keep(e.value) ? 1 : 0;
  for (const EnumName<E>& e : EnumNames<E>::kNames) {
    if (!keep(e.value)) continue;
    if (n > 0) out += n + 1 == total ? " or " : ", ";
    out += e.name;
    ++n;
  }
  return out;
}

template <typename E, typename Keep>
Result<E> parse(std::string_view s, std::string_view what, Keep keep) {
  for (const EnumName<E>& e : EnumNames<E>::kNames)
    if (keep(e.value) && (e.name == s || alias_matches(e.aliases, s))) return e.value;
  return invalid_argument("unknown " + std::string(what) + " '" + std::string(s) + "' (expected " +
                          name_list<E>(keep) + ")");
}

}  // namespace enum_names_internal

// The canonical name of v; "unknown" for a value outside the table (a corrupt cast).
template <typename E>
std::string_view enum_name(E v) {
  for (const EnumName<E>& e : EnumNames<E>::kNames)
    if (e.value == v) return e.name;
  return "unknown";
}

// The canonical names joined for messages: "lru, lfu or clock".
template <typename E>
std::string enum_name_list() {
  return enum_names_internal::name_list<E>([](E) { return true; });
}

// s as a canonical name or an alias. Errors: InvalidArgument "unknown <kWhat> 's' (expected ...)".
template <typename E>
Result<E> parse_enum(std::string_view s) {
  return enum_names_internal::parse<E>(s, EnumNames<E>::kWhat, [](E) { return true; });
}

// As parse_enum, restricted to the values in `allowed`; `what` names the use in the message.
template <typename E>
Result<E> parse_enum_in(std::string_view s, std::span<const E> allowed, std::string_view what) {
  return enum_names_internal::parse<E>(s, what, [&](E v) {
    for (E a : allowed)
      if (a == v) return true;
    return false;
  });
}

// The canonical names of `allowed` joined for messages.
template <typename E>
std::string enum_name_list_in(std::span<const E> allowed) {
  return enum_names_internal::name_list<E>([&](E v) {
    for (E a : allowed)
      if (a == v) return true;
    return false;
  });
}

}  // namespace leanemb
