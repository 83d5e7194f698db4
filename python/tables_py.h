// The table-interface part of the _leanemb module (python/tables_py.cc).
#pragma once

#include <pybind11/pybind11.h>

#include "leanemb/memory.h"

namespace leanemb::python {

// {category name: {"current_bytes", "peak_bytes"}} of every memory category in m.
pybind11::dict category_dict(const MemoryStats& m);

// Adds Tables, checkpoint_verify / checkpoint_digest / checkpoint_step / latest_checkpoint and
// predict_memory to `m`.
void bind_tables(pybind11::module_& m);

}  // namespace leanemb::python
