"""One index spelled two ways is one index (review 7 L1): pip reads http://H/simple and
http://H/simple/ as the same, so a cache taken from one is not "another index's"."""

from __future__ import annotations

import pytest
from index_server import VERSION, WHEEL, build_wheel, isolate_cache, no_network, use_index

from patchkit import fetch
from patchkit.fetch.origin import same_index


@pytest.mark.parametrize(
    ("recorded", "configured"),
    [
        ("http://h.example/simple/", "http://h.example/simple"),
        ("http://h.example/simple", "http://h.example/simple/"),
        ("https://h.example/simple/", "HTTPS://H.Example/simple/"),
        ("https://h.example/simple/", "https://h.example:443/simple/"),
        ("http://h.example:80/simple/", "http://h.example/simple"),
        ("http://***@h.example/simple/", "http://alice:tok@h.example/simple"),
        ("http://[::1]:8080/simple/", "http://[::1]:8080/simple"),
    ],
)
def test_one_index_spelled_two_ways_is_one(recorded, configured):
    assert same_index(recorded, configured)


@pytest.mark.parametrize(
    ("recorded", "configured"),
    [
        ("http://h.example/simple/", "https://h.example/simple/"),
        ("http://h.example/simple/", "http://h.example:8080/simple/"),
        ("http://h.example/simple/", "http://h.example/Simple/"),  # a path is case-sensitive
        ("http://h.example/simple/", "http://other.example/simple/"),
        ("http://h.example/a/simple/", "http://h.example/simple/"),
    ],
)
def test_other_indexes_stay_other(recorded, configured):
    assert not same_index(recorded, configured)


def test_a_release_cached_from_the_index_with_its_slash_is_not_fetched_again_without_it(server, tmp_path, monkeypatch):
    isolate_cache(tmp_path, monkeypatch)
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())  # .../range/simple/
    fetch.release_tree(VERSION, recheck_index=True)
    use_index(monkeypatch, server.index().rstrip("/"))  # pip's settings changed: pip is asked
    warnings: list[str] = []
    asked = len(server.log)
    fetch.release_tree(VERSION, warn=warnings.append, recheck_index=True)
    assert warnings == [] and len(server.log) == asked, (warnings, server.log[asked:])
    with monkeypatch.context() as offline:  # and remembered: no question to pip next time
        no_network(offline)
        fetch.release_tree(VERSION, recheck_index=True)
