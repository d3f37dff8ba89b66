"""Chaos drills: the history a drill records (`history.py`) and the checker that judges it
(`checker.py`), both pure; `history_file.py` reads and writes histories as JSON lines."""
