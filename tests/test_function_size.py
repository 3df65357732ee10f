"""No function of the packages (captioner, seq2seq, common) is over 100 lines (issue 46): a
function that long does several things, and each should have a name and a docstring."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "captioner", "seq2seq")
LIMIT = 100


def long_functions(source: str, limit: int = LIMIT) -> list[tuple[str, int]]:
    """`(name, lines)` of every function (methods and nested ones too) over `limit` lines,
    decorators aside."""
    return [(node.name, node.end_lineno - node.lineno + 1)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def test_the_check_finds_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    assert long_functions(f"def f():\n{body}\n") == [("f", LIMIT + 1)]
    assert long_functions("def g():\n    return 1\n") == []


def test_no_function_is_over_100_lines():
    found = [f"{path.relative_to(REPO)}: {name} ({lines} lines)"
             for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))
             for name, lines in long_functions(path.read_text(encoding="utf-8"))]
    assert not found, "functions over 100 lines:\n" + "\n".join(found)
