"""`aeon eval`: the quality harness as a command. Its cases and their scoring (`cases.py`, the
40 shipped cases in `cases.jsonl`), the paths each case is asked by (`paths.py`), and the
tables, JSON and frontier picture (`report.py`)."""
