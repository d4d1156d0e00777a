"""Every size nodus shows is in the binary units its limits are written in."""

from __future__ import annotations

from nodus.schemas.units import human_bytes


def test_sizes_read_in_binary_units():
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1024) == "1.0 KiB"
    assert human_bytes(256 << 20) == "256.0 MiB"
    assert human_bytes(3 << 30) == "3.0 GiB"
    assert human_bytes(5 << 40) == "5.0 TiB"
    assert human_bytes(5 << 50) == "5120.0 TiB"  # the largest unit holds the rest
