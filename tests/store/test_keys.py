"""Store keys: each kind is built by one function and parsed back by one, never by another."""

from __future__ import annotations

import pytest

from nodus.store import keys

SNAPSHOT = "ckpt_0123456789abcdef"
DIGEST = "ab" + "c" * 30
TOKEN = "0f" * 8

# (key, the parser that owns it, what it parses to)
OWNED = [
    (keys.blob_key(DIGEST), keys.hash_of_blob_key, DIGEST),
    (keys.manifest_key(SNAPSHOT), keys.snapshot_id_of_key, SNAPSHOT),
    (keys.tombstone_key(SNAPSHOT, "weights"), keys.tombstone_of_key, (SNAPSHOT, "weights")),
    (keys.hold_key(SNAPSHOT, "epoch-released"), keys.hold_of_key, (SNAPSHOT, "epoch-released")),
    (keys.intent_key(SNAPSHOT), keys.intent_of_key, SNAPSHOT),
    (keys.sweep_key(TOKEN), keys.sweep_of_key, TOKEN),
    (keys.index_key(SNAPSHOT, "run_0123abcd"), keys.index_of_key, (SNAPSHOT, "run_0123abcd")),
]
PARSERS = [parser for _key, parser, _value in OWNED]
OTHERS = [
    keys.quarantine_key(SNAPSHOT),
    "locks/sweep.json",  # the single lock of older versions
    keys.temp_key("blob"),
    "blobs/zz/" + DIGEST,  # wrong fan-out folder
    "snapshots/notes.txt",  # a stray file someone copied in
    "holds/" + SNAPSHOT + "/pin.txt",
    "index/" + SNAPSHOT,  # an index entry naming no run
    "index/" + SNAPSHOT + "./etc",
    "index/notes.txt",
]


@pytest.mark.parametrize(("key", "parser", "value"), OWNED, ids=[p.__name__ for p in PARSERS])
def test_each_key_is_parsed_back_by_its_own_parser_only(key, parser, value):
    assert parser(key) == value
    for other in PARSERS:
        if other is not parser:
            assert other(key) is None, f"{other.__name__} misread {key}"


# ids by position: a temp key is random, and xdist workers must collect the same test names
@pytest.mark.parametrize("key", OTHERS, ids=[f"other{i}" for i in range(len(OTHERS))])
def test_keys_of_no_listed_kind_are_parsed_by_none(key):
    assert [parser.__name__ for parser in PARSERS if parser(key) is not None] == []


def test_the_layout_is_the_documented_one():
    assert keys.blob_key(DIGEST) == f"blobs/ab/{DIGEST}"
    assert keys.manifest_key(SNAPSHOT) == f"snapshots/{SNAPSHOT}.json"
    assert keys.tombstone_key(SNAPSHOT, "state") == f"tombstones/{SNAPSHOT}.state"
    assert keys.hold_key(SNAPSHOT, "pin") == f"holds/{SNAPSHOT}/pin.json"
    assert keys.intent_key(SNAPSHOT) == f"intents/{SNAPSHOT}.json"
    assert keys.sweep_key(TOKEN) == f"locks/sweep-{TOKEN}.json"
    assert keys.hold_folder(SNAPSHOT) == f"holds/{SNAPSHOT}"
    assert keys.quarantine_key(SNAPSHOT) == f"quarantine/{SNAPSHOT}.json"
    assert keys.index_key(SNAPSHOT, "run_1f") == f"index/{SNAPSHOT}.run_1f"
    assert keys.temp_key("obj").startswith("tmp/obj-")
    assert keys.temp_key("obj") != keys.temp_key("obj")  # fresh each time
    assert all(keys.is_snapshot_id(keys.new_snapshot_id(r)) for r in ("checkpoint", "source"))


@pytest.mark.parametrize("run", ["", "..", ".hidden", "a/b", "../x", "r\x00", "a b"])
def test_a_run_id_that_is_no_single_safe_segment_gets_no_index_entry(run):
    assert keys.index_key(SNAPSHOT, run) is None  # its snapshot is found by its manifest
