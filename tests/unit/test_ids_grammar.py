"""The id grammar's rules for what a scheduler, a URL or a file name reads specially (issue 64)."""

from __future__ import annotations

import pytest

from vocab.ids import entity_refusal, node_refusal


@pytest.mark.parametrize("name", ["ALL", "all", "All", "aLL", "DEFAULT", "default"])
def test_a_word_slurm_reads_as_many_nodes_is_no_node_name(name: str) -> None:
    refusal = node_refusal(name)
    assert refusal is not None and refusal.rule == "ids.node.reserved"


@pytest.mark.parametrize("name", ["all-gpu0", "ALL1", "gpu-all", "default-pool-3", "allnodes"])
def test_a_host_name_holding_such_a_word_is_still_a_name(name: str) -> None:
    assert node_refusal(name) is None


@pytest.mark.parametrize(
    ("entity", "rule"),
    [
        ("n0001/../../api/v1/nodes", "ids.entity.dots"),
        ("a..b", "ids.entity.dots"),
        ("n0001-gpu0/x", "ids.entity.slash"),  # "/" outside a port part
        ("n0_https://evil.example/x", "ids.entity.slash"),  # an empty segment: a URL's "//"
        ("sw01:1//2", "ids.entity.slash"),
        ("sw01:1/3/", "ids.entity.slash"),
        ("sw01:/1", "ids.entity.slash"),
    ],
)
def test_an_entity_id_never_names_another_path(entity: str, rule: str) -> None:
    refusal = entity_refusal(entity)
    assert refusal is not None and refusal.rule == rule, refusal


@pytest.mark.parametrize(
    "entity", ["sw01:1/3/2", "leaf-3:p7", "n0001.rack3.example.org-gpu7", "spine-01:1/1/1", "n0001-nic0-optic"]
)
def test_real_ids_stay_ids(entity: str) -> None:
    assert entity_refusal(entity) is None
