"""BO's encoding of small ordinals: one-hot columns beside their position, from the start or after N
observations, and the synthetic tables with ordinals that checked them (bench/SEARCH.md, "Ordinals one-hot
too", "One-hot ordinals after 20 evaluations")."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import shared
from storetune.runners import Status, make_runner
from storetune.tuner import make_tuner


def write_rows(path, rows: list[str]):
    path.write_text("\n".join(rows) + "\n")
    return path


def test_bo_can_also_encode_small_ordinals_one_hot():
    """``bo:ordinal_onehot`` gives an ordinal of 3 to that many values one column per value beside its
    position (7z's Xval: six values, the last good one before a cliff); binary and longer ordinals keep their
    position only, and unset the model's inputs are the space's encoding itself. ``auto`` passes it to BO."""
    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/7z.csv"))})
    space, means = runner.space, runner.table.means(runner.table.default_metric)
    configs = list(means)[:40]
    plain = make_tuner("bo", space, seed=0, direction="min")
    assert np.array_equal(plain._encode_many(configs), space.encode_many(configs))
    bo = make_tuner("bo", space, seed=0, direction="min", params={"ordinal_onehot": 8})
    X = bo._encode_many(configs)
    values = space["Xval"].values
    assert X.shape == (40, space.width + len(values))  # Files (11) and BlockSize (13) get no columns
    assert np.array_equal(X[:, : space.width], space.encode_many(configs))
    assert [values[i] for i in X[:, space.width:].argmax(axis=1)] == [c["Xval"] for c in configs]
    assert np.all(X[:, space.width:].sum(axis=1) == 1)
    for _ in range(12):  # the kernel is fitted on the wider inputs: a length scale per column
        config = bo.ask(1)[0]
        bo.tell(config, means[config])
    assert len(bo._optimizer.models[-1].kernel_.k1.k2.length_scale) == space.width + len(values)
    auto = make_tuner("auto", space, seed=0, direction="min", params={"bo_ordinal_onehot": 5})
    assert auto.members[auto.names.index("bo")].params.ordinal_onehot == 5
    member = make_tuner("auto", space, seed=0, direction="min").members[0]  # auto's default: one-hot from the 21st
    assert (member.name, member.params.ordinal_onehot, member.params.ordinal_onehot_after) == ("bo", 8, 20)
    with pytest.raises(ValueError):
        make_tuner("bo", space, seed=0, direction="min", params={"ordinal_onehot": -1})


def test_bo_adds_the_one_hot_columns_after_its_first_observations():
    """With ``ordinal_onehot_after`` N, BO models the positions alone for N observations, then tells the same
    observations again to a model over the wider encoding, its kernel starting from the positions' fitted
    length scales, and from then on scores its candidates in it (a listed space's too). On a space with no
    ordinal of 3 to 8 values nothing is rebuilt: the asks are those of a BO without the option."""
    for table in ("7z", "HSMGP_num"):  # sampled (beyond LIST_LIMIT) and listed candidates
        runner = make_runner("dataset", {"dataset": str(shared(f"moot_configs/{table}.csv"))})
        space, means = runner.space, runner.table.means(runner.table.default_metric)
        params = {"ordinal_onehot": 8, "ordinal_onehot_after": 20}
        bo, twin = (make_tuner("bo", space, seed=3, direction="min", params=params) for _ in range(2))
        told = []
        for _ in range(20):
            config = bo.ask(1)[0]
            for tuner in (bo, twin):
                tuner.tell(config, means[config])
            told.append(config)
        assert np.array_equal(np.asarray(bo._optimizer.Xi), space.encode_many(told))  # positions only
        targets = list(bo._optimizer.yi)
        wide = space.encode_many(told, 8)
        assert wide.shape[1] > space.width
        fitted = np.array(twin._kernel.k1.k2.length_scale)
        twin._widen()  # what the 21st tell starts with
        assert np.array_equal(twin._kernel.k1.k2.length_scale, np.r_[fitted, np.ones(wide.shape[1] - space.width)])
        assert np.array_equal(np.asarray(twin._optimizer.Xi), wide) and twin._optimizer.yi == targets

        config = bo.ask(1)[0]
        bo.tell(config, means[config])
        assert np.array_equal(np.asarray(bo._optimizer.Xi), space.encode_many(told + [config], 8))
        assert bo._optimizer.yi[:20] == targets and len(bo._optimizer.yi) == 21
        assert len(bo._optimizer.models[-1].kernel_.k1.k2.length_scale) == wide.shape[1]  # refitted on them
        assert bo._fitted_at == 21
        candidates, X = bo._candidates()
        assert len(candidates) > 100 and np.array_equal(X, space.encode_many(candidates, 8))

    bdbc = make_runner("dataset", {"dataset": str(shared("moot_configs/BDBC.csv"))})
    bdbc_means = bdbc.table.means(bdbc.table.default_metric)
    asks = []
    for params in ({}, {"ordinal_onehot": 8, "ordinal_onehot_after": 12}):
        tuner, seen = make_tuner("bo", bdbc.space, seed=1, direction="min", params=params), []
        first = tuner._optimizer
        for _ in range(25):
            config = tuner.ask(1)[0]
            tuner.tell(config, bdbc_means[config])
            seen.append(config)
        assert tuner._optimizer is first  # never rebuilt
        asks.append(seen)
    assert asks[0] == asks[1]


def test_bo_widening_keeps_failures_and_retold_means():
    """The re-told observations are those the model had: a failure before any result is not told (nor
    re-told), a later one keeps its crash cost, and a re-measured configuration keeps its new mean."""
    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/HSMGP_num.csv"))})
    space, means = runner.space, runner.table.means(runner.table.default_metric)
    bo = make_tuner("bo", space, seed=5, direction="min",
                    params={"ordinal_onehot": 8, "ordinal_onehot_after": 4, "initial_points": 2})
    configs = list(means)[:6]
    bo.tell(configs[0], None, Status.FAILED)  # before any result: the model is not told
    for config in configs[1:4]:
        bo.tell(config, means[config])
    bo.tell(configs[4], None, Status.FAILED)  # told at a crash cost
    bo.retell(configs[1], means[configs[1]] * 2)
    narrow = list(bo._optimizer.yi)
    assert len(narrow) == 4 and len(bo._optimizer.Xi[0]) == space.width
    bo.tell(configs[5], means[configs[5]])  # the fifth told: the model widens
    assert bo._xi_configs == configs[1:6]
    assert np.array_equal(np.asarray(bo._optimizer.Xi), space.encode_many(configs[1:6], 8))
    assert bo._optimizer.yi[:4] == narrow and narrow[0] == pytest.approx(bo.warp(means[configs[1]] * 2))
    bo.retell(configs[2], means[configs[2]] * 3)  # found in the wider encoding too
    assert bo._optimizer.yi[1] == pytest.approx(bo.warp(means[configs[2]] * 3))
    assert bo.ask(1)


def test_synthetic_tables_with_ordinals_of_either_shape(tmp_path):
    """bench/synthetic_tables.py's ordinals: ``smooth`` acts in order (a quadratic of the position), ``cliff``
    improves up to a value short of the last and is 3-20x worse past it (7z's Xval); the binary options'
    effects are those of the same seed without ordinals, so earlier tables stay as they were."""
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("synthetic_tables", ROOT / "bench" / "synthetic_tables.py")
    synthetic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synthetic)
    X0, y0 = synthetic.table(7, options=4)
    for shape in ("smooth", "cliff"):
        X, y = synthetic.table(7, options=4, ordinals=2, levels=6, shape=shape)
        assert X.shape == (16 * 36, 6) and set(X[:, 4]) == set(range(6))
        at_zero = (X[:, 4] == 0) & (X[:, 5] == 0)  # the binary part alone, up to the noise
        assert np.allclose(np.log(y[at_zero] / y[at_zero][0]), np.log(y0 / y0[0]), atol=0.02)
        for k in (4, 5):
            best = np.array([y[X[:, k] == v].min() for v in range(6)]) / y.min()
            if shape == "cliff":
                edge = int(np.argmin(best))
                assert 0 < edge < 5 and best[edge + 1] > 2.5 * best[edge]  # the cliff, past the last good value
                assert np.all(np.diff(best[: edge + 1]) < 0.01)  # improving up to it
            else:
                assert np.max(best) < 3  # no cliff: scale 0.3 on the log, at most a few times that
    synthetic.write(tmp_path / "t.csv", X, y, options=4)
    header = (tmp_path / "t.csv").read_text().splitlines()[0]
    assert header == "o0,o1,o2,o3,d0,d1,Performance-"
    with pytest.raises(ValueError, match="smooth or cliff"):
        synthetic.table(7, options=2, ordinals=1, shape="steps")
    with pytest.raises(ValueError, match="levels 3 or more"):
        synthetic.table(7, options=2, ordinals=1, levels=2, shape="cliff")


def test_bo_adds_the_one_hot_columns_only_where_the_results_ask_for_them(tmp_path):
    """With ``ordinal_onehot_evidence`` 1, the columns join at a kernel refit once a Gaussian process over the wider
    encoding beats the positions' log marginal likelihood by BIC's penalty. On 7z, whose Xval is 10% better at its
    last value before a cliff, they join; on a table whose two 5-level ordinals act in order (a smooth trend plus
    measurement noise), a length scale per value explains nothing the positions do not, and they never join, where
    unasked (evidence 0) they would have joined at the 21st result."""
    rng = np.random.default_rng(0)
    rows = ["a,b,c,d,level,depth,Performance-"]
    for bits in range(16):
        for level in range(5):
            for depth in range(5):
                a, b, c, d = ((bits >> i) & 1 for i in range(4))
                time = 10 + 4 * a - 3 * b + 2 * a * c + d + 0.6 * level + 0.3 * depth
                rows.append(f"{a},{b},{c},{d},{level},{depth},{time * (1 + 0.05 * rng.standard_normal()):.4f}")
    path = write_rows(tmp_path / "ordered.csv", rows)
    cases = {str(shared("moot_configs/7z.csv")): (True, 40), str(path): (False, 60)}  # 7z's seed 2 joins at 30
    for table, (joins, tells) in cases.items():
        runner = make_runner("dataset", {"dataset": table})
        space, means = runner.space, runner.table.means(runner.table.default_metric)
        params = {"ordinal_onehot": 8, "ordinal_onehot_after": 20, "initial_points": 5, "ordinal_onehot_evidence": 1}
        bo = make_tuner("bo", space, seed=2, direction="min", params=params)
        for _ in range(tells):
            config = bo.ask(1)[0]
            bo.tell(config, means[config])
        added = space.encoded_width(8) - space.encoded_width(0)
        checks = [(n, gain, gain > 0.5 * added * np.log(n)) for n, gain in bo.onehot_gains]
        assert checks and checks[0][0] > 20, table  # the first check is the first refit past the 20th result
        assert (bo._onehot == 8) is joins and any(ok for *_, ok in checks) is joins, (table, checks)
        if joins:  # checked no more once joined, and the model has a length scale per column from then on
            assert checks[-1][2] and not any(ok for *_, ok in checks[:-1])
            assert len(bo._optimizer.models[-1].kernel_.k1.k2.length_scale) == space.encoded_width(8)
        else:
            assert len(bo._optimizer.Xi[0]) == space.encoded_width(0)
    ordered = make_runner("dataset", {"dataset": str(path)})  # the same table, unasked: its columns join at the 21st
    space, means = ordered.space, ordered.table.means(ordered.table.default_metric)
    unasked = make_tuner("bo", space, seed=2, direction="min", params={**params, "ordinal_onehot_evidence": 0})
    for n in (20, 21):
        while len(unasked._optimizer.yi) < n:
            config = unasked.ask(1)[0]
            unasked.tell(config, means[config])
        assert len(unasked._optimizer.Xi[0]) == space.encoded_width(8 if n > 20 else 0)
    assert space.encoded_width(8) == space.encoded_width(0) + 10
