"""A preflight check as every kind's preflight reports it (a dict in the reply's JSON) and as a
refusal says it: its name, whether it passed, what it found, and what to do when it failed."""

from __future__ import annotations


def check(name: str, ok: bool, detail: str, fix: str = "") -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail, "fix": "" if ok else fix}


def refusal(head: str, checks: list[dict]) -> str | None:
    """The failed checks in one line after ``head``; None when every check passes."""
    bad = [c for c in checks if not c["ok"]]
    if not bad:
        return None
    return f"{head}: " + "; ".join(
        f"{c['name']}: {c['detail']}" + (f" — fix: {c['fix']}" if c["fix"] else "") for c in bad
    )
