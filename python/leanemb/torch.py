"""leanemb.torch: leanemb's embedding tables as torch.nn.Modules, the optimizer fused into backward.

    import leanemb.torch as lt
    ebc = lt.EmbeddingBagCollection([
        lt.EmbeddingBagConfig(name="t_user", num_embeddings=10**6, embedding_dim=64,
                              feature_names=["user"], optimizer="rowwise_adagrad",
                              learning_rate=0.05, dtype="bf16"),
    ])
    kjt = lt.KeyedJaggedTensor(keys=["user"], values=ids, lengths=lengths)
    pooled = ebc(kjt).values()          # [B, sum of dims]
    loss(pooled, ...).backward()        # the tables are updated here, in place

The full contract (autograd, several backward calls per step, optimizer="none", checkpoints,
zero-copy, limits) is docs/python.md.
"""
import dataclasses
import numbers
import os
import weakref
from typing import List, Optional

import numpy as np
import torch

import leanemb as _le

_C = _le._C

__all__ = [
    "KeyedJaggedTensor", "JaggedTensor", "KeyedTensor", "EmbeddingBagConfig", "EmbeddingConfig",
    "EmbeddingBagCollection", "EmbeddingCollection", "LearningRateAdapter", "init_distributed",
]


def init_distributed(backend="gloo", master_addr=None, master_port=None):
    """Under ``mpirun -np P``: initializes MPI (for sharded tables) and torch.distributed (for the
    dense part, e.g. DistributedDataParallel) with the MPI rank and size. MASTER_ADDR /
    MASTER_PORT default to the environment, else 127.0.0.1:29500 (one node). Returns (rank, P)."""
    info = _C.mpi_init()
    rank, size = int(info["rank"]), int(info["world_size"])
    os.environ["MASTER_ADDR"] = master_addr or os.environ.get("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(master_port or os.environ.get("MASTER_PORT", "29500"))
    import torch.distributed as dist  # noqa: PLC0415
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size)
    return rank, size

if _le._TORCH_LOADED_FIRST and not _le._OMP_WAIT_POLICY_GIVEN and torch.get_num_threads() > 1:
    import warnings  # noqa: E402

    warnings.warn("leanemb.torch: torch was imported before leanemb with OpenMP threads that spin while waiting; "
                  "they slow leanemb's update down when cores are few. Set OMP_WAIT_POLICY=passive in the "
                  "environment, import leanemb before torch, or torch.set_num_threads(1) (docs/python.md).",
                  RuntimeWarning, stacklevel=2)

_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam", "partial_rowwise_adam", "sm3", "none")


from .sparse import JaggedTensor, KeyedJaggedTensor, KeyedTensor  # noqa: F401 (re-exported)


# ---- table configs -------------------------------------------------------------------------------

# The config fields that must be ints (bools and floats are refused, not truncated).
_INT_FIELDS = ("num_embeddings", "embedding_dim", "cache_rows", "dynamic_min_count", "dynamic_max_age_steps",
               "dynamic_partitions", "dynamic_bloom_counters")


@dataclasses.dataclass
class EmbeddingBagConfig:
    """One table and the features that look it up (TorchRec's EmbeddingBagConfig + leanemb options).

    Every option of leanemb's TableOptions (include/leanemb/table_options.h) is a field; the
    defaults are leanemb's. ``optimizer="none"``: no fused update; backward stores the rows'
    gradient in ``module.embedding_grad(name)`` (a torch sparse tensor).
    """
    num_embeddings: int
    embedding_dim: int
    name: str = ""
    feature_names: List[str] = dataclasses.field(default_factory=list)
    pooling: str = "sum"                 # "sum" | "mean" ("none" for EmbeddingConfig)
    dtype: object = "fp32"              # "fp32" | "fp16" | "bf16" | "q8" | "fp8" | "int8" (lookup only) or torch dtype
    optimizer: str = "sgd"              # sgd | adagrad | rowwise_adagrad | adam | partial_rowwise_adam | sm3 | none
    learning_rate: float = 0.01
    eps: Optional[float] = None         # None: torch's default for the optimizer (1e-10 Adagrad and SM3, 1e-8 Adam)
    beta1: float = 0.9
    beta2: float = 0.999
    weight_decay: float = 0.0
    state_dtype: str = "fp32"           # "fp32" | "bf16" | "int8" | "int4" (blockwise)
    init: str = "uniform"               # "uniform" | "normal" | "zeros"
    init_bound: float = 0.0             # uniform: U(-b, b); <= 0: 1 / sqrt(num_embeddings)
    init_mean: float = 0.0
    init_std: float = 1.0
    frozen: bool = False                # lookup only
    cache_fraction: float = 0.0         # > 0: rows in a row store behind a cache of this fraction
    cache_rows: int = 0                 # > 0: cache slots (overrides cache_fraction)
    cache_policy: str = "lru"           # "lru" | "lfu" | "clock"
    cache_store: str = "host"           # "host" | "file"
    cache_store_path: str = ""
    cache_direct_io: bool = True
    cache_store_layout: str = ""        # file store: "in_place" | "log" | "mapped"; "" = the engine's default
    dynamic: bool = False               # raw 64-bit ids mapped to rows on admission
    dynamic_min_count: int = 1
    dynamic_eviction: str = "age"       # "age" | "lfu"
    dynamic_max_age_steps: int = 0
    dynamic_partitions: int = 1
    dynamic_bloom_counters: int = 1 << 20

    def _native(self):
        opt = str(self.optimizer).lower()
        if opt not in _OPTIMIZERS:
            raise ValueError(f"table '{self.name}': optimizer must be one of {_OPTIMIZERS}, got '{self.optimizer}'")
        # int() would truncate 1.5 rows to 1 and take True as 1: the integer fields must be ints.
        for field in _INT_FIELDS:
            v = getattr(self, field)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise TypeError(f"table '{self.name}': {field} must be an int, got {type(v).__name__} {v!r}")
        d = {
            "name": self.name, "num_rows": int(self.num_embeddings), "dim": int(self.embedding_dim),
            "dtype": _le._dtype_word(self.dtype), "optimizer": "sgd" if opt == "none" else opt,
            "learning_rate": float(self.learning_rate), "beta1": float(self.beta1), "beta2": float(self.beta2),
            "weight_decay": float(self.weight_decay), "state_dtype": str(self.state_dtype), "init": self.init,
            "init_bound": float(self.init_bound), "init_mean": float(self.init_mean), "init_std": float(self.init_std),
            "frozen": bool(self.frozen or opt == "none"), "cache_fraction": float(self.cache_fraction),
            "cache_rows": int(self.cache_rows), "cache_policy": self.cache_policy, "cache_store": self.cache_store,
            "cache_store_path": self.cache_store_path, "cache_direct_io": bool(self.cache_direct_io),
            "cache_store_layout": str(self.cache_store_layout),
            "dynamic": bool(self.dynamic), "dynamic_min_count": int(self.dynamic_min_count),
            "dynamic_eviction": self.dynamic_eviction, "dynamic_max_age_steps": int(self.dynamic_max_age_steps),
            "dynamic_partitions": int(self.dynamic_partitions),
            "dynamic_bloom_counters": int(self.dynamic_bloom_counters),
        }
        if self.eps is not None:
            d["eps"] = float(self.eps)
        return d


@dataclasses.dataclass
class EmbeddingConfig(EmbeddingBagConfig):
    """A table for sequence lookups (pooling none): TorchRec's EmbeddingConfig + leanemb options."""
    pooling: str = "none"


# ---- the autograd function -----------------------------------------------------------------------

class _Batch:
    """One call's inputs, per native feature (the user's features, then their per-id-row twins)."""

    def __init__(self, B, ids, offsets, weights, twin_on, twins=True):
        self.B = B
        self.ids = ids          # [F] int64 tensors (contiguous; views of the KJT where possible)
        self.offsets = offsets  # [F] int64 tensors [B + 1]
        self.weights = weights  # [F] float32 tensors or None (detached)
        self.twin_on = twin_on  # rows of every id wanted (per-sample-weight gradients)
        self.twins = twins      # the native collection has the twin features

    def native(self, with_twins):
        ids = [t.numpy() for t in self.ids]
        offs = [t.numpy() for t in self.offsets]
        ws = [None if w is None else w.numpy() for w in self.weights]
        if not self.twins:
            return ids, offs, ws
        empty_ids = np.zeros(0, np.int64)
        zero_offs = np.zeros(self.B + 1, np.int64)
        if with_twins:
            ids += [t.numpy() for t in self.ids]
            offs += [t.numpy() for t in self.offsets]
        else:
            ids += [empty_ids] * len(self.ids)
            offs += [zero_offs] * len(self.ids)
        ws += [None] * len(self.ids)
        return ids, offs, ws


class _LookupFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, module, batch, anchor, weights_in, *unused):
        outs, twin_rows = module._native_forward(batch)
        ctx.module = module
        ctx.batch = batch
        ctx.twin_rows = twin_rows
        ctx.weights_shape = None if weights_in is None else weights_in.shape
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        module = ctx.module
        psw_grad = module._native_backward(ctx.batch, list(grads), ctx.twin_rows)
        if ctx.weights_shape is None or psw_grad is None:
            return None, None, None, None
        return None, None, None, psw_grad.reshape(ctx.weights_shape)


# ---- the modules ---------------------------------------------------------------------------------

class LearningRateAdapter(torch.optim.Optimizer):
    """A torch.optim.Optimizer over the tables' learning rates, for torch LR schedulers.

    One param group per table (``group["name"]``, ``group["lr"]``); the module reads the groups
    before every update, so a scheduler that changes ``lr`` takes effect at the next backward.
    ``step()`` only pushes the rates (call it where you call your dense optimizer's step, which
    also keeps the scheduler's ordering check quiet)."""

    def __init__(self, module):
        groups = [{"params": [torch.zeros(0)], "lr": module._lr[i], "name": c.name}
                  for i, c in enumerate(module._configs)]
        super().__init__(groups, {"lr": 0.01})
        self._module = weakref.ref(module)

    def _push(self):
        m = self._module()
        if m is None:
            return
        for i, g in enumerate(self.param_groups):
            if float(g["lr"]) != m._lr[i]:
                m.set_learning_rate(float(g["lr"]), table=i)

    def step(self, closure=None):  # noqa: D102
        self._push()
        return None if closure is None else closure()

    def zero_grad(self, set_to_none=True):  # noqa: D102
        pass


class _TablesModule(torch.nn.Module):
    _prefix = "embedding_bags"
    _sequence = False

    def __init__(self, tables, update_mode="per_backward", loss_scale=1.0, check_finite=True,
                 placement="", device_budget_bytes=0, host_budget_bytes=0, seed=0, num_threads=0,
                 bounds_check="error", use_reference_kernels=False, sharding=None, forward_payload="fp32",
                 backward_payload="fp32", table_assign="round_robin", comm_timeout_ms=60000, max_abs_grad=1e15):
        super().__init__()
        if update_mode not in ("per_backward", "accumulate"):
            raise ValueError(f"update_mode must be 'per_backward' or 'accumulate', got '{update_mode}'")
        self.update_mode = update_mode
        self._configs = list(tables)
        if not self._configs:
            raise ValueError(f"{type(self).__name__} needs at least one table")
        names = [c.name for c in self._configs]
        if any(not n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"table names must be non-empty and unique, got {names}")
        self._features = []      # (feature name, table index)
        for ti, c in enumerate(self._configs):
            pool = _le._pooling_word(c.pooling)
            if self._sequence and pool != "none":
                raise ValueError(f"EmbeddingCollection: table '{c.name}' has pooling '{pool}'; use EmbeddingConfig (pooling none)")
            if not self._sequence and pool not in ("sum", "mean"):
                raise ValueError(f"EmbeddingBagCollection: table '{c.name}': pooling must be 'sum' or 'mean', got '{pool}'")
            if str(c.optimizer).lower() == "none" and c.dynamic:
                raise ValueError(f"table '{c.name}': optimizer='none' is not supported on dynamic tables")
            fn = c.feature_names or [c.name]
            for f in fn:
                if f in [x for x, _ in self._features]:
                    raise ValueError(f"feature '{f}' is looked up by two tables")
                self._features.append((f, ti))
        self._pooling = [_le._pooling_word(self._configs[t].pooling) for _, t in self._features]
        native_tables = [c._native() for c in self._configs]
        feats = [{"name": f, "table": t, "pooling": p} for (f, t), p in zip(self._features, self._pooling)]
        # Twins: one sequence feature per feature over the same table, giving each id's row for
        # the gradients of per-id weights (empty unless a weights tensor requires grad).
        # (Sequence modules apply per-id weights with torch after the lookup: no twins.)
        if not self._sequence:
            feats += [{"name": "__rows__" + f, "table": t, "pooling": "none"} for f, t in self._features]
        coll = {"placement": placement, "device_budget_bytes": int(device_budget_bytes),
                "host_budget_bytes": int(host_budget_bytes), "seed": int(seed), "num_threads": int(num_threads),
                "bounds_check": bounds_check, "use_reference_kernels": bool(use_reference_kernels)}
        dist = {}
        if sharding is not None:  # tables sharded over MPI_COMM_WORLD (collective calls)
            dist = {"comm": "mpi", "sharding": sharding, "forward_payload": forward_payload,
                    "backward_payload": backward_payload, "table_assign": table_assign,
                    "timeout_ms": int(comm_timeout_ms)}
        self._tables = _C.Tables(native_tables, feats, coll, dist)
        self._layouts = [self._tables.layout(i) for i in range(len(self._configs))]
        self._none_opt = [str(c.optimizer).lower() == "none" for c in self._configs]
        self._trainable = any(not l["frozen"] for l in self._layouts)
        self._needs_backward = self._trainable or any(self._none_opt)
        self._lr = [float(c.learning_rate) for c in self._configs]
        self._dims = [int(self._configs[t].embedding_dim) for _, t in self._features]
        self.loss_scale = float(loss_scale)
        self.check_finite = bool(check_finite)
        if not float(max_abs_grad) > 0:
            raise ValueError(f"max_abs_grad must be > 0 (inf: no bound), got {max_abs_grad}")
        self.max_abs_grad = float(max_abs_grad)  # a reduced row gradient above it skips the update
        self._anchor = torch.zeros(0, requires_grad=True)  # makes backward run (weights get no .grad)
        self._pending = []         # accumulate mode: (batch, grads) until step()
        self._grads = {}           # optimizer="none": table name -> sparse gradient
        self._adapter = None
        self.last_update = None    # the last native update's report
        self.num_updates = 0
        self.num_skipped_nonfinite = 0
        self.found_nonfinite = False  # the last update was skipped (Inf/NaN gradient, or one above max_abs_grad)
        self.copies = {"inputs": 0, "grads": 0}  # conversions that were not zero-copy

    # ---- configuration ----
    @property
    def tables(self):
        """The native Tables object (_leanemb.Tables; the table interface)."""
        return self._tables

    @property
    def rank(self):
        return self._tables.rank

    @property
    def world_size(self):
        return self._tables.world_size

    def embedding_bag_configs(self):
        return list(self._configs)

    def feature_names(self):
        return [f for f, _ in self._features]

    def _table_index(self, table):
        if table is None:
            return list(range(len(self._configs)))
        if isinstance(table, str):
            for i, c in enumerate(self._configs):
                if c.name == table:
                    return [i]
            raise KeyError(f"no table '{table}'")
        return [int(table)]

    def set_learning_rate(self, lr, table=None):
        """Sets the learning rate of ``table`` (name or index; None: every table) for later updates."""
        for i in self._table_index(table):
            self._tables.set_learning_rate(i, float(lr))
            self._lr[i] = float(lr)
            if self._adapter is not None and self._adapter() is not None:
                self._adapter().param_groups[i]["lr"] = float(lr)

    def get_learning_rate(self, table=0):
        return self._lr[self._table_index(table)[0]]

    def lr_scheduler_adapter(self):
        """A LearningRateAdapter (torch.optim.Optimizer) for torch.optim.lr_scheduler classes."""
        a = self._adapter() if self._adapter is not None else None
        if a is None:
            a = LearningRateAdapter(self)
            self._adapter = weakref.ref(a)
        return a

    def set_loss_scale(self, scale):
        """Gradients reaching backward are divided by ``scale`` before the optimizer."""
        if not (scale > 0 and np.isfinite(scale)):
            raise ValueError(f"loss scale must be finite and > 0, got {scale}")
        self.loss_scale = float(scale)

    @property
    def step_count(self):
        """Successful fused updates so far (the native step counter)."""
        return self._tables.step

    # ---- forward ----
    def _batch(self, kjt):
        if not isinstance(kjt, KeyedJaggedTensor):
            raise TypeError(f"{type(self).__name__} takes a leanemb.torch.KeyedJaggedTensor, got {type(kjt).__name__}")
        missing = [f for f, _ in self._features if f not in kjt.keys()]
        if missing:
            raise ValueError(f"KeyedJaggedTensor lacks features {missing} (has {kjt.keys()})")
        B = kjt.stride()
        ids, offs, ws, seq_w = [], [], [], []
        for f, _ in self._features:
            i, o, w = kjt.feature(f)
            if not o.is_contiguous():
                o = o.contiguous()
            ids.append(i)
            offs.append(o)
            if self._sequence:
                seq_w.append(w)  # applied with torch after the lookup (autograd does the rest)
                w = None
            if w is not None:
                wd = w.detach()
                if wd.dtype != torch.float32 or not wd.is_contiguous():
                    wd = wd.to(torch.float32).contiguous()
                    self.copies["inputs"] += 1
                w = wd
            ws.append(w)
        w_all = kjt.weights_or_none()
        twin_on = (self.training and not self._sequence and w_all is not None and w_all.requires_grad
                   and torch.is_grad_enabled())
        batch = _Batch(B, ids, offs, ws, twin_on, twins=not self._sequence)
        if twin_on:  # where each feature's ids sit in the KJT (its key order, other keys included)
            batch.spans = [kjt._span(f)[:2] for f, _ in self._features]
            batch.nnz = kjt.values().numel()
        return batch, (w_all if twin_on else None), seq_w

    def _native_forward(self, batch):
        B = batch.B
        outs = []
        pooled = None
        if not self._sequence:
            pooled = torch.empty((B, self._tables.pooled_dim), dtype=torch.float32)
            outs.append(pooled)
        seq = []
        if self._sequence:
            for k, d in enumerate(self._dims):
                t = torch.empty((batch.ids[k].numel(), d), dtype=torch.float32)
                outs.append(t)
                seq.append(t)
        twin_rows = []
        if batch.twins:
            for k, d in enumerate(self._dims):
                n = batch.ids[k].numel() if batch.twin_on else 0
                twin_rows.append(torch.empty((n, d), dtype=torch.float32))
        ids, offs, ws = batch.native(batch.twin_on)
        # eval(): lookup only (dynamic tables admit, evict and count nothing); no update follows.
        self._tables.forward(B, ids, offs, ws, None if pooled is None else pooled.numpy(),
                             [t.numpy() for t in seq] + [t.numpy() for t in twin_rows],
                             mode="train" if self.training else "eval")
        return outs, (twin_rows if batch.twin_on else None)

    def _lookup(self, kjt):
        batch, w_req, seq_w = self._batch(kjt)
        # In eval() no graph goes through the tables: the lookup is not followed by an update.
        use_grad = self.training and torch.is_grad_enabled() and (self._needs_backward or w_req is not None)
        if not use_grad:
            with torch.no_grad():
                outs, _ = self._native_forward(batch)
        else:
            outs = list(_LookupFunction.apply(self, batch, self._anchor, w_req))
        if self._sequence:
            outs = [o if w is None else o * w.to(o.dtype).unsqueeze(1) for o, w in zip(outs, seq_w)]
        return outs, batch

    # ---- backward ----
    def _grad_arrays(self, batch, grads):
        """Contiguous float32 gradients per output (zeros where autograd gave none)."""
        out = []
        for k, g in enumerate(grads):
            if g is None:
                if not self._sequence:
                    g = torch.zeros((batch.B, self._tables.pooled_dim), dtype=torch.float32)
                else:
                    g = torch.zeros((batch.ids[k].numel(), self._dims[k]), dtype=torch.float32)
            elif g.dtype != torch.float32 or not g.is_contiguous():
                g = g.to(torch.float32).contiguous()
                self.copies["grads"] += 1
            out.append(g)
        return out

    def _feature_grad(self, batch, grads, k):
        """Gradient of feature k's output per id occurrence, [nnz_k, dim] (unweighted, mean-scaled)."""
        if self._sequence:
            return grads[k]
        off = int(self._tables.pooled_offset(k))
        g = grads[0][:, off:off + self._dims[k]]
        lengths = batch.offsets[k][1:] - batch.offsets[k][:-1]
        bag = torch.repeat_interleave(torch.arange(batch.B), lengths)
        per = g[bag]
        if self._pooling[k] == "mean":
            per = per / lengths[bag].clamp(min=1).to(per.dtype).unsqueeze(1)
        return per

    def _native_backward(self, batch, grads, twin_rows):
        grads = self._grad_arrays(batch, grads)
        psw = None
        if twin_rows is not None:
            psw = torch.zeros(batch.nnz, dtype=torch.float32)  # keys the module does not use: 0
            for k in range(len(self._features)):
                per = self._feature_grad(batch, grads, k)
                lo, hi = batch.spans[k]
                psw[lo:hi] = (per * twin_rows[k]).sum(1)
        if any(self._none_opt):
            self._accumulate_row_grads(batch, grads)
        if self._trainable:
            if self.update_mode == "per_backward":
                self._apply(batch, grads)
            else:
                self._pending.append((batch, grads))
        return psw

    def _accumulate_row_grads(self, batch, grads):
        scale = 1.0 / self.loss_scale
        for k, (f, t) in enumerate(self._features):
            if not self._none_opt[t]:
                continue
            per = self._feature_grad(batch, grads, k)
            if batch.weights[k] is not None:
                per = per * batch.weights[k].unsqueeze(1)
            per = per * scale
            c = self._configs[t]
            sp = torch.sparse_coo_tensor(batch.ids[k].unsqueeze(0), per, (c.num_embeddings, c.embedding_dim))
            prev = self._grads.get(c.name)
            self._grads[c.name] = (sp if prev is None else prev + sp).coalesce()

    def _sync_lr(self):
        if self._adapter is not None and self._adapter() is not None:
            self._adapter()._push()

    def _apply(self, batch, grads):
        self._sync_lr()
        ids, offs, ws = batch.native(batch.twin_on)
        g_pooled = None if self._sequence else grads[0].numpy()
        g_seq = [g.numpy() for g in grads] if self._sequence else []
        zeros = []
        if batch.twins:
            for k, d in enumerate(self._dims):
                n = batch.ids[k].numel() if batch.twin_on else 0
                zeros.append(np.zeros((n, d), np.float32))
        rep = self._tables.backward_update(batch.B, ids, offs, ws, g_pooled, g_seq + zeros,
                                           1.0 / self.loss_scale, self.check_finite, self.max_abs_grad)
        self.last_update = rep
        self.found_nonfinite = bool(rep["skipped_nonfinite"])
        if self.found_nonfinite:
            self.num_skipped_nonfinite += 1
        else:
            self.num_updates += 1
        return rep

    def step(self):
        """accumulate mode: applies one update with the gradients of every backward since the last
        step() (their batches concatenated: the same as summing the gradients). Returns the
        update's report, or None when nothing was pending. A no-op in per_backward mode."""
        if not self._pending:
            return None
        pend, self._pending = self._pending, []
        if len(pend) == 1:
            return self._apply(*pend[0])
        nf = len(self._features)
        ids, offs, ws = [], [], []
        for k in range(nf):
            ids.append(torch.cat([b.ids[k] for b, _ in pend]))
            shifted, base = [], 0
            for j, (b, _) in enumerate(pend):
                o = b.offsets[k]
                shifted.append((o if j == 0 else o[1:]) + base)
                base += int(o[-1])
            offs.append(torch.cat(shifted))
            if all(b.weights[k] is None for b, _ in pend):
                ws.append(None)
            else:
                ws.append(torch.cat([b.weights[k] if b.weights[k] is not None
                                     else torch.ones(b.ids[k].numel(), dtype=torch.float32) for b, _ in pend]))
        B = sum(b.B for b, _ in pend)
        batch = _Batch(B, ids, offs, ws, False, twins=not self._sequence)
        if self._sequence:
            grads = [torch.cat([g[k] for _, g in pend]) for k in range(nf)]
        else:
            grads = [torch.cat([g[0] for _, g in pend])]
        return self._apply(batch, grads)

    def zero_grad(self, set_to_none=True):
        """Drops pending accumulated gradients and the optimizer="none" row gradients."""
        self._pending = []
        self._grads = {}
        super().zero_grad(set_to_none=set_to_none)

    def embedding_grad(self, table):
        """optimizer="none" tables: the rows' gradient summed since zero_grad(), a coalesced torch
        sparse COO tensor [num_embeddings, dim] (None before any backward), already divided by
        the loss scale."""
        return self._grads.get(self._configs[self._table_index(table)[0]].name)

    # ---- rows, state, checkpoints ----
    def weight(self, table):
        """Table ``table``'s rows as a float32 tensor [num_embeddings, dim] (a copy, dequantized)."""
        i = self._table_index(table)[0]
        return torch.from_numpy(self._tables.read_rows(i, 0, self._configs[i].num_embeddings))

    def set_weight(self, table, w):
        """Writes every row of ``table`` from float [num_embeddings, dim] (rounded to the row dtype)."""
        i = self._table_index(table)[0]
        c = self._configs[i]
        w = torch.as_tensor(w).detach().to(torch.float32).contiguous()
        self._check_weight(c, w)
        self._tables.write_rows(i, 0, w.numpy())

    @staticmethod
    def _check_weight(c, w):
        """ValueError unless ``w`` (float32) has table ``c``'s shape and only finite values."""
        if tuple(w.shape) != (c.num_embeddings, c.embedding_dim):
            raise ValueError(f"weight of table '{c.name}' must have shape {(c.num_embeddings, c.embedding_dim)}, got {tuple(w.shape)}")
        bad = (~torch.isfinite(w)).nonzero()
        if bad.numel():
            r, d = int(bad[0][0]), int(bad[0][1])
            raise ValueError(f"weight of table '{c.name}' has {bad.shape[0]} non-finite values "
                             f"(first at row {r}, column {d}: {float(w[r, d])})")

    def optimizer_state(self, table):
        """Optimizer state as float32 [num_embeddings, state floats per row] (per-element states, then
        the per-row scalar; docs/python.md)."""
        i = self._table_index(table)[0]
        return torch.from_numpy(self._tables.read_state(i, 0, self._configs[i].num_embeddings))

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for i, c in enumerate(self._configs):
            n = c.num_embeddings
            destination[f"{prefix}{self._prefix}.{c.name}.weight"] = torch.from_numpy(self._tables.read_rows(i, 0, n))
            destination[f"{prefix}{self._prefix}.{c.name}.fat_rows"] = torch.from_numpy(self._tables.read_raw_rows(i, 0, n))
            if str(c.optimizer).lower() == "sm3":  # the column accumulators, outside the rows
                destination[f"{prefix}{self._prefix}.{c.name}.column_state"] = torch.from_numpy(self._tables.column_state(i))
        destination[f"{prefix}step"] = torch.tensor(self._tables.step, dtype=torch.int64)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # Two phases: check every table's entry and the step first, change nothing unless all of
        # them (and, when strict, the key sets) are right; then write. A failed load_state_dict
        # leaves rows, optimizer state and step_count as they were.
        writes = []  # (table index, "raw" | "weight", tensor)
        errors = []
        missing = []
        for i, c in enumerate(self._configs):
            wk = f"{prefix}{self._prefix}.{c.name}.weight"
            rk = f"{prefix}{self._prefix}.{c.name}.fat_rows"
            try:
                if rk in state_dict:
                    raw = state_dict[rk].detach().to(torch.uint8).contiguous()
                    stride = self._layouts[i]["stride_bytes"]
                    if tuple(raw.shape) != (c.num_embeddings, stride):
                        errors.append(f"{rk}: shape {tuple(raw.shape)} != {(c.num_embeddings, stride)} "
                                      "(a table of another dtype, optimizer or state dtype)")
                        continue
                    writes.append((i, "raw", raw))
                    ck = f"{prefix}{self._prefix}.{c.name}.column_state"
                    if str(c.optimizer).lower() == "sm3":
                        if ck in state_dict:
                            col = state_dict[ck].detach().to(torch.float32).contiguous()
                            if tuple(col.shape) != (c.embedding_dim,):
                                errors.append(f"{ck}: shape {tuple(col.shape)} != {(c.embedding_dim,)}")
                                continue
                            writes.append((i, "column", col))
                        elif strict:
                            missing.append(ck)
                elif wk in state_dict:
                    w = torch.as_tensor(state_dict[wk]).detach().to(torch.float32).contiguous()
                    self._check_weight(c, w)
                    writes.append((i, "weight", w))
                else:
                    missing.append(wk)
            except (ValueError, IndexError, TypeError, RuntimeError) as e:
                errors.append(f"{wk}: {e}")
        sk = f"{prefix}step"
        step = None
        if sk in state_dict:
            try:
                step = int(state_dict[sk])
                if step < 0:
                    errors.append(f"{sk}: must be >= 0, got {step}")
            except (ValueError, TypeError, RuntimeError) as e:
                errors.append(f"{sk}: {e}")
        elif strict:
            missing.append(sk)
        mine = {f"{prefix}{self._prefix}.{c.name}.{s}" for c in self._configs
                for s in ("weight", "fat_rows", "column_state")} | {sk}
        unexpected = [k for k in state_dict if k.startswith(prefix) and k not in mine] if strict else []
        missing_keys.extend(missing)
        unexpected_keys.extend(unexpected)  # the module has no children: every other key is unexpected
        error_msgs.extend(errors)
        if errors or (strict and (missing or unexpected)):
            return  # torch raises with these; nothing was changed
        for i, kind, t in writes:
            if kind == "raw":
                self._tables.write_raw_rows(i, 0, t.numpy())
            elif kind == "column":
                self._tables.set_column_state(i, t.numpy())
            else:
                self._tables.write_rows(i, 0, t.numpy())
        if step is not None:
            self._tables.set_step(step)

    def save(self, out_dir, keep_last=3, overwrite=False, incremental=False, full_every=8, max_delta_fraction=0.5,
             link_store_rows=True):
        """Writes a crash-safe checkpoint <out_dir>/checkpoints/step-<N> (N = step_count) in leanemb's
        format (leanemb ckpt verify / digest read it). Returns its directory.

        The module owns out_dir from its first save until it is deleted: it holds out_dir/LOCK (a
        directory locked by a running `leanemb train` raises RuntimeError naming the holder), and
        a directory holding checkpoints, shards/ or metrics.jsonl it did not write raises
        ValueError naming them, unless overwrite=True, which moves them into
        out_dir/replaced-<time>/ first. Later saves into the same out_dir write on.

        incremental=True: the save holds only the rows changed since this module's previous save
        or load (as `leanemb train`'s train.incremental_checkpoints; docs/formats/checkpoint.md,
        "Chains"), every full_every-th save of a chain, or one past max_delta_fraction of the
        rows, in full. A sharded module keeps a chain of each rank's shard (docs/dist.md).

        link_store_rows=True: a table cached over a log-layout file store (cache_store="file",
        cache_store_layout="log") on out_dir's file system is kept by hard links of its store's
        files instead of copies of its rows (as train.link_store_rows; docs/formats/checkpoint.md,
        "Linked rows"): the save writes only its rows still dirty in the cache."""
        if isinstance(full_every, bool) or not isinstance(full_every, int) or full_every < 1:
            raise ValueError(f"full_every must be an integer >= 1, got {full_every!r}")
        if not 0.0 < float(max_delta_fraction) <= 1.0:
            raise ValueError(f"max_delta_fraction must be in (0, 1], got {max_delta_fraction!r}")
        return self._tables.save(os.fspath(out_dir), int(self._tables.step), int(keep_last), bool(overwrite),
                                 bool(incremental), int(full_every), float(max_delta_fraction), bool(link_store_rows))

    def load(self, path):
        """Loads a checkpoint: a step-<N> directory, or the newest under <path>/checkpoints. The
        tables must match (names, rows, dim, dtype, optimizer, state dtype). Sets step_count to N.
        Returns the directory loaded."""
        path = os.fspath(path)
        if not os.path.exists(os.path.join(path, "MANIFEST")):
            path = _C.latest_checkpoint(path)
        self._tables.load(path, int(_C.checkpoint_step(path)))
        return path

    def digest(self):
        """The embedding digest (32 hex digits) of every table's rows, optimizer state and the step
        counter: equal for the same state at any world size and sharding (docs/dist.md, "Digest").
        Collective when sharded (every rank calls it; every rank gets the digest)."""
        return self._tables.digest()

    def flush(self):
        """Writes cached rows back to their stores (tables with a row cache)."""
        self._tables.flush()

    def prefetch(self, kjt):
        """Starts fetching the rows `kjt` will touch into the row caches (tables with
        `cache_rows`; a no-op for the others) on the caches' own threads and returns at once.
        Call it with the next batch before this batch's forward (the order of TorchRec's
        prefetch pipeline): the fetch then overlaps this whole step. A hint: results are the
        same with and without it. Sharded: collective, every rank calls it in the same order."""
        batch, _, _ = self._batch(kjt)
        ids, offs, ws = batch.native(False)
        self._tables.prefetch(batch.B, ids, offs, ws)

    # ---- statistics ----
    def memory_stats(self):
        """{"device": {...}, "host": {...}}: per tier current / peak bytes by category."""
        return self._tables.memory_stats()

    def memory_summary(self):
        """The tier x category table of current and peak bytes (as `leanemb train` prints it)."""
        return self._tables.memory_summary()

    def cache_stats(self, table):
        return self._tables.cache_stats(self._table_index(table)[0])

    def dynamic_stats(self, table):
        return self._tables.dynamic_stats(self._table_index(table)[0])

    def extra_repr(self):
        return ", ".join(f"{c.name}: {c.num_embeddings}x{c.embedding_dim} {_le._dtype_word(c.dtype)} {c.optimizer}"
                         for c in self._configs) + f", update_mode={self.update_mode}"


class EmbeddingBagCollection(_TablesModule):
    """Pooled lookups (sum / mean, per-id weights) of several tables and features.

    forward(kjt) -> KeyedTensor: ``values()`` [B, sum of dims] float32, features in config
    order (each table's feature_names), ``to_dict()`` per feature views. Backward applies each
    table's fused optimizer in place (see docs/python.md for update_mode and the rest). In
    ``eval()`` mode the forward is a lookup only: no graph through the tables, and dynamic
    tables admit, evict and count nothing (an id without a row reads zeros)."""
    _prefix = "embedding_bags"
    _sequence = False

    def forward(self, features):
        outs, _ = self._lookup(features)
        return KeyedTensor(self.feature_names(), self._dims, outs[0])


class EmbeddingCollection(_TablesModule):
    """Sequence lookups (pooling none) of several tables and features.

    forward(kjt) -> {feature: JaggedTensor}: ``values()`` [nnz, dim] float32 rows in id order
    (times the per-id weights, if given), ``lengths()`` / ``offsets()`` from the input, and
    ``to_padded_dense()`` -> [B, L, dim]. ``eval()`` mode: a lookup only, as for
    EmbeddingBagCollection."""
    _prefix = "embeddings"
    _sequence = True

    def forward(self, features):
        outs, batch = self._lookup(features)
        return {f: JaggedTensor(outs[k], offsets=batch.offsets[k]) for k, (f, _) in enumerate(self._features)}
