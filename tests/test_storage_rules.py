"""The storage spaces encode what mkfs accepts and what the kernel mounts."""

from __future__ import annotations

import pytest

from storetune.search_spaces import InvalidConfig, load_space


@pytest.fixture(scope="module")
def v1():
    return load_space("storage_v1")


def test_ext2_has_no_journal(v1):
    with pytest.raises(InvalidConfig, match="journal_mode does not apply when fs=ext2"):
        v1.validate({"fs": "ext2", "journal_mode": "ordered"}, fill_defaults=True)
    assert "journal_mode" not in v1.validate({"fs": "ext2"}, fill_defaults=True)


@pytest.mark.parametrize("fs", ["ext3", "ext4"])
def test_journalled_ext_has_journal_mode_and_commit(v1, fs):
    config = v1.validate({"fs": fs, "journal_mode": "writeback", "commit_s": 30}, fill_defaults=True)
    assert config["journal_mode"] == "writeback" and config["commit_s"] == 30


def test_flex_bg_is_ext4_only(v1):
    assert "flex_bg_size" in v1.validate({"fs": "ext4"}, fill_defaults=True)
    with pytest.raises(InvalidConfig, match="flex_bg_size"):
        v1.validate({"fs": "ext3", "flex_bg_size": 16}, fill_defaults=True)


def test_inode_may_not_exceed_block(v1):
    with pytest.raises(InvalidConfig, match="forbidden combination.*inode larger than the block"):
        v1.validate({"fs": "ext4", "block_size": 1024, "inode_size": 2048}, fill_defaults=True)
    v1.validate({"fs": "ext4", "block_size": 2048, "inode_size": 2048}, fill_defaults=True)


def test_xfs_block_sizes_start_at_1024(v1):
    xfs = {c["block_size"] for c in v1.enumerate() if c["fs"] == "xfs"}
    assert xfs == {1024, 2048, 4096}


def test_btrfs_sector_is_the_page_size(v1):
    assert {c["block_size"] for c in v1.enumerate() if c["fs"] == "btrfs"} == {4096}


def test_values_from_the_command_line_are_coerced(v1):
    config = v1.validate({"fs": "xfs", "block_size": "2048", "xfs_agcount": "8"}, fill_defaults=True)
    assert config["block_size"] == 2048 and isinstance(config["block_size"], int)


def test_admission_threshold_applies_to_regressors_and_cutoff_labels():
    space = load_space("admission")
    period = space.validate({"model_kind": "classifier", "labeling": "period"}, fill_defaults=True)
    assert "threshold_percentile" not in period and "loss_bias" not in period
    cutoff = space.validate({"model_kind": "classifier", "labeling": "cutoff"}, fill_defaults=True)
    assert "threshold_percentile" in cutoff and "class_weight" in cutoff
    regressor = space.validate({"model_kind": "regressor"}, fill_defaults=True)
    assert {"threshold_percentile", "loss_bias"} <= set(regressor) and "labeling" not in regressor
    with pytest.raises(InvalidConfig, match="loss_bias"):
        space.validate({"model_kind": "regressor", "loss_bias": 1.0}, fill_defaults=True)
    with pytest.raises(InvalidConfig, match="class_weight"):
        space.validate({"model_kind": "classifier", "class_weight": 0.5}, fill_defaults=True)


def test_storage_full_widens_storage_v2_in_place_and_keeps_its_rules():
    """storage_full names storage_v2's many-valued knobs again: each is replaced where it stands, on a log
    scale where the kernel's own scale is; the rest, and the forbidden combinations, are storage_v2's."""
    from storetune.search_spaces import Kind

    v2, full = load_space("storage_v2"), load_space("storage_full")
    assert [p.name for p in full.parameters][: len(v2.parameters)] == [p.name for p in v2.parameters]
    assert [p.name for p in full.parameters][len(v2.parameters):] == ["journal_mib", "dirty_mib", "dirty_background_pct"]
    for name, low, high in (("read_ahead_kb", 4, 16384), ("nr_requests", 4, 2048), ("commit_s", 1, 300)):
        p = full[name]
        assert (p.kind, p.low, p.high, p.log) == (Kind.INTEGER, low, high, True)
    assert full["fs"] == v2["fs"] and full.forbidden == v2.forbidden
    # with no scheduler the hardware queue bounds nr_requests, which the space cannot know: it is left alone
    assert "nr_requests" not in full.validate({"fs": "xfs", "io_scheduler": "none"}, fill_defaults=True)
    assert full.validate({"fs": "xfs", "io_scheduler": "bfq", "nr_requests": 2048}, fill_defaults=True)["nr_requests"] == 2048
    with pytest.raises(InvalidConfig, match="nr_requests"):
        full.validate({"fs": "xfs", "io_scheduler": "bfq", "nr_requests": 2049}, fill_defaults=True)


def test_a_space_counts_its_configurations_without_listing_them():
    """storage_full holds about 10^21 configurations: counted from its conditions, not listed; on spaces small
    enough to list, the count is the listing's length."""
    from storetune.search_spaces.catalog import space_from_dict

    assert load_space("storage_full").cardinality() > 10**20  # listed, this would outlast the test's timeout
    values = {"kind": "categorical", "values": ["p", "q", "r"]}
    small = [
        # a rule filed under b, whose alternative without b holds where b is inactive
        {"parameters": [{"name": "a", **values}, {"name": "b", **values, "when": {"a": "p"}}],
         "forbidden": [{"when": [{"a": "q"}, {"b": "r"}], "reason": "x"}]},
        # a later parameter's condition reads an earlier one: counted by walking it, not multiplying
        {"parameters": [{"name": "a", **values}, {"name": "n", "kind": "integer", "low": 1, "high": 40},
                        {"name": "b", **values, "when": {"n": {"max": 7}}},
                        {"name": "c", "kind": "integer", "low": 1, "high": 9, "when": {"a": ["p", "r"]}}],
         "forbidden": [{"when": {"a": "q", "b": "p"}, "reason": "x"}]},
    ]
    for i, definition in enumerate(small):
        space = space_from_dict({"name": f"s{i}", **definition})
        assert space.cardinality() == sum(1 for _ in space.enumerate())
    v1 = load_space("storage_v1")
    assert v1.cardinality() == sum(1 for _ in v1.enumerate()) == 5004


def test_an_extending_space_may_not_name_a_parameter_twice():
    from storetune.search_spaces.catalog import space_from_dict

    twice = {"name": "x", "extends": "storage_v1",
             "parameters": [{"name": "t", "kind": "integer", "low": 1, "high": 2}] * 2}
    with pytest.raises(ValueError, match="parameter names repeat"):
        space_from_dict(twice, base=load_space("storage_v1"))
