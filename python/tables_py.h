// The table-interface part of the _leanemb module (python/tables_py.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace leanemb::python {

// Adds Tables, checkpoint_verify / checkpoint_digest / checkpoint_step / latest_checkpoint and
// predict_memory to `m`.
void bind_tables(pybind11::module_& m);

}  // namespace leanemb::python
