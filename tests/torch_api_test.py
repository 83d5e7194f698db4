"""torch_api: leanemb.torch against PyTorch itself (docs/python.md).

Run by CTest: PYTHONPATH=<build>/python /usr/bin/python3 -m pytest -q tests/torch_api_test.py.
Every reference is torch: nn.EmbeddingBag / nn.Embedding with the same weights and the matching
torch optimizer (SGD, Adagrad, SparseAdam) on a dense copy, or finite differences.
"""
import os
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
lt = pytest.importorskip("leanemb.torch")
import leanemb  # noqa: E402

ROWS, DIM, B = 40, 8, 6
STEPS = 20
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def close(a, b, rtol=1e-5):
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    return bool(torch.all((a - b).abs() <= rtol * (1.0 + b.abs())))


def batch(rng, keys, rows=ROWS, B=B, max_len=5, weights=False, empty_bag=True):
    lengths = rng.integers(0 if empty_bag else 1, max_len + 1, size=len(keys) * B)
    if empty_bag:
        lengths[1] = 0
    nnz = int(lengths.sum())
    ids = rng.integers(0, rows // 2, size=nnz)  # duplicates within and across bags
    w = torch.tensor(rng.uniform(0.5, 1.5, size=nnz), dtype=torch.float32) if weights else None
    return lt.KeyedJaggedTensor(keys=keys, values=torch.tensor(ids), lengths=torch.tensor(lengths), weights=w)


def torch_bag(kjt, key, weight, mode):
    ids, off, w = kjt.feature(key)
    return torch.nn.functional.embedding_bag(ids, weight, off[:-1], mode=mode, per_sample_weights=w)


def ebc_one(optimizer="sgd", pooling="sum", lr=0.05, dtype="fp32", update_mode="per_backward", **kw):
    cfg = lt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t", feature_names=["f"],
                                pooling=pooling, optimizer=optimizer, learning_rate=lr, dtype=dtype, **kw)
    return lt.EmbeddingBagCollection([cfg], update_mode=update_mode, num_threads=2)


def torch_opt(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, eps=1e-10)
    return torch.optim.SparseAdam(params, lr=lr, eps=1e-8)


# ---- forward ------------------------------------------------------------------------------------

@pytest.mark.parametrize("pooling,weighted", [("sum", False), ("mean", False), ("sum", True)])
def test_forward_matches_embedding_bag(pooling, weighted):
    rng = np.random.default_rng(1)
    cfgs = [lt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t0", feature_names=["a", "b"], pooling=pooling),
            lt.EmbeddingBagConfig(num_embeddings=ROWS // 2, embedding_dim=3, name="t1", feature_names=["c"], pooling=pooling)]
    ebc = lt.EmbeddingBagCollection(cfgs)
    kjt = batch(rng, ["c", "a", "b"], rows=ROWS // 2, weights=weighted)  # key order differs from the configs
    out = ebc(kjt)
    assert out.keys() == ["a", "b", "c"] and out.values().shape == (B, 2 * DIM + 3)
    w0, w1 = ebc.weight("t0"), ebc.weight("t1")
    want = torch.cat([torch_bag(kjt, "a", w0, pooling), torch_bag(kjt, "b", w0, pooling), torch_bag(kjt, "c", w1, pooling)], 1)
    assert close(out.values().detach(), want)
    assert close(out["c"].detach(), want[:, 2 * DIM:])


def test_sequence_matches_embedding():
    rng = np.random.default_rng(2)
    ec = lt.EmbeddingCollection([lt.EmbeddingConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t", feature_names=["x", "y"])])
    kjt = batch(rng, ["x", "y"])
    out = ec(kjt)
    w = ec.weight("t")
    for k in ("x", "y"):
        ids, off, _ = kjt.feature(k)
        jt = out[k]
        assert jt.values().shape == (ids.numel(), DIM)
        assert close(jt.values().detach(), torch.nn.functional.embedding(ids, w))
        dense = jt.to_padded_dense()
        L = int((off[1:] - off[:-1]).max())
        assert dense.shape == (B, L, DIM)
        for b in range(B):
            n = int(off[b + 1] - off[b])
            assert close(dense[b, :n].detach(), w[ids[off[b]:off[b + 1]]])
            assert float(dense[b, n:].abs().sum()) == 0.0


# ---- optimizers against torch -------------------------------------------------------------------

@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("pooling", ["sum", "mean", "weighted"])
def test_steps_match_torch_optimizer(optimizer, pooling):
    rng = np.random.default_rng(3)
    mode = "sum" if pooling == "weighted" else pooling
    lr = 0.05
    ebc = ebc_one(optimizer, mode, lr)
    ref = torch.nn.EmbeddingBag(ROWS, DIM, mode=mode, sparse=True)
    with torch.no_grad():
        ref.weight.copy_(ebc.weight("t"))
    opt = torch_opt(optimizer, ref.parameters(), lr)
    for _ in range(STEPS):
        kjt = batch(rng, ["f"], weights=pooling == "weighted")
        G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
        (ebc(kjt).values() * G).sum().backward()
        ids, off, w = kjt.feature("f")
        opt.zero_grad()
        (ref(ids, off[:-1], per_sample_weights=w) * G).sum().backward()
        opt.step()
    assert ebc.step_count == STEPS
    assert close(ebc.weight("t"), ref.weight.detach())


def test_rowwise_adagrad_matches_reference_rule():
    # FBGEMM's rule (no torch optimizer has it): s += mean_j(g_j^2); w -= lr * g / (sqrt(s) + eps).
    rng = np.random.default_rng(4)
    lr, eps = 0.1, 1e-8
    ebc = ebc_one("rowwise_adagrad", "sum", lr, eps=eps)
    w = ebc.weight("t").double()
    s = torch.zeros(ROWS, dtype=torch.float64)
    for _ in range(STEPS):
        kjt = batch(rng, ["f"])
        G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
        (ebc(kjt).values() * G).sum().backward()
        ids, off, _ = kjt.feature("f")
        g = torch.zeros(ROWS, DIM, dtype=torch.float64)
        bag = torch.repeat_interleave(torch.arange(B), off[1:] - off[:-1])
        g.index_add_(0, ids, G.double()[bag])
        touched = torch.unique(ids)
        s[touched] += (g[touched] ** 2).mean(1)
        w[touched] -= lr * g[touched] / (s[touched].sqrt() + eps).unsqueeze(1)
    assert close(ebc.weight("t"), w)
    assert close(ebc.optimizer_state("t")[:, 0], s)


def test_sm3_matches_reference_rule():
    # SM3-II, cover {rows} u {columns}: nu = min(row_acc, col_acc) + g^2; w -= lr g / (sqrt(nu) + eps);
    # row_acc = max_j nu; col_acc = max(col_acc, max over the step's rows of nu) (columns of before the step).
    rng = np.random.default_rng(43)
    lr, eps = 0.1, 1e-10
    ebc = ebc_one("sm3", "sum", lr, eps=eps)
    w = ebc.weight("t").double()
    row = torch.zeros(ROWS, dtype=torch.float64)
    col = torch.zeros(DIM, dtype=torch.float64)
    for _ in range(STEPS):
        kjt = batch(rng, ["f"])
        G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
        (ebc(kjt).values() * G).sum().backward()
        ids, off, _ = kjt.feature("f")
        bag = torch.repeat_interleave(torch.arange(B), off[1:] - off[:-1])
        g = torch.zeros(ROWS, DIM, dtype=torch.float64).index_add_(0, ids, G.double()[bag])
        u = torch.unique(ids)
        nu = torch.minimum(row[u].unsqueeze(1), col.unsqueeze(0)) + g[u] ** 2
        w[u] -= lr * g[u] / (nu.sqrt() + eps)
        row[u] = nu.max(1).values
        col = torch.maximum(col, nu.max(0).values)
    assert close(ebc.weight("t"), w)
    assert close(ebc.optimizer_state("t")[:, 0], row)
    sd = ebc.state_dict()
    assert close(sd["embedding_bags.t.column_state"], col)
    # A fresh module loaded from the state dict continues bit for bit.
    other = ebc_one("sm3", "sum", lr, eps=eps)
    other.load_state_dict(sd)
    kjt = batch(rng, ["f"])
    G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
    for m in (ebc, other):
        (m(kjt).values() * G).sum().backward()
    assert torch.equal(ebc.weight("t"), other.weight("t"))


def test_partial_rowwise_adam_matches_reference_rule():
    # m += (1-b1)(g - m); v += (1-b2)(mean_j(g_j^2) - v) per row; w -= lr sqrt(1-b2^t)/(1-b1^t) m / (sqrt(v) + eps)
    rng = np.random.default_rng(18)
    lr, eps, b1, b2 = 0.01, 1e-8, 0.9, 0.999
    ebc = ebc_one("partial_rowwise_adam", "mean", lr, eps=eps)
    w = ebc.weight("t").double()
    m = torch.zeros(ROWS, DIM, dtype=torch.float64)
    v = torch.zeros(ROWS, dtype=torch.float64)
    for t in range(1, STEPS + 1):
        kjt = batch(rng, ["f"])
        G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
        (ebc(kjt).values() * G).sum().backward()
        ids, off, _ = kjt.feature("f")
        lens = (off[1:] - off[:-1]).clamp(min=1).double()
        bag = torch.repeat_interleave(torch.arange(B), off[1:] - off[:-1])
        g = torch.zeros(ROWS, DIM, dtype=torch.float64).index_add_(0, ids, (G.double() / lens.unsqueeze(1))[bag])
        u = torch.unique(ids)
        m[u] += (1 - b1) * (g[u] - m[u])
        v[u] += (1 - b2) * ((g[u] ** 2).mean(1) - v[u])
        w[u] -= lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m[u] / (v[u].sqrt() + eps).unsqueeze(1)
    assert close(ebc.weight("t"), w)
    st = ebc.optimizer_state("t")
    assert close(st[:, :DIM], m) and close(st[:, DIM], v)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_sequence_matches_torch_optimizer(optimizer):
    rng = np.random.default_rng(19)
    ec = lt.EmbeddingCollection([lt.EmbeddingConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t", feature_names=["x", "y"],
                                                    optimizer=optimizer, learning_rate=0.05)])
    ref = torch.nn.Embedding(ROWS, DIM, sparse=True)
    with torch.no_grad():
        ref.weight.copy_(ec.weight("t"))
    opt = torch_opt(optimizer, ref.parameters(), 0.05)
    for _ in range(STEPS):
        kjt = batch(rng, ["x", "y"])
        out = ec(kjt)
        loss, rloss = 0, 0
        opt.zero_grad()
        for k in ("x", "y"):
            ids, _, _ = kjt.feature(k)
            G = torch.tensor(rng.standard_normal((ids.numel(), DIM)), dtype=torch.float32)
            loss = loss + (out[k].values() * G).sum()
            rloss = rloss + (ref(ids) * G).sum()
        loss.backward()
        rloss.backward()
        opt.step()
    assert ec.step_count == STEPS
    assert close(ec.weight("t"), ref.weight.detach())


def test_sequence_adam_matches_sparse_adam():
    rng = np.random.default_rng(5)
    lr = 0.01
    ec = lt.EmbeddingCollection([lt.EmbeddingConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t", feature_names=["x"],
                                                    optimizer="adam", learning_rate=lr)])
    ref = torch.nn.Embedding(ROWS, DIM, sparse=True)
    with torch.no_grad():
        ref.weight.copy_(ec.weight("t"))
    opt = torch.optim.SparseAdam(ref.parameters(), lr=lr)
    for _ in range(STEPS):
        kjt = batch(rng, ["x"])
        ids, _, _ = kjt.feature("x")
        G = torch.tensor(rng.standard_normal((ids.numel(), DIM)), dtype=torch.float32)
        (ec(kjt)["x"].values() * G).sum().backward()
        opt.zero_grad()
        (ref(ids) * G).sum().backward()
        opt.step()
    assert close(ec.weight("t"), ref.weight.detach())


# ---- gradients ----------------------------------------------------------------------------------

def test_per_sample_weight_grad_matches_torch_and_finite_differences():
    rng = np.random.default_rng(6)
    kjt = batch(rng, ["f"], weights=True)
    ids, off, w = kjt.feature("f")
    G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
    for mode in ("sum", "mean"):
        ebc = ebc_one("sgd", mode, lr=0.5)  # trainable: the gradient uses the rows before the update
        weight = ebc.weight("t")
        wt = w.clone().requires_grad_(True)
        kjt2 = lt.KeyedJaggedTensor(["f"], ids, offsets=off, weights=wt)
        (ebc(kjt2).values() * G).sum().backward()
        assert not torch.equal(ebc.weight("t"), weight)  # updated
        if mode == "sum":
            wr = w.clone().requires_grad_(True)
            wq = weight.clone().requires_grad_(True)  # (torch 1.13 asserts when only the weights need grad)
            (torch.nn.functional.embedding_bag(ids, wq, off[:-1], mode="sum", per_sample_weights=wr) * G).sum().backward()
            assert close(wt.grad, wr.grad)
        # finite differences of the loss in float64 (linear in each weight)
        ref = torch.zeros_like(w, dtype=torch.float64)
        lens = (off[1:] - off[:-1]).double()

        def loss(wv):
            rows = weight.double()[ids] * wv.unsqueeze(1)
            bag = torch.repeat_interleave(torch.arange(B), off[1:] - off[:-1])
            out = torch.zeros(B, DIM, dtype=torch.float64).index_add_(0, bag, rows)
            if mode == "mean":
                out = out / lens.clamp(min=1).unsqueeze(1)
            return float((out * G.double()).sum())

        h = 1e-3
        for i in range(w.numel()):
            e = torch.zeros_like(ref)
            e[i] = h
            ref[i] = (loss(w.double() + e) - loss(w.double() - e)) / (2 * h)
        assert close(wt.grad, ref, rtol=1e-4)


def test_per_sample_weight_grad_with_other_key_order_and_extra_keys():
    rng = np.random.default_rng(20)
    cfgs = [lt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t0", feature_names=["a", "b"]),
            lt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=3, name="t1", feature_names=["c"], pooling="mean")]
    ebc = lt.EmbeddingBagCollection(cfgs)
    kjt = batch(rng, ["c", "zz", "b", "a"], weights=True)  # "zz" is not the module's
    w = kjt.weights_or_none().clone().requires_grad_(True)
    kjt = lt.KeyedJaggedTensor(kjt.keys(), kjt.values(), lengths=kjt.lengths(), weights=w)
    G = torch.tensor(rng.standard_normal((B, 2 * DIM + 3)), dtype=torch.float32)
    W0, W1 = ebc.weight("t0").requires_grad_(True), ebc.weight("t1")
    (ebc(kjt).values() * G).sum().backward()
    wr = kjt.weights_or_none().detach().clone().requires_grad_(True)
    ref = lt.KeyedJaggedTensor(kjt.keys(), kjt.values(), lengths=kjt.lengths(), weights=wr)
    f = {k: ref.feature(k) for k in ref.keys()}
    out = [torch.nn.functional.embedding_bag(f[k][0], W0, f[k][1][:-1], mode="sum", per_sample_weights=f[k][2]) for k in ("a", "b")]
    ids, off, wc = f["c"]
    bag = torch.repeat_interleave(torch.arange(B), off[1:] - off[:-1])
    c = torch.zeros(B, 3).index_add(0, bag, W1[ids] * wc.unsqueeze(1)) / (off[1:] - off[:-1]).clamp(min=1).unsqueeze(1)
    (torch.cat(out + [c], 1) * G).sum().backward()
    lo, hi, _ = kjt._span("zz")
    assert float(w.grad[lo:hi].abs().sum()) == 0.0
    assert close(w.grad, wr.grad)


def test_optimizer_none_gradient_equals_torch():
    rng = np.random.default_rng(7)
    ebc = ebc_one("none", "mean")
    w0 = ebc.weight("t")
    ref = torch.nn.EmbeddingBag(ROWS, DIM, mode="mean", sparse=True)
    with torch.no_grad():
        ref.weight.copy_(w0)
    for _ in range(2):  # gradients accumulate until zero_grad(), as .grad does
        kjt = batch(rng, ["f"])
        G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
        (ebc(kjt).values() * G).sum().backward()
        ids, off, _ = kjt.feature("f")
        (ref(ids, off[:-1]) * G).sum().backward()
    assert torch.equal(ebc.weight("t"), w0)  # no update
    assert close(ebc.embedding_grad("t").to_dense(), ref.weight.grad.to_dense())
    ebc.zero_grad()
    assert ebc.embedding_grad("t") is None


# ---- several backward calls ---------------------------------------------------------------------

def test_per_backward_updates_each_backward():
    rng = np.random.default_rng(8)
    ebc = ebc_one("adagrad", "sum", 0.1)
    ref = torch.nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=True)
    with torch.no_grad():
        ref.weight.copy_(ebc.weight("t"))
    opt = torch_opt("adagrad", ref.parameters(), 0.1)
    kjt0 = batch(rng, ["f"], weights=True)
    ids, off, w = kjt0.feature("f")
    wt, wr = w.clone().requires_grad_(True), w.clone().requires_grad_(True)
    w0 = ebc.weight("t").requires_grad_(True)
    (torch.nn.functional.embedding_bag(ids, w0, off[:-1], mode="sum", per_sample_weights=wr).sum() * 2).backward()
    out = ebc(lt.KeyedJaggedTensor(["f"], ids, offsets=off, weights=wt)).values()
    ro = ref(ids, off[:-1], per_sample_weights=w)
    for _ in range(2):  # two losses over one forward: two updates (FBGEMM's behaviour)
        out.sum().backward(retain_graph=True)
        opt.zero_grad()
        ro.sum().backward(retain_graph=True)
        opt.step()
    assert ebc.step_count == 2
    assert close(ebc.weight("t"), ref.weight.detach())
    assert close(wt.grad, wr.grad)  # both backwards gave the weights their gradient (rows as forward read them)


def test_accumulate_applies_one_update_on_step():
    rng = np.random.default_rng(9)
    ebc = ebc_one("adagrad", "sum", 0.1, update_mode="accumulate")
    ref = torch.nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=True)
    with torch.no_grad():
        ref.weight.copy_(ebc.weight("t"))
    opt = torch_opt("adagrad", ref.parameters(), 0.1)
    for _ in range(3):
        opt.zero_grad()
        for _ in range(3):  # three micro-batches, one optimizer step
            kjt = batch(rng, ["f"], weights=True)
            G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
            (ebc(kjt).values() * G).sum().backward()
            ids, off, w = kjt.feature("f")
            (ref(ids, off[:-1], per_sample_weights=w) * G).sum().backward()
        w_before = ebc.weight("t")
        assert ebc.step_count == 0 or torch.equal(ebc.weight("t"), w_before)
        ebc.step()
        opt.step()
    assert ebc.step_count == 3
    assert close(ebc.weight("t"), ref.weight.detach())


# ---- training-loop citizens ---------------------------------------------------------------------

def test_nonfinite_gradient_skips_update_and_loss_scale():
    rng = np.random.default_rng(10)
    ebc = ebc_one("adam", "sum", 0.01)
    kjt = batch(rng, ["f"])
    w0, s0 = ebc.weight("t"), ebc.optimizer_state("t")
    G = torch.ones(B, DIM)
    G[0, 0] = float("inf")
    (ebc(kjt).values() * G).sum().backward()
    assert ebc.found_nonfinite and ebc.num_skipped_nonfinite == 1 and ebc.step_count == 0
    assert torch.equal(ebc.weight("t"), w0) and torch.equal(ebc.optimizer_state("t"), s0)
    # a scaled loss with the scale passed down equals the unscaled one
    a, b = ebc_one("sgd", "sum", 0.1), ebc_one("sgd", "sum", 0.1)
    b.set_loss_scale(1024.0)
    G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
    (a(kjt).values() * G).sum().backward()
    (b(kjt).values() * G * 1024.0).sum().backward()
    assert close(a.weight("t"), b.weight("t"), rtol=1e-6) and not b.found_nonfinite


def test_bad_input_raises_and_changes_nothing():
    ebc = ebc_one("sgd", "sum", 0.1)
    w0 = ebc.weight("t")
    with pytest.raises(IndexError, match="feature"):
        ebc(lt.KeyedJaggedTensor(["f"], torch.tensor([1, ROWS]), lengths=torch.tensor([1, 1])))
    with pytest.raises(IndexError):
        ebc(lt.KeyedJaggedTensor(["f"], torch.tensor([-1]), lengths=torch.tensor([1])))
    with pytest.raises(TypeError, match="integers"):
        lt.KeyedJaggedTensor(["f"], torch.tensor([1.0, 2.0]), lengths=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="lengths sum"):
        lt.KeyedJaggedTensor(["f"], torch.tensor([1, 2, 3]), lengths=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="non-decreasing"):
        lt.KeyedJaggedTensor(["f"], torch.tensor([1, 2]), offsets=torch.tensor([0, 2, 1, 2]))
    with pytest.raises(ValueError, match="lacks features"):
        ebc(lt.KeyedJaggedTensor(["g"], torch.tensor([1]), lengths=torch.tensor([1])))
    with pytest.raises(ValueError, match="optimizer"):
        ebc_one("lion")
    assert torch.equal(ebc.weight("t"), w0) and ebc.step_count == 0


def test_bf16_rows_and_cpu_autocast():
    rng = np.random.default_rng(11)
    ebc = ebc_one("rowwise_adagrad", "sum", 0.1, dtype="bf16")
    lin = torch.nn.Linear(DIM, 1)
    w0 = ebc.weight("t")
    kjt = batch(rng, ["f"])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = lin(ebc(kjt).values())
        assert y.dtype == torch.bfloat16
        loss = y.float().pow(2).mean()
    loss.backward()
    assert ebc.step_count == 1 and not torch.equal(ebc.weight("t"), w0)
    assert lin.weight.grad is not None
    assert torch.equal(ebc.weight("t"), ebc.weight("t").bfloat16().float())  # rows are bf16


def test_learning_rate_and_scheduler_adapter():
    rng = np.random.default_rng(12)
    ebc = ebc_one("sgd", "sum", 0.1)
    adapter = ebc.lr_scheduler_adapter()
    sched = torch.optim.lr_scheduler.StepLR(adapter, step_size=1, gamma=0.5)
    kjt = lt.KeyedJaggedTensor(["f"], torch.tensor([3]), lengths=torch.tensor([1] + [0] * (B - 1)))
    G = torch.zeros(B, DIM)
    G[0] = 1.0
    deltas = []
    for _ in range(3):
        w = ebc.weight("t")[3].clone()
        (ebc(kjt).values() * G).sum().backward()
        deltas.append(float((w - ebc.weight("t")[3])[0]))
        adapter.step()
        sched.step()
    assert np.allclose(deltas, [0.1, 0.05, 0.025], rtol=1e-5)
    ebc.set_learning_rate(1.0)
    assert ebc.get_learning_rate() == 1.0 and adapter.param_groups[0]["lr"] == 1.0
    with pytest.raises(ValueError):
        ebc.set_learning_rate(float("nan"))
    del rng


def test_state_dict_round_trip():
    rng = np.random.default_rng(13)
    a = ebc_one("adam", "sum", 0.01, dtype="bf16", state_dtype="bf16")
    for _ in range(3):
        (a(batch(rng, ["f"])).values() ** 2).sum().backward()
    sd = a.state_dict()
    assert sd["embedding_bags.t.weight"].shape == (ROWS, DIM) and int(sd["step"]) == 3
    b = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t", feature_names=["f"],
                                                         optimizer="adam", learning_rate=0.01, dtype="bf16", state_dtype="bf16")],
                                  )  # same seed: stochastic rounding of bf16 is keyed by (seed, row, step)
    (b(batch(rng, ["f"])).values() ** 3).sum().backward()
    assert not torch.equal(a.weight("t"), b.weight("t"))
    b.load_state_dict(sd)
    assert torch.equal(a.weight("t"), b.weight("t")) and torch.equal(a.optimizer_state("t"), b.optimizer_state("t"))
    assert b.step_count == 3
    kjt = batch(rng, ["f"])
    for m in (a, b):
        (m(kjt).values() ** 2).sum().backward()
    assert torch.equal(a.weight("t"), b.weight("t"))
    # a torch module holding it: keys are prefixed, the dense part round-trips too
    outer = torch.nn.ModuleDict({"ebc": a, "lin": torch.nn.Linear(2, 2)})
    keys = outer.state_dict().keys()
    assert "ebc.embedding_bags.t.weight" in keys and "lin.weight" in keys
    outer.load_state_dict(outer.state_dict())
    bad = dict(sd)
    bad["embedding_bags.other.weight"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match="Unexpected"):
        b.load_state_dict(bad)
    del bad["embedding_bags.other.weight"], bad["embedding_bags.t.fat_rows"], bad["embedding_bags.t.weight"]
    with pytest.raises(RuntimeError, match="Missing"):
        b.load_state_dict(bad)
    assert b.load_state_dict(bad, strict=False).missing_keys == ["embedding_bags.t.weight"]


def cli():
    for p in (os.environ.get("LEANEMB_CLI"), os.path.join(REPO, "build", "release", "leanemb")):
        if p and os.path.exists(p):
            return p
    return None


def test_save_load_checkpoint_digest(tmp_path):
    rng = np.random.default_rng(14)
    cfgs = [lt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t0", feature_names=["a"], optimizer="adagrad"),
            lt.EmbeddingBagConfig(num_embeddings=30, embedding_dim=4, name="t1", feature_names=["b"], optimizer="adam", dtype="fp16")]
    a = lt.EmbeddingBagCollection(cfgs)
    for _ in range(4):
        (a(batch(rng, ["a", "b"], rows=30)).values() ** 2).sum().backward()
    path = a.save(tmp_path / "a")
    assert int(os.path.basename(path).split("-")[1]) == 4
    assert leanemb.checkpoint_verify(path)["step"] == 4
    b = lt.EmbeddingBagCollection(cfgs, seed=5)
    before = b.digest()
    assert len(before) == 32 and before != a.digest()
    assert b.load(tmp_path / "a") == path and b.step_count == 4
    assert b.digest() == a.digest()  # the embedding digest: rows, state and step
    for i in (0, 1):
        assert torch.equal(a.weight(i), b.weight(i)) and torch.equal(a.optimizer_state(i), b.optimizer_state(i))
    path_b = b.save(tmp_path / "b")
    assert leanemb.checkpoint_digest(path) == leanemb.checkpoint_digest(path_b)
    b.set_weight(0, b.weight(0) + 1.0)
    assert b.digest() != a.digest()
    exe = cli()
    if exe:
        v = subprocess.run([exe, "ckpt", "verify", path], capture_output=True, text=True)
        assert v.returncode == 0, v.stderr
        da = subprocess.run([exe, "ckpt", "digest", path], capture_output=True, text=True, check=True).stdout.split()
        db = subprocess.run([exe, "ckpt", "digest", path_b], capture_output=True, text=True, check=True).stdout.split()
        assert da == db and leanemb.checkpoint_digest(path) in da
    # a mismatched collection is refused
    c = lt.EmbeddingBagCollection([cfgs[0], lt.EmbeddingBagConfig(num_embeddings=30, embedding_dim=5, name="t1",
                                                                  feature_names=["b"], optimizer="adam", dtype="fp16")])
    with pytest.raises(ValueError, match="t1"):
        c.load(path)


def test_incremental_saves_load_like_full_ones(tmp_path):
    rng = np.random.default_rng(21)
    cfgs = [lt.EmbeddingBagConfig(num_embeddings=500, embedding_dim=DIM, name="t0", feature_names=["a"], optimizer="adagrad")]
    a = lt.EmbeddingBagCollection(cfgs)
    paths = []
    for _ in range(3):
        for _ in range(2):
            (a(batch(rng, ["a"], rows=500)).values() ** 2).sum().backward()
        paths.append(a.save(tmp_path / "inc", keep_last=0, incremental=True))
    report = leanemb.checkpoint_verify(paths[-1])
    assert report["step"] == 6
    full = a.save(tmp_path / "full")
    sizes = [sum(f.stat().st_size for f in Path(p).iterdir()) for p in paths]
    assert sizes[1] < sizes[0] / 2 and sizes[2] < sizes[0] / 2, sizes  # the later ones hold the changed rows only
    b = lt.EmbeddingBagCollection(cfgs, seed=9)
    assert b.load(tmp_path / "inc") == paths[-1] and b.step_count == 6
    assert b.digest() == a.digest()
    c = lt.EmbeddingBagCollection(cfgs, seed=9)
    c.load(full)
    assert c.digest() == a.digest()
    with pytest.raises(ValueError, match="full_every"):
        a.save(tmp_path / "inc", incremental=True, full_every=0)


def test_saves_link_a_log_store_instead_of_copying_its_rows(tmp_path):
    """A table cached over a log-layout file store is saved by hard links of its store's files
    (link_store_rows, docs/formats/checkpoint.md "Linked rows"): the checkpoint holds no copy of
    its rows, loads into a new module (links) with the writer's digest, and loads alike with
    link_store_rows=False."""
    rng = np.random.default_rng(23)

    def cfgs(d):
        d.mkdir(exist_ok=True)
        return [lt.EmbeddingBagConfig(num_embeddings=20000, embedding_dim=DIM, name="t0", feature_names=["a"],
                                      optimizer="adagrad", cache_rows=256, cache_store="file",
                                      cache_store_path=str(d / "t0.rows"), cache_store_layout="log")]
    a = lt.EmbeddingBagCollection(cfgs(tmp_path / "sa"))
    for _ in range(4):
        (a(batch(rng, ["a"], rows=20000)).values() ** 2).sum().backward()
    linked = a.save(tmp_path / "linked")
    copied = a.save(tmp_path / "copied", link_store_rows=False)
    assert os.path.isdir(os.path.join(linked, "links")) and not os.path.exists(os.path.join(copied, "links"))
    data = lambda p: sum(f.stat().st_size for f in Path(p).iterdir() if f.is_file())
    assert data(linked) < data(copied) / 4, (data(linked), data(copied))  # the rows are not in its data file
    report = leanemb.checkpoint_verify(linked)
    assert report["step"] == 4
    # The writer's seed: the files are linked into the new store; another seed: rows copied over
    # the writer's initial rows; a copied checkpoint: as ever.
    for path, d, seed in ((linked, "sb", None), (linked, "sb9", 9), (copied, "sc", 9)):
        b = lt.EmbeddingBagCollection(cfgs(tmp_path / d)) if seed is None else lt.EmbeddingBagCollection(cfgs(tmp_path / d), seed=seed)
        b.load(path)
        assert b.digest() == a.digest(), (path, seed)
        if d == "sb":  # linked into its store, not copied
            assert any(n.endswith(".seg") for n in os.listdir(tmp_path / "sb" / "t0.rows.log"))


def test_writers_own_their_dirs_module_save(tmp_path):
    """writers_own_their_dirs: save() into a directory holding checkpoints this module did not
    write (a training run's --out, an earlier module's) raises and changes nothing, unless
    overwrite=True, which moves them aside; a directory locked by a run raises naming the
    holder; a module saving repeatedly into its own directory keeps working."""
    import fcntl
    import gc
    rng = np.random.default_rng(15)
    cfgs = [lt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t0", feature_names=["a"], optimizer="adagrad")]
    run = tmp_path / "run"
    ck = run / "checkpoints"
    a = lt.EmbeddingBagCollection(cfgs)
    for step in (2, 4):
        for _ in range(2):
            (a(batch(rng, ["a"])).values() ** 2).sum().backward()
        assert a.save(run).endswith(f"step-{step:010d}")  # its own directory: writes on
    theirs = sorted(os.listdir(ck))
    assert theirs == ["step-0000000002", "step-0000000004"]
    del a
    gc.collect()  # releases run/LOCK
    # A new module at step 0: its commit would have deleted every step >= 0 (both of a's).
    b = lt.EmbeddingBagCollection(cfgs, seed=5)
    with pytest.raises(ValueError, match=r"module.save\(\): output directory .*run.* holds 2 checkpoint directories"):
        b.save(run)
    assert sorted(os.listdir(ck)) == theirs
    assert leanemb.checkpoint_verify(str(ck / theirs[-1]))["step"] == 4
    # overwrite=True moves them aside, then writes.
    path = b.save(run, overwrite=True)
    assert path.endswith("step-0000000000")
    replaced = [d for d in os.listdir(run) if d.startswith("replaced-")]
    assert len(replaced) == 1 and sorted(os.listdir(run / replaced[0] / "checkpoints")) == theirs
    # A directory locked by a running `leanemb train` (its LOCK held with flock) is refused.
    locked = tmp_path / "locked"
    locked.mkdir()
    with open(locked / "LOCK", "w") as f:
        f.write("pid 4242 on host testhost since 2026-01-01 00:00:00\n")
        f.flush()
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RuntimeError, match="in use by another leanemb run .pid 4242 on host testhost"):
            b.save(locked)
    assert not (locked / "checkpoints").exists()
    # The case of the issue: a `leanemb train --out` (its checkpoints and metrics.jsonl).
    exe = cli()
    if exe:
        train_out = tmp_path / "trainrun"
        sets = ["data.dir=\"%s\"" % (tmp_path / "data"), "data.gen.train_rows=512", "data.gen.eval_rows=64",
                "data.gen.vocab=20", "data.num_sparse=2", "model.table_rows=32", "model.embedding_dim=4",
                "model.bottom_mlp=[8, 4]", "model.top_mlp=[8]", "train.batch_size=64", "train.threads=1",
                "train.checkpoint_every=2"]
        args = [exe, "train", "--quiet", "--steps", "4", "--out", str(train_out)]
        for kv in sets:
            args += ["--set", kv]
        subprocess.run(args, capture_output=True, text=True, check=True)
        trained = sorted(os.listdir(train_out / "checkpoints"))
        assert trained and trained[-1] == "step-0000000004"
        with pytest.raises(ValueError, match=r"holds .*checkpoint director.* and metrics.jsonl"):
            b.save(train_out)
        assert sorted(os.listdir(train_out / "checkpoints")) == trained


def test_zero_copy_and_memory_summary():
    rng = np.random.default_rng(15)
    ebc = ebc_one("sgd", "sum", 0.1)
    kjt = batch(rng, ["f"], weights=True)
    (ebc(kjt).values() * torch.randn(B, DIM)).sum().backward()
    assert ebc.copies == {"inputs": 0, "grads": 0}
    assert ebc(kjt).values().is_contiguous()
    m = ebc.memory_stats()
    assert m["device"]["categories"]["weights"]["current_bytes"] >= ROWS * DIM * 4
    assert "weights" in ebc.memory_summary()
    # placement: optimizer state in the host tier
    h = ebc_one("adagrad", "sum", 0.1)
    h2 = lt.EmbeddingBagCollection(h.embedding_bag_configs(), placement="optimizer_state=host")
    assert h2.memory_stats()["host"]["categories"]["optimizer_state"]["current_bytes"] > 0


def test_cache_and_dynamic_tables_train_like_resident():
    rng = np.random.default_rng(16)
    base = dict(num_embeddings=ROWS, embedding_dim=DIM, name="t", feature_names=["f"], optimizer="adagrad", learning_rate=0.1)
    res = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(**base)])
    cached = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(**base, cache_rows=24)])
    for _ in range(5):
        kjt = batch(rng, ["f"])
        G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
        for m in (res, cached):
            (m(kjt).values() * G).sum().backward()
    assert torch.equal(res.weight("t"), cached.weight("t"))
    assert cached.cache_stats("t")["lookups"] > 0
    dyn = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(**dict(base, num_embeddings=16), dynamic=True)])
    kjt = lt.KeyedJaggedTensor(["f"], torch.tensor([10 ** 12, -5, 10 ** 12]), lengths=torch.tensor([2, 1]))
    (dyn(kjt).values() ** 2).sum().backward()
    assert dyn.dynamic_stats("t")["live_rows"] == 2


def test_prefetch_of_the_next_batch_trains_like_resident():
    # prefetch(next) before forward(current), TorchRec's pipeline order: the same rows as a
    # resident table, and the forwards after the first found their rows fetched ahead.
    rng = np.random.default_rng(18)
    rows = 200  # ids in [0, 100): a cache of 64 rows holds two batches (<= 30 ids each) and evicts
    base = dict(num_embeddings=rows, embedding_dim=DIM, name="t", feature_names=["f"], optimizer="adagrad",
                learning_rate=0.1)
    res = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(**base)])
    cached = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(**base, cache_rows=64)])
    batches = [batch(rng, ["f"], rows=rows) for _ in range(8)]
    cached.prefetch(batches[0])
    for k, kjt in enumerate(batches):
        if k + 1 < len(batches):
            cached.prefetch(batches[k + 1])
        G = torch.tensor(rng.standard_normal((B, DIM)), dtype=torch.float32)
        for m in (res, cached):
            (m(kjt).values() * G).sum().backward()
    assert torch.equal(res.weight("t"), cached.weight("t"))
    st = cached.cache_stats("t")
    assert st["prefetches_taken"] >= len(batches) - 1, st
    assert st["prefetched_rows"] > 0 and st["evictions"] > 0, st
    res.prefetch(batches[0])  # no cache: nothing to do


def test_eval_mode_looks_dynamic_ids_up_and_changes_nothing():
    base = dict(num_embeddings=4, embedding_dim=DIM, name="t", feature_names=["f"], optimizer="adagrad", learning_rate=0.1)
    for cls, cfg in ((lt.EmbeddingBagCollection, lt.EmbeddingBagConfig), (lt.EmbeddingCollection, lt.EmbeddingConfig)):
        m = cls([cfg(**base, dynamic=True)])
        train_kjt = lt.KeyedJaggedTensor(["f"], torch.tensor([10 ** 12, -5, 7, 8]), lengths=torch.tensor([2, 2]))
        out = m(train_kjt)
        vals = out.values() if cls is lt.EmbeddingBagCollection else out["f"].values()
        (vals ** 2).sum().backward()
        stats, weight = m.dynamic_stats("t"), m.weight("t")
        assert stats["live_rows"] == 4  # full
        m.eval()
        unseen = lt.KeyedJaggedTensor(["f"], torch.tensor([1, 2, 3, 10 ** 12, 4, 5]), lengths=torch.tensor([4, 2]))
        out = m(unseen)
        vals = out.values() if cls is lt.EmbeddingBagCollection else out["f"].values()
        assert not vals.requires_grad
        assert m.dynamic_stats("t") == stats
        assert torch.equal(m.weight("t"), weight)
        assert m.tables.dynamic_row(0, 1) == -1
        if cls is lt.EmbeddingBagCollection:  # bag 0: the row of 10**12 alone, bag 1: zeros
            assert torch.equal(vals[0], weight[m.tables.dynamic_row(0, 10 ** 12)])
            assert torch.equal(vals[1], torch.zeros(DIM))
        else:
            assert torch.equal(vals[3], weight[m.tables.dynamic_row(0, 10 ** 12)])
            assert torch.equal(vals[:3], torch.zeros(3, DIM))
        m.train()  # training mode maps (admits) as before
        m(unseen)
        assert m.dynamic_stats("t")["admitted"] > stats["admitted"]


def test_plan_predicts_table_bytes():
    cfg = lt.EmbeddingConfig(num_embeddings=1000, embedding_dim=16, name="t")
    p = leanemb.plan([cfg], batch_size=4, ids_per_sample=8, dtype="bf16", optimizer="rowwise_adagrad")
    ebc = lt.EmbeddingCollection([lt.EmbeddingConfig(num_embeddings=1000, embedding_dim=16, name="t", dtype="bf16",
                                                     optimizer="rowwise_adagrad")])
    m = ebc.memory_stats()["device"]["categories"]
    have = m["weights"]["current_bytes"] + m["optimizer_state"]["current_bytes"]
    assert p["table_bytes"] == have, (p["table_bytes"], have)


def test_dlrm_example_trains():
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "torch_dlrm.py"), "--steps", "60", "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_sequence_weights_and_their_gradient():
    rng = np.random.default_rng(17)
    ec = lt.EmbeddingCollection([lt.EmbeddingConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t", feature_names=["x"],
                                                    optimizer="sgd", learning_rate=0.5)])
    kjt0 = batch(rng, ["x"], weights=True)
    ids, off, w = kjt0.feature("x")
    wt = w.clone().requires_grad_(True)
    weight = ec.weight("t")
    G = torch.tensor(rng.standard_normal((ids.numel(), DIM)), dtype=torch.float32)
    out = ec(lt.KeyedJaggedTensor(["x"], ids, offsets=off, weights=wt))["x"].values()
    assert close(out.detach(), weight[ids] * w.unsqueeze(1))
    (out * G).sum().backward()
    assert close(wt.grad, (weight[ids] * G).sum(1))
    # the rows were updated with the weighted gradient
    want = weight.clone().index_add_(0, ids, -0.5 * G * w.unsqueeze(1))
    assert close(ec.weight("t"), want)
    assert list(ec.parameters()) == []
    with pytest.raises(TypeError, match="floats"):
        lt.KeyedJaggedTensor(["x"], ids, offsets=off, weights=torch.ones(ids.numel(), dtype=torch.int64))


def test_seq_example_trains():
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "torch_seq.py"), "--rows", "100000", "--steps", "30",
                        "--check"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "+0.00%" in r.stdout  # the planner's embedding bytes equal the measured ones


def test_native_tables_refuse_conversions_and_unknown_options():
    C = leanemb._C
    with pytest.raises(ValueError, match="unknown option 'dimm'"):
        C.Tables([{"name": "t", "num_rows": 4, "dimm": 2}], [{"name": "f"}])
    t = C.Tables([{"name": "t", "num_rows": 10, "dim": 2}], [{"name": "f", "table": 0}], {"num_threads": 1})
    out = np.zeros((2, 2), np.float32)
    off = np.array([0, 1, 2], np.int64)
    with pytest.raises(TypeError, match="int64"):
        t.forward(2, [np.array([1, 2], np.int32)], [off], [None], out, [])
    with pytest.raises(TypeError, match="C-contiguous"):
        t.forward(2, [np.arange(4, dtype=np.int64)[::2]], [off], [None], out, [])
    with pytest.raises(TypeError, match="writeable"):
        ro = np.zeros((2, 2), np.float32)
        ro.setflags(write=False)
        t.forward(2, [np.array([1, 2], np.int64)], [off], [None], ro, [])
    t.forward(2, [np.array([1, 2], np.int64)], [off], [None], out, [])  # in place
    assert np.array_equal(out, t.read_rows(0, 1, 2))
    t.close()
    with pytest.raises(RuntimeError, match="closed"):
        t.memory_summary()
    skip = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(num_embeddings=10, embedding_dim=2, name="t")], bounds_check="skip")
    v = skip(lt.KeyedJaggedTensor(["t"], torch.tensor([1, 99]), lengths=torch.tensor([2]))).values()
    assert close(v.detach(), skip.weight("t")[1:2])


# ---- issue 37 item 9: refusals that used to be silent --------------------------------------------

def test_failed_load_state_dict_changes_nothing():
    # A state dict with one bad entry (a NaN weight, a wrong fat_rows shape) is refused whole:
    # rows, optimizer state and step_count stay as they were (they used to take the good parts
    # and the step).
    rng = np.random.default_rng(40)
    cfgs = [lt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=DIM, name=n, feature_names=[f], optimizer="adagrad")
            for n, f in (("t0", "a"), ("t1", "b"))]
    a = lt.EmbeddingBagCollection(cfgs)
    for _ in range(3):
        (a(batch(rng, ["a", "b"])).values() ** 2).sum().backward()
    sd = a.state_dict()
    b = lt.EmbeddingBagCollection(cfgs, seed=3)
    (b(batch(rng, ["a", "b"])).values() ** 2).sum().backward()
    before = b.digest()
    bad = dict(sd)
    bad["embedding_bags.t1.fat_rows"] = bad["embedding_bags.t1.fat_rows"][:, :4]
    with pytest.raises(RuntimeError, match="t1.fat_rows"):
        b.load_state_dict(bad)
    assert b.step_count == 1 and b.digest() == before
    bad = {k: v for k, v in sd.items() if k != "embedding_bags.t1.fat_rows"}
    bad["embedding_bags.t1.weight"] = bad["embedding_bags.t1.weight"].clone()
    bad["embedding_bags.t1.weight"][2, 3] = float("nan")
    with pytest.raises(RuntimeError, match="non-finite"):
        b.load_state_dict(bad)
    assert b.step_count == 1 and b.digest() == before
    b.load_state_dict(sd)
    assert b.step_count == 3 and b.digest() == a.digest()


def test_kjt_refuses_lengths_and_offsets_that_disagree():
    v = torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="disagree"):
        lt.KeyedJaggedTensor(["f"], v, lengths=torch.tensor([1, 2]), offsets=torch.tensor([0, 2, 3]))
    with pytest.raises(ValueError, match="disagree"):
        lt.KeyedJaggedTensor(["f"], v, lengths=torch.tensor([3]), offsets=torch.tensor([0, 2, 3]))
    k = lt.KeyedJaggedTensor(["f"], v, lengths=torch.tensor([2, 1]), offsets=torch.tensor([0, 2, 3]))  # agreeing: fine
    assert torch.equal(k.lengths(), torch.tensor([2, 1]))


@pytest.mark.parametrize("field,value", [("num_embeddings", 1.5), ("embedding_dim", 8.9), ("num_embeddings", True),
                                         ("embedding_dim", False), ("embedding_dim", 8.0), ("cache_rows", 2.5)])
def test_config_refuses_non_integer_sizes(field, value):
    kw = {"num_embeddings": ROWS, "embedding_dim": DIM, field: value}
    with pytest.raises(TypeError, match=field):
        lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(name="t", **kw)])
    ok = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(num_embeddings=np.int64(ROWS), embedding_dim=DIM, name="t")])
    assert ok.weight("t").shape == (ROWS, DIM)


def test_set_weight_refuses_non_finite():
    ebc = ebc_one("sgd")
    w0 = ebc.weight("t")
    for bad in (float("nan"), float("inf"), -float("inf")):
        w = w0.clone()
        w[5, 1] = bad
        with pytest.raises(ValueError, match="row 5, column 1"):
            ebc.set_weight("t", w)
        assert torch.equal(ebc.weight("t"), w0)


def test_load_mismatch_names_each_differing_field(tmp_path):
    # issue 37 item 15: the error names every field that differs, the saved and the new value
    # (it used to say "rows, dim, dtype or optimizer changed?").
    cfg = dict(name="t", feature_names=["f"], optimizer="adam", dtype="fp16")
    a = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(num_embeddings=30, embedding_dim=4, **cfg)])
    path = a.save(tmp_path / "a")
    other = dict(cfg, optimizer="adagrad")
    b = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(num_embeddings=31, embedding_dim=5, **other)])
    with pytest.raises(ValueError) as e:
        b.load(path)
    msg = str(e.value)
    for part in ("rows 30 in the checkpoint, 31 in the config", "dim 4 in the checkpoint, 5 in the config",
                 "optimizer adam in the checkpoint, adagrad in the config"):
        assert part in msg, msg
    assert "dtype" not in msg.replace("state dtype", "")  # only what differs
    c = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(num_embeddings=30, embedding_dim=4, **dict(cfg, dtype="bf16"))])
    with pytest.raises(ValueError, match="dtype fp16 in the checkpoint, bf16 in the config"):
        c.load(path)
    d = lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(num_embeddings=30, embedding_dim=4, **dict(cfg, name="u"))])
    with pytest.raises(ValueError, match="table u is not in the checkpoint.*it has tables t"):
        d.load(path)


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "rowwise_adagrad"])
def test_huge_finite_gradient_skips_update_before_state_overflows(optimizer):
    # issue 37 item 6: a 1e20 output gradient used to make Adagrad / Adam state infinite while
    # found_nonfinite stayed False (those rows then stop learning). Now the update is skipped
    # and reported; with the bound off (max_abs_grad=inf) the old failure shows.
    rng = np.random.default_rng(41)
    kjt = batch(rng, ["f"], empty_bag=False)
    G = torch.ones(B, DIM)
    G[0, 0] = 1e20
    ebc = ebc_one(optimizer, "sum", 0.01)
    w0, s0 = ebc.weight("t"), ebc.optimizer_state("t")
    (ebc(kjt).values() * G).sum().backward()
    assert ebc.found_nonfinite and ebc.last_update["skipped_huge_grad"] and ebc.num_skipped_nonfinite == 1
    assert ebc.step_count == 0
    assert torch.equal(ebc.weight("t"), w0) and torch.equal(ebc.optimizer_state("t"), s0)
    (ebc(kjt).values() * torch.ones(B, DIM)).sum().backward()  # the next clean step trains
    assert not ebc.found_nonfinite and ebc.step_count == 1
    cfg = lt.EmbeddingBagConfig(num_embeddings=ROWS, embedding_dim=DIM, name="t", feature_names=["f"],
                                optimizer=optimizer, learning_rate=0.01)
    off = lt.EmbeddingBagCollection([cfg], num_threads=2, max_abs_grad=float("inf"))
    (off(kjt).values() * G).sum().backward()
    assert not off.found_nonfinite and not bool(torch.isfinite(off.optimizer_state("t")).all())
    with pytest.raises(ValueError, match="max_abs_grad"):
        lt.EmbeddingBagCollection([cfg], max_abs_grad=0.0)
