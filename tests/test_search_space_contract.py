"""The contract every search space keeps: the YAML spaces and spaces inferred from tables."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import shared
from storetune.runners.tables import load_table
from storetune.search_spaces import (
    Config, InvalidConfig, SearchSpace, TableSpace, config_hash, list_spaces, load_space,
)

TABLES = {
    "BDBC": ("moot_configs/BDBC.csv", {}, None),
    "PostgreSQL": ("moot_configs/PostgreSQL.csv", {}, None),
    "SQL_AllMeasurements": ("moot_configs/SQL_AllMeasurements.csv", {}, None),
    "atc18-w4-ssd": ("cao_atc18_subset", {"workload_id": 4, "disk_type": 3}, None),
    "valov-sqlite": ("modelmap_configs/Valov_system03.csv", {"worker_id": 75}, "PERF"),
}
ENUMERATE_LIMIT = 20_000  # spaces up to this size are enumerated in full by these tests


def _space(name: str) -> SearchSpace:
    if name in TABLES:
        path, context, metric = TABLES[name]
        return load_table(shared(path), context, metric).space
    return load_space(name)


SPACES = list_spaces() + list(TABLES)


@pytest.fixture(params=SPACES)
def space(request: pytest.FixtureRequest) -> SearchSpace:
    return _space(request.param)


def test_every_yaml_space_loads_with_documented_domains():
    assert {"storage_v1", "storage_v2", "admission"} <= set(list_spaces())
    for name in list_spaces():
        space = load_space(name)
        assert space.parameters, name
        undocumented = [p.name for p in space.parameters if not p.source]
        assert not undocumented, f"{name}: say where these domains come from: {undocumented}"


def test_samples_are_valid(space: SearchSpace):
    rng = np.random.default_rng(0)
    for _ in range(200):
        config = space.sample(rng)
        assert space.validate(config) == config
        assert space.contains(config)


def test_batched_draws_and_encodings_match_the_one_at_a_time_ones(space: SearchSpace):
    """BO draws its candidates with ``sample_many`` and encodes them with ``encode_many``: the same
    distribution as ``sample`` (share of each parameter's values, inactive ones included) and the same
    vectors as ``encode``."""
    batch = space.sample_many(np.random.default_rng(2), 2000)
    assert len(batch) == 2000 if not space.forbidden else len(batch) >= 1000  # drops only forbidden rows
    if isinstance(space, TableSpace):  # a table's rows are drawn as one at a time: the same stream
        rng = np.random.default_rng(2)
        assert batch == [space.sample(rng) for _ in range(2000)]
    for config in batch[:200]:
        assert space.validate(config) == config
    assert np.array_equal(space.encode_many(batch), np.vstack([space.encode(c) for c in batch]))
    rng = np.random.default_rng(3)
    single = [space.sample(rng) for _ in range(2000)]

    def shares(configs):
        counts = {}
        for c in configs:
            for p in space.parameters:
                key = (p.name, c.get(p.name) if p.finite else (p.name in c and c[p.name] > (p.low + p.high) / 2))
                counts[key] = counts.get(key, 0) + 1
        return {k: v / len(configs) for k, v in counts.items()}

    one, many = shares(single), shares(batch)
    for key in one.keys() | many.keys():
        assert abs(one.get(key, 0) - many.get(key, 0)) < 0.06, key
        assert many.get(key, 0) > 0 or one[key] < 10 / 2000, key  # a value drawn 10 times is never missing


def test_encode_decode_round_trips(space: SearchSpace):
    rng = np.random.default_rng(1)
    for _ in range(100):
        config = space.sample(rng)
        vector = space.encode(config)
        assert vector.shape == (space.width,)
        assert np.all((vector >= 0) & (vector <= 1))
        decoded = space.decode(vector)
        if any(not p.finite for p in space.parameters):  # reals round-trip up to float error
            assert decoded.keys() == config.keys()
            for k, v in config.items():
                assert decoded[k] == (pytest.approx(v, rel=1e-9) if isinstance(v, float) else v)
        else:
            assert decoded == config


def test_enumerate_matches_the_count_and_is_valid(space: SearchSpace):
    if not space.finite:
        assert space.cardinality() is None
        with pytest.raises(TypeError):
            next(space.enumerate())
        return
    count = space.cardinality()
    if count > ENUMERATE_LIMIT:
        pytest.skip(f"{space.name}: {count} configurations; see test_storage_v2_is_v1_times_the_queue_settings")
    configs = list(space.enumerate())
    assert len(configs) == count
    assert len(set(configs)) == count
    for config in configs:
        assert space.validate(config) == config


def test_storage_v2_is_v1_times_the_queue_settings():
    v1, v2 = load_space("storage_v1"), load_space("storage_v2")
    extra = [v2[n] for n in ("io_scheduler", "read_ahead_kb", "nr_requests")]
    assert v2.cardinality() == v1.cardinality() * int(np.prod([p.size for p in extra]))
    sample = list(itertools.islice(v2.enumerate(), 5000))
    assert all(v2.validate(c) == c for c in sample)


def test_neighbours_move_one_parameter_and_stay_valid(space: SearchSpace):
    rng = np.random.default_rng(2)
    for _ in range(30):
        config = space.sample(rng)
        neighbours = space.neighbours(config)
        assert neighbours, f"{config} has no neighbours"
        assert config not in neighbours
        assert len(set(neighbours)) == len(neighbours)
        for n in neighbours:
            assert space.contains(n)
            if not isinstance(space, TableSpace):
                # one parameter moved; conditional parameters may appear or vanish with it
                shared_keys = config.keys() & n.keys()
                changed = [k for k in shared_keys if config[k] != n[k]]
                assert len(changed) <= 1, (config, n)


def test_hash_is_stable_and_ignores_key_order(space: SearchSpace):
    config = space.sample(np.random.default_rng(3))
    reordered = Config(reversed(list(config.items())))
    assert space.hash(config) == space.hash(reordered) == config_hash(config.to_dict())
    assert config == reordered and hash(config) == hash(reordered)


def test_the_hash_does_not_change_between_releases():
    # The history keys trials by this hash: changing it orphans every stored measurement.
    config = {"fs": "ext4", "block_size": 4096, "inode_size": 256, "atime": "noatime"}
    assert config_hash(config) == "f547e8f5ec48503f"  # sha256 of [["atime","noatime"],["block_size",4096],...]


def test_unknown_parameter_is_named(space: SearchSpace):
    config = space.sample(np.random.default_rng(4)).to_dict()
    config["no_such_knob"] = 1
    with pytest.raises(InvalidConfig, match="unknown parameter 'no_such_knob'.*known:"):
        space.validate(config)


def test_out_of_domain_value_names_parameter_and_allowed_values(space: SearchSpace):
    config = space.sample(np.random.default_rng(5)).to_dict()
    name = next(iter(config))
    config[name] = "definitely-not-allowed"
    with pytest.raises(InvalidConfig) as e:
        space.validate(config)
    assert e.value.parameter == name
    assert name in str(e.value) and ("allowed" in str(e.value) or "expected" in str(e.value))


def test_fingerprint_is_stable():
    assert load_space("storage_v1").fingerprint() == load_space("storage_v1").fingerprint()
    assert load_space("storage_v1").fingerprint() != load_space("storage_v2").fingerprint()


def test_pinning_again_what_is_pinned_changes_nothing(space):
    """A campaign's space is pinned by its checks and again by its creation: the second pinning must not
    change the fingerprint the campaign is resumed by."""
    default = space.default()
    name = next(iter(default))
    once = space.fix({name: default[name]})
    assert once.fix({name: default[name]}).fingerprint() == once.fingerprint()
    assert once.fix({}).fingerprint() == once.fingerprint()


def test_a_pin_where_its_parameter_never_applies_is_refused():
    """`--fix model_kind=regressor --fix decision_threshold=0.3` was accepted and shown as pinned, though the
    threshold never applies to a regressor (`check` refused the same pair); on a table, `--fix fs=ext4 --fix
    xfs_agcount=4` kept every ext4 configuration, none of which has an allocation-group count. A new
    campaign's pins are strict, in either order; a recorded campaign's are taken as they were."""
    admission = load_space("admission")
    with pytest.raises(InvalidConfig, match="decision_threshold=0.3 is pinned where it never applies: "
                                            "decision_threshold does not apply when model_kind=regressor"):
        admission.fix({"model_kind": "regressor", "decision_threshold": 0.3}, strict=True)
    for first, then in (({"model_kind": "regressor"}, {"decision_threshold": 0.3}),
                        ({"decision_threshold": 0.3}, {"model_kind": "regressor"})):  # pinned in two steps
        with pytest.raises(InvalidConfig, match="decision_threshold=0.3 is pinned where it never applies"):
            admission.fix(first).fix(then, strict=True)
    assert admission.fix({"decision_threshold": 0.3}).fix({"model_kind": "classifier"}, strict=True)  # applies
    recorded = admission.fix({"model_kind": "regressor", "decision_threshold": 0.3})  # an old campaign's pins
    assert recorded["model_kind"].values == ("regressor",) and recorded["decision_threshold"].low == 0.3
    from pathlib import Path

    table = load_table(Path(__file__).resolve().parents[1] / "datasets" / "loop-storage-v3", {"workload": "fileserver"}).space
    for pins in ([{"fs": "ext4", "xfs_agcount": 4}], [{"xfs_agcount": 4}, {"fs": "ext4"}]):
        with pytest.raises(InvalidConfig, match="xfs_agcount=4 is pinned where it never applies: no configuration "
                                                r"of [\w-]+ with fs=ext4 has xfs_agcount"):
            space = table
            for p in pins[:-1]:
                space = space.fix(p)
            space.fix(pins[-1], strict=True)
    assert table.fix({"fs": "ext4", "xfs_agcount": 4}).members  # lenient: as a recorded campaign was pinned
    assert {c["xfs_agcount"] for c in table.fix({"fs": "xfs", "xfs_agcount": 4}, strict=True).members} == {4}
