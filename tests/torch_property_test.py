"""torch_property: leanemb.torch's input checks and outputs on random jagged inputs (issue 37).

Run by CTest: PYTHONPATH=<build>/python /usr/bin/python3 -m pytest -q tests/torch_property_test.py.
Fixed seeds, small tables, a few seconds. For each seed a random KeyedJaggedTensor (random keys
order, batch size, bag lengths with empty bags, duplicate ids, optional per-id weights, lengths
or offsets or both) is looked up and trained one SGD step; torch.nn.functional.embedding_bag on a
dense copy of the same weights is the reference. Random corruptions of valid inputs must be
refused (with the documented exception type) and change nothing; the next valid batch trains.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
lt = pytest.importorskip("leanemb.torch")

SEEDS = range(24)
LR = 0.1


def tables(rng):
    """Two or three tables (random rows, dims, poolings), one or two features each."""
    cfgs, feats = [], []
    for t in range(int(rng.integers(2, 4))):
        rows, dim = int(rng.integers(1, 50)), int(rng.integers(1, 12))
        names = [f"f{t}_{k}" for k in range(int(rng.integers(1, 3)))]
        pooling = "mean" if rng.random() < 0.4 else "sum"
        cfgs.append(lt.EmbeddingBagConfig(num_embeddings=rows, embedding_dim=dim, name=f"t{t}", feature_names=names,
                                          pooling=pooling, optimizer="sgd", learning_rate=LR))
        feats += [(n, t) for n in names]
    return cfgs, feats


def random_kjt(rng, cfgs, feats, weighted):
    """A valid KJT over the features (in a shuffled key order, with an extra key) and its parts."""
    keys = [f for f, _ in feats] + ["unused"]
    rng.shuffle(keys)
    table_of = dict(feats)
    B = int(rng.integers(1, 7))
    lengths, ids = [], []
    for k in keys:
        rows = cfgs[table_of[k]].num_embeddings if k in table_of else 1000
        ln = rng.integers(0, 6, size=B)
        ln[rng.random(B) < 0.3] = 0  # empty bags
        lengths.append(ln)
        ids.append(rng.integers(0, rows, size=int(ln.sum())))  # duplicates within and across bags
    lengths = torch.tensor(np.concatenate(lengths) if B else np.zeros(0, np.int64), dtype=torch.int64)
    values = torch.tensor(np.concatenate(ids) if ids else np.zeros(0, np.int64), dtype=torch.int64)
    weights = torch.tensor(rng.uniform(0.25, 2.0, size=values.numel()), dtype=torch.float32) if weighted else None
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
    how = int(rng.integers(0, 3))
    kw = {"lengths": lengths} if how == 0 else {"offsets": offsets} if how == 1 else {"lengths": lengths, "offsets": offsets}
    return lt.KeyedJaggedTensor(keys, values, weights=weights, stride=B, **kw), keys, B


def reference(kjt, cfgs, feats, weights):
    """[B, sum of dims] from torch's embedding_bag over dense copies `weights` (requires grad)."""
    outs = []
    for f, t in feats:
        ids, off, w = kjt.feature(f)
        mode = cfgs[t].pooling
        if mode == "mean" and w is not None:
            # torch refuses per_sample_weights with mean: weighted sum over the bag's length
            s = torch.nn.functional.embedding_bag(ids, weights[t], off[:-1], mode="sum", per_sample_weights=w,
                                                  include_last_offset=False)
            n = (off[1:] - off[:-1]).clamp(min=1).to(s.dtype).unsqueeze(1)
            outs.append(s / n)
        else:
            outs.append(torch.nn.functional.embedding_bag(ids, weights[t], off[:-1], mode=mode, per_sample_weights=w))
    return torch.cat(outs, 1)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_jagged_batches_match_embedding_bag(seed):
    # forward equals torch's EmbeddingBag; one backward equals torch SGD on the dense copy.
    rng = np.random.default_rng(seed)
    cfgs, feats = tables(rng)
    ebc = lt.EmbeddingBagCollection(cfgs, seed=seed, num_threads=1)
    dense = [ebc.weight(c.name).clone().requires_grad_(True) for c in cfgs]
    kjt, _, B = random_kjt(rng, cfgs, feats, weighted=bool(seed % 2))
    out = ebc(kjt).values()
    ref = reference(kjt, cfgs, feats, dense)
    assert out.shape == (B, sum(cfgs[t].embedding_dim for _, t in feats))
    assert torch.allclose(out.detach(), ref.detach(), rtol=1e-5, atol=1e-6)
    G = torch.tensor(rng.standard_normal(tuple(out.shape)), dtype=torch.float32)
    (out * G).sum().backward()
    (ref * G).sum().backward()
    with torch.no_grad():
        for t, c in enumerate(cfgs):
            expect = dense[t] - LR * dense[t].grad
            assert torch.allclose(ebc.weight(c.name), expect, rtol=1e-5, atol=1e-6), c.name
    assert ebc.step_count == 1 and not ebc.found_nonfinite


def corruptions(rng, cfgs, feats, keys, B, kjt):
    """(description, exception type, thunk building a bad KJT and looking it up) for one batch."""
    values, lengths, offsets = kjt.values(), kjt.lengths(), kjt.offsets()
    table_of = dict(feats)
    used = [i for i, k in enumerate(keys) if k in table_of]
    out = []
    # an id out of range / negative in a used feature that has ids
    spans = [(int(offsets[i * B]), int(offsets[(i + 1) * B]), keys[i]) for i in used]
    spans = [s for s in spans if s[1] > s[0]]
    if spans:
        lo, hi, k = spans[int(rng.integers(0, len(spans)))]
        pos = int(rng.integers(lo, hi))
        for bad in (cfgs[table_of[k]].num_embeddings, -1, np.iinfo(np.int64).max, np.iinfo(np.int64).min):
            v = values.clone()
            v[pos] = int(bad)
            out.append((f"id {bad}", IndexError, lambda v=v: lt.KeyedJaggedTensor(keys, v, lengths=lengths, stride=B)))
    if values.numel():
        out.append(("lengths sum > nnz", ValueError,
                    lambda: lt.KeyedJaggedTensor(keys, values[:-1], lengths=lengths, stride=B)))
        o = offsets.clone()
        j = int(rng.integers(1, o.numel()))
        o[j] = o[-1] + 1 if j < o.numel() - 1 else o[-1] - 1
        if not torch.equal(o, offsets):
            out.append(("bad offset", ValueError, lambda o=o: lt.KeyedJaggedTensor(keys, values, offsets=o, stride=B)))
    if lengths.numel() >= 1 and values.numel():
        ln = lengths.clone()
        i = int(torch.nonzero(ln)[0])
        ln[i] -= 1
        if i + 1 < ln.numel():
            ln[i + 1] += 1  # same total, other bags
            out.append(("lengths vs offsets", ValueError,
                        lambda ln=ln: lt.KeyedJaggedTensor(keys, values, lengths=ln, offsets=offsets, stride=B)))
    out.append(("float ids", TypeError, lambda: lt.KeyedJaggedTensor(keys, values.double(), lengths=lengths, stride=B)))
    out.append(("weights of other length", ValueError,
                lambda: lt.KeyedJaggedTensor(keys, values, lengths=lengths, stride=B,
                                             weights=torch.ones(values.numel() + 1))))
    out.append(("missing key", ValueError,
                lambda: lt.KeyedJaggedTensor([k if k != keys[used[0]] else "zz" for k in keys], values, lengths=lengths,
                                             stride=B)))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_random_corruptions_are_refused_and_change_nothing(seed):
    # Each corruption of a valid batch raises the documented type before any row changes; the
    # valid batch then trains as if nothing had happened.
    rng = np.random.default_rng(1000 + seed)
    cfgs, feats = tables(rng)
    ebc = lt.EmbeddingBagCollection(cfgs, seed=seed, num_threads=1)
    kjt, keys, B = random_kjt(rng, cfgs, feats, weighted=False)
    before = ebc.digest()
    tried = 0
    for what, exc, make in corruptions(rng, cfgs, feats, keys, B, kjt):
        with pytest.raises(exc):
            bad = make()
            (ebc(bad).values() ** 2).sum().backward()
        assert ebc.digest() == before and ebc.step_count == 0, what
        tried += 1
    assert tried >= 3
    twin = lt.EmbeddingBagCollection(cfgs, seed=seed, num_threads=1)
    for m in (ebc, twin):
        (m(kjt).values() ** 2).sum().backward()
    assert ebc.digest() == twin.digest() and ebc.step_count == 1
