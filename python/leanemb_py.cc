// _leanemb: the native module. The table interface behind the `leanemb` Python package
// (leanemb.torch, docs/python.md) is python/tables_py.cc (Tables, checkpoints, predict_memory,
// MPI); this file adds the CTR data reader (leanemb/ctr_reader.h) and defines the module.
//
//   read_ctr(files, num_dense, num_sparse, table_rows, batch_size, max_batches=0, shuffle_buffer=0,
//            seed=0, num_epochs=1, max_len=0)
//       -> [(labels f32 [B], dense f32 [B, num_dense], [(ids int64 [nnz], offsets int64 [B+1]), ...])]
//     the batches `leanemb train` sees: leanemb::CtrReader over `files` (a path or a list;
//     Criteo TSV or leanemb binary) with table_rows an int for every feature, or one per feature
//     (ids = hash % rows); one tuple per batch, one (ids, offsets) pair per sparse feature
//     (EmbeddingBag's include_last_offset layout). max_batches > 0 stops after that many
//     batches. Used by bench/dlrm_torch.py.
//   CtrReader(files, num_dense, num_sparse, table_rows, batch_size, shuffle_buffer=0, seed=0,
//             num_epochs=1, max_len=0): the same batches one at a time (an iterator of
//     (labels, dense, values int64 [nnz], lengths int64 [num_sparse * B]) in KeyedJaggedTensor
//     layout). Used by examples/torch_dlrm.py.
//
// Errors from the library raise ValueError (MemoryError for an exhausted budget or failed
// allocation) with the Status message. The GIL is released while a batch is read.
//
// (The older `Collection` binding of one table and `zipf_batches` were retired: benchmarks use
// leanemb.torch / _leanemb.Tables and generate their ids in numpy, bench/peer_torch.py.)
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "leanemb/ctr_reader.h"
#include "leanemb/status.h"
#include "tables_py.h"

namespace py = pybind11;
using namespace leanemb;

namespace {

[[noreturn]] void raise(const Status& s) {
  if (s.code() == StatusCode::kResourceExhausted) {
    PyErr_SetString(PyExc_MemoryError, s.to_string().c_str());
    throw py::error_already_set();
  }
  throw py::value_error(s.to_string());
}

template <typename T>
T unwrap(Result<T> r) {
  if (!r.ok()) raise(r.status());
  return std::move(r).value();
}

std::vector<int64_t> as_int_list(const py::handle& obj, const char* name) {
  if (py::isinstance<py::int_>(obj)) return {obj.cast<int64_t>()};
  try {
    return obj.cast<std::vector<int64_t>>();
  } catch (const py::cast_error&) {
    throw py::value_error(std::string(name) + " must be an int or a list of ints");
  }
}

std::unique_ptr<CtrReader> open_ctr(const py::object& files_obj, int num_dense, int num_sparse,
                                    const py::object& table_rows_obj, int64_t batch_size, int64_t shuffle_buffer,
                                    uint64_t seed, int64_t num_epochs, int64_t max_len) {
  CtrReaderOptions o;
  if (py::isinstance<py::str>(files_obj)) o.files = {files_obj.cast<std::string>()};
  else o.files = files_obj.cast<std::vector<std::string>>();
  o.num_dense = num_dense;
  o.num_sparse = num_sparse;
  o.table_rows = as_int_list(table_rows_obj, "table_rows");
  o.max_len = max_len;
  o.batch_size = batch_size;
  o.shuffle_buffer = shuffle_buffer;
  o.seed = seed;
  o.num_epochs = num_epochs;
  return unwrap(CtrReader::open(o));
}

// The next batch of `r` (false at the end), read with the GIL released.
bool next_batch(CtrReader& r) {
  std::optional<Result<bool>> more;
  {
    py::gil_scoped_release nogil;
    more.emplace(r.next());
  }
  return unwrap(std::move(*more));
}

template <typename T>
py::array_t<T> copy_array(std::span<const T> v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// (labels [B], dense [B, num_dense]) of the reader's batch.
py::tuple labels_and_dense(const CtrReader& r) {
  const py::ssize_t B = r.batch_size();
  py::array_t<float> dense({B, static_cast<py::ssize_t>(r.num_dense())});
  std::copy(r.dense().begin(), r.dense().end(), dense.mutable_data());
  return py::make_tuple(copy_array(r.labels()), dense);
}

py::list read_ctr(const py::object& files_obj, int num_dense, int num_sparse, const py::object& table_rows_obj,
                  int64_t batch_size, int64_t max_batches, int64_t shuffle_buffer, uint64_t seed, int64_t num_epochs,
                  int64_t max_len) {
  if (num_epochs < 1) throw py::value_error("num_epochs must be >= 1 (the list must end)");
  if (max_batches < 0) throw py::value_error("max_batches must be >= 0 (0 = all)");
  std::unique_ptr<CtrReader> reader =
      open_ctr(files_obj, num_dense, num_sparse, table_rows_obj, batch_size, shuffle_buffer, seed, num_epochs, max_len);
  py::list out;
  for (int64_t n = 0; max_batches == 0 || n < max_batches; ++n) {
    if (!next_batch(*reader)) break;
    const py::tuple ld = labels_and_dense(*reader);
    py::list sparse;
    for (int f = 0; f < reader->num_sparse(); ++f)
      sparse.append(py::make_tuple(copy_array(reader->ids(f)), copy_array(reader->offsets(f))));
    out.append(py::make_tuple(ld[0], ld[1], sparse));
  }
  return out;
}

// read_ctr one batch at a time: iterating yields (labels, dense, values, lengths) in the
// KeyedJaggedTensor layout (values: feature 0's ids of every sample, then feature 1's, ...;
// lengths [num_sparse * B]), so a training loop holds one batch, not the data set.
class PyCtrReader {
 public:
  PyCtrReader(const py::object& files_obj, int num_dense, int num_sparse, const py::object& table_rows_obj,
              int64_t batch_size, int64_t shuffle_buffer, uint64_t seed, int64_t num_epochs, int64_t max_len) {
    if (num_epochs < 1) throw py::value_error("num_epochs must be >= 1");
    reader_ = open_ctr(files_obj, num_dense, num_sparse, table_rows_obj, batch_size, shuffle_buffer, seed, num_epochs,
                       max_len);
  }

  py::tuple next() {
    if (!next_batch(*reader_)) throw py::stop_iteration();
    const py::ssize_t B = reader_->batch_size();
    const int F = reader_->num_sparse();
    size_t nnz = 0;
    for (int f = 0; f < F; ++f) nnz += reader_->ids(f).size();
    py::array_t<int64_t> values(static_cast<py::ssize_t>(nnz));
    py::array_t<int64_t> lengths(static_cast<py::ssize_t>(F) * B);
    int64_t* v = values.mutable_data();
    int64_t* l = lengths.mutable_data();
    for (int f = 0; f < F; ++f) {
      const std::span<const int64_t> ids = reader_->ids(f), off = reader_->offsets(f);
      v = std::copy(ids.begin(), ids.end(), v);
      for (py::ssize_t i = 0; i < B; ++i) *l++ = off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)];
    }
    const py::tuple ld = labels_and_dense(*reader_);
    return py::make_tuple(ld[0], ld[1], values, lengths);
  }

 private:
  std::unique_ptr<CtrReader> reader_;
};

}  // namespace

PYBIND11_MODULE(_leanemb, m) {
  m.doc() = "leanemb's native module: Tables (the table interface, python/tables_py.cc; used by the leanemb package), "
            "and the CTR data reader read_ctr / CtrReader (python/leanemb_py.cc)";
  leanemb::python::bind_tables(m);
  py::class_<PyCtrReader>(m, "CtrReader",
                          "Iterates over the batches of CTR files as (labels f32 [B], dense f32 [B, num_dense], "
                          "values int64 [nnz], lengths int64 [num_sparse * B]) (KeyedJaggedTensor layout).")
      .def(py::init<const py::object&, int, int, const py::object&, int64_t, int64_t, uint64_t, int64_t, int64_t>(),
           py::arg("files"), py::arg("num_dense"), py::arg("num_sparse"), py::arg("table_rows"), py::arg("batch_size"),
           py::arg("shuffle_buffer") = 0, py::arg("seed") = 0, py::arg("num_epochs") = 1, py::arg("max_len") = 0)
      .def("__iter__", [](PyCtrReader& r) -> PyCtrReader& { return r; }, py::return_value_policy::reference_internal)
      .def("__next__", &PyCtrReader::next);
  m.def("read_ctr", &read_ctr, py::arg("files"), py::arg("num_dense"), py::arg("num_sparse"), py::arg("table_rows"),
        py::arg("batch_size"), py::arg("max_batches") = 0, py::arg("shuffle_buffer") = 0, py::arg("seed") = 0,
        py::arg("num_epochs") = 1, py::arg("max_len") = 0,
        "The batches of leanemb's DataReader over CTR files: a list of (labels f32 [B], dense f32 [B, num_dense], "
        "[(ids int64 [nnz], offsets int64 [B+1]) per sparse feature]).");
}
