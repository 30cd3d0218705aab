"""Reading text files: UTF-8 or a clear error naming the line (`simulmt.input.textcheck`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulmt.input.textcheck import read_utf8


def test_read_utf8_names_the_line_and_byte_that_is_not_utf8(tmp_path: Path) -> None:
    good = tmp_path / "good.de"
    good.write_text("Grüße\nStraße\n", encoding="utf-8")
    assert read_utf8(good, "source") == "Grüße\nStraße\n"
    bad = tmp_path / "bad.de"
    bad.write_bytes("Grüße\n".encode() + "Stra\xdfe .\n".encode("latin-1"))  # ß in Latin-1
    with pytest.raises(ValueError, match=r"source file .*bad.de line 2 is not UTF-8 text \(byte "
                       r"0xdf at byte 5 of the line\)"):  # fmt: skip
        read_utf8(bad, "source")
