"""Caller headers are checked before anything is resolved or dialled: what HTTP/1.1 (and h11) would refuse
mid-attempt is a ``ValueError`` up front, and the value is never echoed (it may be a secret)."""

from __future__ import annotations

import pytest

from switchboard.push._transport import _check_header


@pytest.mark.parametrize("value", ["a\x01b", "x\x7f", "a\r\nhost: evil", "nul\x00", "tok\x1b[0m", "ünï"])
def test_control_characters_and_non_ascii_are_refused_without_echo(value: str) -> None:
    with pytest.raises(ValueError, match="invalid value") as info:
        _check_header("x-token", value)
    assert value not in str(info.value)


def test_printable_values_and_tabs_pass_trimmed_and_names_are_lower_cased() -> None:
    assert _check_header("X-Token", " Bearer a\tb ") == (b"x-token", b"Bearer a\tb")
