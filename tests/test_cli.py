"""The CLI's shared error handling and ``kbatch sample``'s output (issue 16)."""

from __future__ import annotations

import argparse

import pytest

from kbatch import __main__ as cli
from kbatch.errors import CRCError


def test_sample_prints_record_counts(tmp_path, capsys):
    assert cli.main(["sample", str(tmp_path / "root")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"{tmp_path / 'root' / 'orders-0'}: 300 records at offsets 0..299, 2 segments" in lines
    assert any(line.endswith("132 records at offsets 0..154, 6 segments") for line in lines)  # payments-0


def test_sample_into_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert cli.main(["sample", str(tmp_path / "f")]) == 2
    assert capsys.readouterr().err == f"kbatch sample: error: {tmp_path / 'f'} exists and is not a directory\n"
    assert cli.main(["sample", str(tmp_path / "f" / "below")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbatch sample: error: cannot write") and err.count("\n") == 1


def test_sample_refuses_a_folder_that_holds_files(tmp_path, capsys):
    """Its files would be mixed with the sample's: refused, as convert refuses an existing output."""
    out = tmp_path / "root"
    out.mkdir()
    assert cli.main(["sample", str(out)]) == 0  # an empty directory is used
    capsys.readouterr()
    assert cli.main(["sample", str(out)]) == 2  # again: it holds the first sample now
    assert capsys.readouterr().err == (f"kbatch sample: error: {out} exists and holds 11 entries (cleaner-offset-"
                                       "checkpoint, legacy-0, log-start-offset-checkpoint, ...): give a new or empty "
                                       "directory\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert cli.main(["sample", str(tmp_path / "mine")]) == 2
    assert "holds 1 entry (notes.txt)" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    ("exc", "status", "text"),
    [
        (CRCError("crc32c mismatch", 7, 0, "crc"), 1, "kbatch dump: error: crc32c mismatch"),
        (FileNotFoundError(2, "No such file or directory", "/x"), 2, "kbatch dump: error: /x: No such file"),
        (ValueError("bad value"), 2, "kbatch dump: error: bad value"),
        (KeyError("bug"), 1, "kbatch dump: internal error: KeyError"),
    ],
)
def test_the_net_under_every_subcommand(monkeypatch, capsys, exc, status, text):
    def boom(args: argparse.Namespace) -> int:
        raise exc

    parser = cli.build_parser()
    real = parser.parse_known_args
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(
        parser, "parse_known_args", lambda argv: (argparse.Namespace(**{**vars(real(argv)[0]), "handler": boom}), [])
    )
    monkeypatch.delenv("KBATCH_DEBUG", raising=False)
    assert cli.main(["dump", "--files", "x"]) == status
    err = capsys.readouterr().err
    assert err.startswith(text) and err.count("\n") == 1 and "Traceback" not in err
    monkeypatch.setenv("KBATCH_DEBUG", "1")
    with pytest.raises(type(exc)):
        cli.main(["dump", "--files", "x"])
