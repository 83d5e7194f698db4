// The library's collective helpers over a Communicator (the interface itself, make_communicator
// and MpiRuntime are public: leanemb/communicator.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "leanemb/communicator.h"
#include "leanemb/status.h"

namespace leanemb::dist {

// "1, 3": the indices of the nonzero entries of a per-rank flag vector (all-reduced failure flags).
std::string flagged_ranks(std::span<const int64_t> flags);

// Collective: every rank learns which ranks have a failed `mine` (one all-reduce of flags).
// Returns OK when every rank succeeded; on a failed rank its own error prefixed with
// "<what>: rank(s) R... failed; rank r: "; on the others InvalidArgument "<what>: rank(s) R...
// failed". So no rank goes on alone after another failed. Errors of the all-reduce itself
// (Internal: a timeout naming the silent rank) are returned as they are.
Status agree(Communicator& comm, const Status& mine, const std::string& what);

}  // namespace leanemb::dist
