"""The documentation pages generated from the code, so they cannot drift from it (issue 38).

    python -m agentlightning_cli.docgen --write    # regenerate every generated page under docs/
    python -m agentlightning_cli.docgen --check    # exit 1 naming each stale page (tests/test_docs_generated.py)

pages.py lists the pages and what renders each; one module per source: cli_reference (the Typer app),
settings_reference (config.Settings), errors_reference (every AlightError raised in the package), bench_tables
(bench/results/*.json). changelog + mkdocs_hooks put CHANGELOG.md in the site at build time, its README links
pointed at the pages. commands_check parses
each `alight ...` line of the README and the pages against the Typer app. Layer 0, beside cli: it reads the app.
"""
