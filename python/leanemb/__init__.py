"""leanemb: embedding tables whose rows and optimizer state may exceed fast memory.

The package wraps the native module ``_leanemb`` (python/tables_py.cc, the table interface
leanemb/tables.h). ``import leanemb.torch`` gives the PyTorch modules (docs/python.md).

After ``cmake --build --preset release`` the package lies in ``build/release/python/leanemb``::

    PYTHONPATH=build/release/python /usr/bin/python3 -c 'import leanemb.torch'
"""
import os as _os
import sys as _sys

# OpenMP threads that spin after each torch op steal the cores of leanemb's worker pool (on 2
# cores a step ran 7x slower, bench/torch_overhead.py). The CLI runs with passive waiting; here it
# is the default only when the OpenMP runtime is not loaded yet (leanemb imported before torch).
_OMP_WAIT_POLICY_GIVEN = "OMP_WAIT_POLICY" in _os.environ
_TORCH_LOADED_FIRST = "torch" in _sys.modules
_os.environ.setdefault("OMP_WAIT_POLICY", "passive")

try:
    # The build puts the module next to this file. One process must load it once: a plain
    # `import _leanemb` (the benchmarks) and this package share the same module object.
    if "_leanemb" in _sys.modules:
        _C = _sys.modules["_leanemb"]
    else:
        from . import _leanemb as _C  # type: ignore[attr-defined]

        _sys.modules["_leanemb"] = _C
except ImportError as _e:  # pragma: no cover - depends on the build
    raise ImportError(
        "leanemb: the native module _leanemb is missing next to %s; build it with "
        "`cmake --build --preset release` and put build/release/python on PYTHONPATH (%s)"
        % (_os.path.dirname(__file__), _e)) from _e

Tables = _C.Tables

__all__ = ["Tables", "checkpoint_verify", "checkpoint_digest", "latest_checkpoint", "plan"]


def checkpoint_verify(path):
    """Checks every checksum of checkpoint directory ``path`` (as ``leanemb ckpt verify``).

    A sharded checkpoint's shards are verified too. Returns a dict (step, num_entries,
    entry_bytes, num_files, num_blocks, num_shards, format_version, checkpoint_id); raises OSError
    (corrupt data) or FileNotFoundError (no checkpoint)."""
    return _C.checkpoint_verify(str(path))


def checkpoint_digest(path):
    """The layout-independent content digest of a checkpoint (as ``leanemb ckpt digest``)."""
    return _C.checkpoint_digest(str(path))


def latest_checkpoint(out_dir):
    """The newest complete checkpoint directory under ``<out_dir>/checkpoints``."""
    return _C.latest_checkpoint(str(out_dir))


def _config_dim_rows(c):
    if isinstance(c, dict):
        return c
    return {"name": c.name, "num_rows": int(c.num_embeddings), "dim": int(c.embedding_dim),
            "pooling": _pooling_word(getattr(c, "pooling", "sum"))}


def _pooling_word(p):
    p = getattr(p, "name", p)
    return str(p).lower()


def plan(tables, batch_size, ids_per_sample=1, mean_ids_per_sample=None, zipf=0.0, dtype="fp32",
         optimizer="sgd", state_dtype="fp32", placement="", cache_fraction=1.0, num_threads=0,
         estimate="expected"):
    """Predicts the memory of an embedding-only workload with leanemb's memory model.

    ``tables``: EmbeddingBagConfig / EmbeddingConfig objects (leanemb.torch) or dicts with
    name, num_rows, dim, pooling (and optionally max_ids_per_sample, mean_ids_per_sample,
    expected_unique_rows, zipf). ``ids_per_sample``: the longest bag (pooled) or sequence
    length (pooling none); applied to every table given as a config. Every table shares the
    row ``dtype``, ``optimizer`` and ``state_dtype`` (the memory model's workload has one row
    format). Returns {"device": {...}, "host": {...}, "table_bytes", "ids_per_step",
    "unique_per_step", ...}: per tier the peak bytes by category (``peak_by_category``), the
    peak of their sum (``peak_bytes``) and the phase where it happens. The model downstream of
    the embedding is not counted; its output and the output's gradient are. See docs/plan.md.
    """
    specs = []
    for c in tables:
        d = dict(_config_dim_rows(c))
        if not isinstance(c, dict):
            d["max_ids_per_sample"] = int(ids_per_sample)
            d["mean_ids_per_sample"] = float(mean_ids_per_sample if mean_ids_per_sample is not None else ids_per_sample)
            d["zipf"] = float(zipf)
        specs.append(d)
    opts = {"dtype": _dtype_word(dtype), "optimizer": optimizer, "state_dtype": state_dtype,
            "placement": placement, "cache_fraction": float(cache_fraction), "num_threads": int(num_threads),
            "estimate": estimate}
    return _C.predict_memory(specs, int(batch_size), opts)


def _dtype_word(dt):
    """'fp32' | 'fp16' | 'bf16' | 'int8' from a string or a torch dtype."""
    s = str(dt)
    return {"torch.float32": "fp32", "torch.float": "fp32", "torch.float16": "fp16", "torch.half": "fp16",
            "torch.bfloat16": "bf16", "torch.int8": "int8", "torch.uint8": "int8"}.get(s, s)
