"""`alight inspect`: browse runs, rounds, episodes and calls; export HAR and JSONL; reward curves.

source.py      which run directory a name or path means, and the store opened on it
shapes.py      the one JSON shape of each object (run, round, episode, call, row, round stats)
conversation.py  a call's request and reply as turns, per protocol (JSON and SSE)
rows.py        how an episode's calls join by token prefix, quickly, from call summaries (the call list's row column)
row_breaks.py  the trainer's rows from the stored ids, and where and why each row's prefix broke
tokens.py      the text of sampled tokens where vLLM's stored answer has it
paged_table.py the table widget that draws only the rows on screen
stats.py       per-round reward, pass@k, outcomes, tokens, training loss; sparkline.py draws it in a line
har.py, jsonl.py  exports;  plot.py  the PNG (matplotlib, the `plot` extra)
text.py        terminal rendering of list/show/stats
app.py + *_view.py  the interactive browser (Textual; imported only when it runs)

SQL never appears here: everything is read through agentlightning_cli.store.
"""
