// _leanemb: the native module. This file: a small binding of one EmbeddingCollection (one
// table, one feature) and of the CTR data reader, used by bench/peer_torch.py,
// bench/dlrm_torch.py and tests/torch_parity_test.py. The table interface behind the `leanemb`
// Python package (leanemb.torch, docs/python.md) is python/tables_py.cc (Tables, checkpoints,
// predict_memory), added to the same module.
//
//   Collection(num_rows, dim, dtype="fp32", optimizer="sgd", lr=0.01, eps=1e-8, beta1=0.9,
//              beta2=0.999, weight_decay=0.0, state_dtype="fp32", pooling="sum", threads=2,
//              seed=0, use_reference=False)
//     .set_weights(w)              w: float [num_rows, dim] (rounded to the row dtype)
//     .get_weights() -> float32 [num_rows, dim]
//     .get_state()   -> float32 [num_rows, state_floats_per_row]
//     .forward(ids, offsets, per_sample_weights=None) -> float32 [B, dim]  ([nnz, dim] for
//                                                         pooling="none")
//     .backward_update(ids, offsets, grad, per_sample_weights=None) -> int  (unique rows updated)
//     .memory() -> {category: {"current_bytes": int, "peak_bytes": int}}
//     .bytes_per_param() -> float  ((weights + optimizer state bytes) / (num_rows * dim))
//     .step  (read-only: successful updates so far)
//   zipf_batches(num_rows, batch_size, bag_size, alpha, seed, num_batches) -> [(ids, offsets)]
//     the id stream of `leanemb bench` (bench/zipf.h), so Python peers get identical arrays.
//   read_ctr(files, num_dense, num_sparse, table_rows, batch_size, max_batches=0, shuffle_buffer=0,
//            seed=0, num_epochs=1, max_len=0)
//       -> [(labels f32 [B], dense f32 [B, num_dense], [(ids int64 [nnz], offsets int64 [B+1]), ...])]
//     the batches `leanemb train` sees: data::DataReader (src/data/reader.h) over `files` (a path
//     or a list; Criteo TSV or leanemb binary) with data::make_schema(num_dense, num_sparse,
//     table_rows) (an int for every feature, or one per feature; ids = hash % rows); one tuple per
//     batch, one (ids, offsets) pair per sparse feature (EmbeddingBag's include_last_offset
//     layout). max_batches > 0 stops after that many batches. Used by bench/dlrm_torch.py.
//   CtrReader(files, num_dense, num_sparse, table_rows, batch_size, shuffle_buffer=0, seed=0,
//             num_epochs=1, max_len=0): the same batches one at a time (an iterator of
//     (labels, dense, values int64 [nnz], lengths int64 [num_sparse * B]) in KeyedJaggedTensor
//     layout). Used by examples/torch_dlrm.py.
//
// Arrays: ids and offsets must hold integers (any integer dtype; converted to int64); weights,
// gradients and per-sample weights must hold floats (converted to float32). Errors from the
// library raise ValueError (MemoryError for an exhausted budget or failed allocation) with the
// Status message. int8 rows are lookup-only: such a Collection is frozen and backward_update
// raises ValueError. A gradient with Inf/NaN skips the step (nothing changes) and returns 0.
//
// Threads: the GIL is released while the engine computes; calls on one Collection are
// serialized by a mutex (the engine itself must not run two calls at once).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "leanemb/dtype.h"
#include "leanemb/embedding.h"
#include "leanemb/memory.h"
#include "leanemb/optimizer.h"
#include "data/reader.h"
#include "tables_py.h"
#include "zipf.h"

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

using I64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A 1-D int64 array from any integer array-like; floats and bools are rejected (silently
// truncating 1.7 to row 1 would hide bugs).
I64Array as_ids(const py::handle& obj, const char* name) {
  py::array a = py::array::ensure(obj);
  if (!a) throw py::value_error(std::string(name) + " must be an array of integers");
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    throw py::value_error(std::string(name) + " must hold integers (int64), got dtype " + std::string(py::str(a.dtype())));
  if (a.ndim() != 1) throw py::value_error(std::string(name) + " must be 1-D, got " + std::to_string(a.ndim()) + " dimensions");
  return I64Array::ensure(a);
}

F32Array as_floats(const py::handle& obj, const char* name) {
  py::array a = py::array::ensure(obj);
  if (!a) throw py::value_error(std::string(name) + " must be an array of floats");
  const char kind = a.dtype().kind();
  if (kind != 'f') throw py::value_error(std::string(name) + " must hold floats (float32), got dtype " + std::string(py::str(a.dtype())));
  return F32Array::ensure(a);
}

std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

class PyCollection {
 public:
  PyCollection(int64_t num_rows, int64_t dim, const std::string& dtype, const std::string& optimizer, float lr,
               float eps, float beta1, float beta2, float weight_decay, const std::string& state_dtype,
               const std::string& pooling, int threads, uint64_t seed, bool use_reference) {
    if (threads < 0) throw py::value_error("threads must be >= 0 (0 = OpenMP's default)");
    TableOptions t;
    t.name = "table";
    t.num_rows = num_rows;
    t.dim = dim;
    t.dtype = unwrap(parse_dtype(dtype, DTypeUse::kRows));
    t.optimizer.kind = unwrap(parse_optimizer(optimizer));
    t.optimizer.learning_rate = lr;
    t.optimizer.eps = eps;
    t.optimizer.beta1 = beta1;
    t.optimizer.beta2 = beta2;
    t.optimizer.weight_decay = weight_decay;
    t.optimizer.state_dtype = unwrap(parse_dtype(state_dtype, DTypeUse::kOptimizerState));
    t.frozen = !dtype_traits(t.dtype).trainable;
    CollectionOptions o;
    o.tables.push_back(t);
    o.features.push_back(FeatureOptions{"feature", 0, unwrap(parse_pooling(pooling))});
    o.num_threads = threads;
    o.seed = seed;
    o.use_reference_kernels = use_reference;
    pooling_ = o.features[0].pooling;
    alloc_ = std::make_unique<TrackingAllocator>();
    std::optional<Result<std::unique_ptr<EmbeddingCollection>>> c;  // (a Result cannot be empty)
    {
      py::gil_scoped_release nogil;
      c.emplace(EmbeddingCollection::create(o, alloc_.get()));
    }
    coll_ = unwrap(std::move(*c));
  }

  ~PyCollection() {
    coll_.reset();  // before the allocator it came from
    alloc_.reset();
  }

  int64_t num_rows() const { return coll_->options().tables[0].num_rows; }
  int64_t dim() const { return coll_->options().tables[0].dim; }
  bool frozen() const { return coll_->options().tables[0].frozen; }

  void set_weights(const py::object& w_obj) {
    F32Array w = as_floats(w_obj, "weights");
    if (w.ndim() != 2 || w.shape(0) != num_rows() || w.shape(1) != dim())
      throw py::value_error("weights must have shape (" + std::to_string(num_rows()) + ", " + std::to_string(dim()) +
                            "), got " + shape_str(w));
    Status s;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      s = coll_->write_rows(0, 0, num_rows(), std::span<const float>(w.data(), static_cast<size_t>(w.size())));
    }
    if (!s.ok()) raise(s);
  }

  py::array_t<float> get_weights() const {
    py::array_t<float> out({num_rows(), dim()});
    float* p = out.mutable_data();
    Status s;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      s = coll_->read_rows(0, 0, num_rows(), std::span<float>(p, static_cast<size_t>(num_rows() * dim())));
    }
    if (!s.ok()) raise(s);
    return out;
  }

  py::array_t<float> get_state() const {
    const int64_t k = coll_->state_floats_per_row(0);
    py::array_t<float> out({num_rows(), k});
    if (k == 0) return out;
    float* p = out.mutable_data();
    Status s;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      s = coll_->read_state(0, 0, num_rows(), std::span<float>(p, static_cast<size_t>(num_rows() * k)));
    }
    if (!s.ok()) raise(s);
    return out;
  }

  py::array_t<float> forward(const py::object& ids_obj, const py::object& offsets_obj, const py::object& psw_obj) {
    Inputs in = inputs(ids_obj, offsets_obj, psw_obj);
    const int64_t rows_out = pooling_ == PoolingMode::kNone ? in.nnz : in.batch_size;
    py::array_t<float> out({rows_out, dim()});
    float* p = out.mutable_data();
    const size_t n = static_cast<size_t>(rows_out * dim());
    Status s;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      const SparseBatch b = in.batch();
      if (pooling_ == PoolingMode::kNone) {
        const std::span<float> seq[1] = {std::span<float>(p, n)};
        s = coll_->forward(b, {}, seq);
      } else {
        s = coll_->forward(b, std::span<float>(p, n));
      }
    }
    if (!s.ok()) raise(s);
    return out;
  }

  int64_t backward_update(const py::object& ids_obj, const py::object& offsets_obj, const py::object& grad_obj,
                          const py::object& psw_obj) {
    if (frozen())
      throw py::value_error("FailedPrecondition: " + std::string(dtype_name(coll_->options().tables[0].dtype)) +
                            " rows are lookup-only (the table is frozen); use fp32, fp16 or bf16 to train");
    Inputs in = inputs(ids_obj, offsets_obj, psw_obj);
    F32Array g = as_floats(grad_obj, "grad");
    const int64_t rows_g = pooling_ == PoolingMode::kNone ? in.nnz : in.batch_size;
    if (g.ndim() != 2 || g.shape(0) != rows_g || g.shape(1) != dim())
      throw py::value_error("grad must have shape (" + std::to_string(rows_g) + ", " + std::to_string(dim()) + ") = (" +
                            (pooling_ == PoolingMode::kNone ? "nnz" : "batch_size") + ", dim), got " + shape_str(g));
    const size_t n = static_cast<size_t>(g.size());
    std::optional<Result<UpdateReport>> r;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      const SparseBatch b = in.batch();
      if (pooling_ == PoolingMode::kNone) {
        const std::span<const float> seq[1] = {std::span<const float>(g.data(), n)};
        r.emplace(coll_->backward_update(b, {}, seq));
      } else {
        r.emplace(coll_->backward_update(b, std::span<const float>(g.data(), n)));
      }
    }
    const UpdateReport rep = unwrap(std::move(*r));
    return rep.skipped_nonfinite ? 0 : rep.unique_rows;
  }

  py::dict memory() const { return python::category_dict(coll_->memory_stats()); }

  double bytes_per_param() const {
    const MemoryStats m = coll_->memory_stats();
    const double bytes = static_cast<double>(m[Category::kWeights].current_bytes + m[Category::kOptimizerState].current_bytes);
    return bytes / (static_cast<double>(num_rows()) * static_cast<double>(dim()));
  }

  int64_t step() const { return coll_->step(); }
  int64_t state_floats_per_row() const { return coll_->state_floats_per_row(0); }
  int64_t stride_bytes() const { return static_cast<int64_t>(coll_->layout(0).stride_bytes); }

 private:
  // Converted arrays, kept alive for the call.
  struct Inputs {
    I64Array ids, offsets;
    std::optional<F32Array> psw;
    int64_t nnz = 0, batch_size = 0;
    SparseBatch batch() const {
      SparseBatch b;
      b.batch_size = batch_size;
      FeatureInput f;
      f.ids = std::span<const int64_t>(ids.data(), static_cast<size_t>(nnz));
      f.offsets = std::span<const int64_t>(offsets.data(), static_cast<size_t>(batch_size + 1));
      if (psw) f.weights = std::span<const float>(psw->data(), static_cast<size_t>(psw->size()));
      b.features.push_back(f);
      return b;
    }
  };

  Inputs inputs(const py::object& ids_obj, const py::object& offsets_obj, const py::object& psw_obj) const {
    Inputs in;
    in.ids = as_ids(ids_obj, "ids");
    in.offsets = as_ids(offsets_obj, "offsets");
    if (in.offsets.size() < 1) throw py::value_error("offsets must have batch_size + 1 >= 1 entries, got 0");
    in.nnz = static_cast<int64_t>(in.ids.size());
    in.batch_size = static_cast<int64_t>(in.offsets.size()) - 1;
    if (!psw_obj.is_none()) {
      in.psw = as_floats(psw_obj, "per_sample_weights");
      if (in.psw->ndim() != 1 || in.psw->size() != in.nnz)
        throw py::value_error("per_sample_weights must have shape (nnz,) = (" + std::to_string(in.nnz) + ",), got " +
                              shape_str(*in.psw));
    }
    return in;
  }

  PoolingMode pooling_ = PoolingMode::kSum;
  std::unique_ptr<TrackingAllocator> alloc_;
  std::unique_ptr<EmbeddingCollection> coll_;
  mutable std::mutex mu_;
};

py::list zipf_batches(int64_t num_rows, int64_t batch_size, int64_t bag_size, double alpha, uint64_t seed,
                      int64_t num_batches) {
  std::optional<Result<std::vector<bench::IdBatch>>> r;
  {
    py::gil_scoped_release nogil;
    r.emplace(bench::generate_id_stream({num_rows, batch_size, bag_size, alpha, seed}, num_batches));
  }
  std::vector<bench::IdBatch> batches = unwrap(std::move(*r));
  py::list out;
  for (auto& b : batches) {
    py::array_t<int64_t> ids(static_cast<py::ssize_t>(b.ids.size()));
    py::array_t<int64_t> offsets(static_cast<py::ssize_t>(b.offsets.size()));
    std::copy(b.ids.begin(), b.ids.end(), ids.mutable_data());
    std::copy(b.offsets.begin(), b.offsets.end(), offsets.mutable_data());
    out.append(py::make_tuple(ids, offsets));
  }
  return out;
}

std::vector<int64_t> as_int_list(const py::handle& obj, const char* name) {
  if (py::isinstance<py::int_>(obj)) return {obj.cast<int64_t>()};
  try {
    return obj.cast<std::vector<int64_t>>();
  } catch (const py::cast_error&) {
    throw py::value_error(std::string(name) + " must be an int or a list of ints");
  }
}

py::list read_ctr(const py::object& files_obj, int num_dense, int num_sparse, const py::object& table_rows_obj,
                  int64_t batch_size, int64_t max_batches, int64_t shuffle_buffer, uint64_t seed, int64_t num_epochs,
                  int64_t max_len) {
  data::ReaderOptions ro;
  if (py::isinstance<py::str>(files_obj)) ro.files = {files_obj.cast<std::string>()};
  else ro.files = files_obj.cast<std::vector<std::string>>();
  const std::vector<int64_t> rows = as_int_list(table_rows_obj, "table_rows");
  ro.schema = unwrap(data::make_schema(num_dense, num_sparse, rows, max_len));
  ro.batch_size = batch_size;
  ro.shuffle_buffer = shuffle_buffer;
  ro.seed = seed;
  ro.num_epochs = num_epochs;
  if (num_epochs < 1) throw py::value_error("num_epochs must be >= 1 (the list must end)");
  if (max_batches < 0) throw py::value_error("max_batches must be >= 0 (0 = all)");
  std::unique_ptr<data::DataReader> reader = unwrap(data::DataReader::open(ro));
  data::Batch b;
  py::list out;
  for (int64_t n = 0; max_batches == 0 || n < max_batches; ++n) {
    std::optional<Result<bool>> more;
    {
      py::gil_scoped_release nogil;
      more.emplace(reader->next(&b));
    }
    if (!unwrap(std::move(*more))) break;
    const py::ssize_t B = b.batch_size;
    py::array_t<float> labels(B);
    py::array_t<float> dense({B, static_cast<py::ssize_t>(b.num_dense)});
    std::copy(b.labels.begin(), b.labels.end(), labels.mutable_data());
    std::copy(b.dense.begin(), b.dense.end(), dense.mutable_data());
    py::list sparse;
    for (const data::SparseColumn& c : b.sparse) {
      py::array_t<int64_t> ids(static_cast<py::ssize_t>(c.ids.size()));
      py::array_t<int64_t> offsets(static_cast<py::ssize_t>(c.offsets.size()));
      std::copy(c.ids.begin(), c.ids.end(), ids.mutable_data());
      std::copy(c.offsets.begin(), c.offsets.end(), offsets.mutable_data());
      sparse.append(py::make_tuple(ids, offsets));
    }
    out.append(py::make_tuple(labels, dense, sparse));
  }
  return out;
}

// read_ctr one batch at a time: iterating yields (labels, dense, values, lengths) in the
// KeyedJaggedTensor layout (values: feature 0's ids of every sample, then feature 1's, ...;
// lengths [num_sparse * B]), so a training loop holds one batch, not the data set.
class CtrReader {
 public:
  CtrReader(const py::object& files_obj, int num_dense, int num_sparse, const py::object& table_rows_obj,
            int64_t batch_size, int64_t shuffle_buffer, uint64_t seed, int64_t num_epochs, int64_t max_len) {
    data::ReaderOptions ro;
    if (py::isinstance<py::str>(files_obj)) ro.files = {files_obj.cast<std::string>()};
    else ro.files = files_obj.cast<std::vector<std::string>>();
    ro.schema = unwrap(data::make_schema(num_dense, num_sparse, as_int_list(table_rows_obj, "table_rows"), max_len));
    ro.batch_size = batch_size;
    ro.shuffle_buffer = shuffle_buffer;
    ro.seed = seed;
    ro.num_epochs = num_epochs;
    if (num_epochs < 1) throw py::value_error("num_epochs must be >= 1");
    reader_ = unwrap(data::DataReader::open(ro));
  }

  py::tuple next() {
    std::optional<Result<bool>> more;
    {
      py::gil_scoped_release nogil;
      more.emplace(reader_->next(&b_));
    }
    if (!unwrap(std::move(*more))) throw py::stop_iteration();
    const py::ssize_t B = b_.batch_size;
    py::array_t<float> labels(B);
    py::array_t<float> dense({B, static_cast<py::ssize_t>(b_.num_dense)});
    std::copy(b_.labels.begin(), b_.labels.end(), labels.mutable_data());
    std::copy(b_.dense.begin(), b_.dense.end(), dense.mutable_data());
    size_t nnz = 0;
    for (const data::SparseColumn& c : b_.sparse) nnz += c.ids.size();
    py::array_t<int64_t> values(static_cast<py::ssize_t>(nnz));
    py::array_t<int64_t> lengths(static_cast<py::ssize_t>(b_.sparse.size()) * B);
    int64_t* v = values.mutable_data();
    int64_t* l = lengths.mutable_data();
    for (const data::SparseColumn& c : b_.sparse) {
      v = std::copy(c.ids.begin(), c.ids.end(), v);
      for (py::ssize_t i = 0; i < B; ++i) *l++ = c.offsets[static_cast<size_t>(i) + 1] - c.offsets[static_cast<size_t>(i)];
    }
    return py::make_tuple(labels, dense, values, lengths);
  }

 private:
  std::unique_ptr<data::DataReader> reader_;
  data::Batch b_;
};

}  // namespace

PYBIND11_MODULE(_leanemb, m) {
  m.doc() = "leanemb's native module: Tables (the table interface, python/tables_py.cc; used by the leanemb package), "
            "and Collection, zipf_batches, read_ctr (benchmarks, python/leanemb_py.cc)";
  leanemb::python::bind_tables(m);
  py::class_<PyCollection>(m, "Collection")
      .def(py::init<int64_t, int64_t, const std::string&, const std::string&, float, float, float, float, float,
                    const std::string&, const std::string&, int, uint64_t, bool>(),
           py::arg("num_rows"), py::arg("dim"), py::arg("dtype") = "fp32", py::arg("optimizer") = "sgd",
           py::arg("lr") = 0.01f, py::arg("eps") = 1e-8f, py::arg("beta1") = 0.9f, py::arg("beta2") = 0.999f,
           py::arg("weight_decay") = 0.0f, py::arg("state_dtype") = "fp32", py::arg("pooling") = "sum",
           py::arg("threads") = 2, py::arg("seed") = 0, py::arg("use_reference") = false)
      .def("set_weights", &PyCollection::set_weights, py::arg("weights"),
           "Sets every row from float [num_rows, dim] (rounded to nearest for fp16/bf16/int8 rows).")
      .def("get_weights", &PyCollection::get_weights, "Rows as float32 [num_rows, dim] (dequantized).")
      .def("get_state", &PyCollection::get_state,
           "Optimizer state as float32 [num_rows, state_floats_per_row]: per-element states, then the per-row scalar.")
      .def("forward", &PyCollection::forward, py::arg("ids"), py::arg("offsets"), py::arg("per_sample_weights") = py::none(),
           "Pooled lookup: float32 [B, dim] for offsets of B + 1 entries ([nnz, dim] for pooling='none').")
      .def("backward_update", &PyCollection::backward_update, py::arg("ids"), py::arg("offsets"), py::arg("grad"),
           py::arg("per_sample_weights") = py::none(),
           "Applies the optimizer with the gradient of the pooled output [B, dim]; returns the unique rows updated "
           "(0 when the gradient held Inf/NaN and the step was skipped).")
      .def("memory", &PyCollection::memory, "{category: {'current_bytes', 'peak_bytes'}} of this collection's allocator.")
      .def("bytes_per_param", &PyCollection::bytes_per_param, "(weights + optimizer state bytes) / (num_rows * dim).")
      .def_property_readonly("step", &PyCollection::step, "Successful updates so far.")
      .def_property_readonly("num_rows", &PyCollection::num_rows)
      .def_property_readonly("dim", &PyCollection::dim)
      .def_property_readonly("state_floats_per_row", &PyCollection::state_floats_per_row)
      .def_property_readonly("stride_bytes", &PyCollection::stride_bytes);
  m.def("zipf_batches", &zipf_batches, py::arg("num_rows"), py::arg("batch_size"), py::arg("bag_size"), py::arg("alpha"),
        py::arg("seed"), py::arg("num_batches"),
        "The id stream of `leanemb bench` (bench/zipf.h): a list of (ids int64 [B*L], offsets int64 [B+1]).");
  py::class_<CtrReader>(m, "CtrReader",
                        "Iterates over the batches of CTR files as (labels f32 [B], dense f32 [B, num_dense], "
                        "values int64 [nnz], lengths int64 [num_sparse * B]) (KeyedJaggedTensor layout).")
      .def(py::init<const py::object&, int, int, const py::object&, int64_t, int64_t, uint64_t, int64_t, int64_t>(),
           py::arg("files"), py::arg("num_dense"), py::arg("num_sparse"), py::arg("table_rows"), py::arg("batch_size"),
           py::arg("shuffle_buffer") = 0, py::arg("seed") = 0, py::arg("num_epochs") = 1, py::arg("max_len") = 0)
      .def("__iter__", [](CtrReader& r) -> CtrReader& { return r; }, py::return_value_policy::reference_internal)
      .def("__next__", &CtrReader::next);
  m.def("read_ctr", &read_ctr, py::arg("files"), py::arg("num_dense"), py::arg("num_sparse"), py::arg("table_rows"),
        py::arg("batch_size"), py::arg("max_batches") = 0, py::arg("shuffle_buffer") = 0, py::arg("seed") = 0,
        py::arg("num_epochs") = 1, py::arg("max_len") = 0,
        "The batches of leanemb's DataReader over CTR files: a list of (labels f32 [B], dense f32 [B, num_dense], "
        "[(ids int64 [nnz], offsets int64 [B+1]) per sparse feature]).");
}
