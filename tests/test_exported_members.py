"""The public surface of ``import nodus`` is pinned: changing it is a deliberate act."""

import nodus

PUBLIC = [
    "Client",
    "Continuity",
    "ContinuityMode",
    "Integration",
    "Stage",
    "Workload",
    "__version__",
    "load_workload",
    "resolve",
]


def test_all_is_sorted_and_pinned():
    assert nodus.__all__ == sorted(nodus.__all__)
    assert nodus.__all__ == PUBLIC


def test_every_exported_member_resolves_and_belongs_to_nodus():
    for name in nodus.__all__:
        member = getattr(nodus, name)
        if name != "__version__":
            assert member.__module__.startswith("nodus."), name
    assert set(PUBLIC) <= set(dir(nodus))


def test_unknown_attribute_is_an_attribute_error():
    try:
        nodus.NoSuchThing  # noqa: B018
    except AttributeError as error:
        assert "NoSuchThing" in str(error)
    else:
        raise AssertionError("nodus.NoSuchThing did not raise")
