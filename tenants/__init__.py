"""Tenants: who asked for a run (a named API token), what each may have in flight and spend in
a day, and what their runs cost (tenants.ledger), kept in Redis for every `aeon serve`."""
