"""The host's checks: the vocabulary a run's answer is held to, the host's own reading of the
constraints a request states, and running the checks (docs/verified-answers.md).

Below llm/ and phases/, so the offline model and the phases use the one vocabulary; beside
prompts/, which never imports it (the phases pass PREPARE its description, `vocabulary.described`).

- `types.py`: the nine check types, `parse_check`;
- `units.py`: what a count check counts; `patterns.py`: regular expressions under a time bound;
  `json_schema.py`: a text read as JSON and judged by a JSON Schema; `language.py`: the language
  a text is written in;
- `running.py`: a check's outcome on a text; `threads.py`: the threads checks run in, shared
  fairly by runs, and a run's budget of CPU time for them; `commands.py`: an executable check;
- `vocabulary.py`: the vocabulary as PREPARE's prompt shows it, written from the types;
- `stated.py`: the constraints a request states in so many words, read as checks;
- `repairs.py`: the lossless fixes the host makes to a text that fails a check.
"""
