"""`python -m service waitlist export`: CSV (formula-safe) and JSONL of every registration."""

from __future__ import annotations

import csv
import io
import json

import pytest
from processes import free_port

from service.cli import main, neutralise

ROWS = [
    {"email": "ada@example.com", "intent": "claim", "project": "=HYPERLINK(\"http://x\")", "message": "+1 gm"},
    {"email": "bob@example.com", "intent": "member", "project": "-2+3", "message": "@SUM(A1)"},
    {"email": "cy@example.com", "intent": "arcade", "project": "Plain, \"quoted\"", "message": "line1\nline2"},
]


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@A1", "'@A1"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("a=b", "a=b"),
        ("Acme;=cmd|'/C calc'!A0;", "Acme;'=cmd|'/C calc'!A0;"),
        ("a,+1;-2\t@3\n=4\r=5", "a,'+1;'-2\t'@3\n'=4\r'=5"),
        ("=a;=b", "'=a;'=b"),
        ("a; =b, 1-2", "a; =b, 1-2"),
        ("", ""),
        (None, None),
    ],
)
def test_neutralise_formula_cells(cell, expected):
    """Cells a spreadsheet would evaluate get a leading quote; everything else is untouched."""
    assert neutralise(cell) == expected


def _register(make_client, url):
    with make_client(database_url=url) as client:
        for row in ROWS:
            assert client.post("/api/waitlist", json=row).status_code == 200


def test_csv_export_neutralises_and_round_trips(make_client, database_url, monkeypatch, capsys):
    """The CSV has the documented columns, every row, and no cell that starts a formula."""
    _register(make_client, database_url)
    monkeypatch.setenv("SERVICE_DATABASE_URL", database_url)
    assert main(["waitlist", "export", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    table = list(csv.DictReader(io.StringIO(captured.out)))
    assert list(table[0]) == ["email", "intent", "project", "message", "createdAt", "updatedAt"]
    assert [(r["email"], r["intent"], r["project"], r["message"]) for r in table] == [
        ("ada@example.com", "claim", "'=HYPERLINK(\"http://x\")", "'+1 gm"),
        ("bob@example.com", "member", "'-2+3", "'@SUM(A1)"),
        ("cy@example.com", "arcade", "Plain, \"quoted\"", "line1\nline2"),
    ]
    assert captured.err.strip() == "exported 3 registrations"


def test_jsonl_export_keeps_values_exact(make_client, database_url, monkeypatch, capsys):
    """JSONL is data, not a spreadsheet: values come out exactly as stored, one object per line."""
    _register(make_client, database_url)
    monkeypatch.setenv("SERVICE_DATABASE_URL", database_url)
    assert main(["waitlist", "export", "--format", "jsonl"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [{k: line[k] for k in ("email", "intent", "project", "message")} for line in lines] == ROWS
    assert all(line["createdAt"].endswith("Z") for line in lines)


def test_an_empty_export_is_the_header_alone(sqlite_url, monkeypatch, capsys):
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    assert main(["waitlist", "export"]) == 0
    assert capsys.readouterr().out == "email,intent,project,message,createdAt,updatedAt\n"


def test_an_export_the_database_refused_writes_nothing(monkeypatch, capsys):
    """`export > waitlist.csv` with the database unreachable leaves the file empty, not a header
    that reads as an empty waitlist."""
    monkeypatch.setenv("SERVICE_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{free_port()}/test")
    assert main(["waitlist", "export"]) == 1  # a database that does not answer now: try again later
    out, err = capsys.readouterr()
    assert out == ""
    assert "cannot be reached" in err
