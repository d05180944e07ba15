"""python -m agentlightning_cli.docgen [--write | --check]: see __init__.py."""

from __future__ import annotations

import argparse
import sys

from agentlightning_cli.docgen.pages import ROOT, stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentlightning_cli.docgen",
                                     description="Regenerate (or check) the documentation pages made from the code.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="rewrite every stale generated page")
    group.add_argument("--check", action="store_true", help="exit 1 naming each stale generated page")
    args = parser.parse_args(argv)
    if args.write:
        for path in write():
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
        return 0
    out_of_date = stale()
    for path in out_of_date:
        print(f"{path.relative_to(ROOT)} is out of date: run `python -m agentlightning_cli.docgen --write`",
              file=sys.stderr)
    return 1 if out_of_date else 0


if __name__ == "__main__":
    raise SystemExit(main())
