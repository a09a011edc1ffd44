"""The run store: every per-run key but the streams, read and written in one place.

A run's records (`records`), its memo of LLM replies (`memo`), its answer text as it is written
(`answer_text`), its cancel mark (`cancels`), its pause for plan approval (`approvals`), its
head and its answer (`store`), and the same kept in this process's dicts for what runs
without Redis (`in_process`). Readers (the gateway, `aeon status`) ask `store.RunStore`:
`get`, `watch`, `cancel`, `approve`; they never name a key.

Layer: above transport (bus/), below the LLM layer and the phases. The store's Redis code uses
the bus's connection, key names, codec and errors, so it stands on the bus; the bus in turn
never imports it: what its delivery writes of a run (the records a handler returns, the answer,
the settlement of the answer text, the run head) is part of the commit's one script
(bus.commit, bus.settlement), whose keys come from bus.keys; and the stores a handler reads
(memo, records, cancels) are built by the phases' wiring (phases.worker.make_worker) on the
worker's Redis and passed to the handlers, not by the bus.
"""
