"""The `aeon` command (main), and what it prints: answers (display), `aeon status` and
`aeon dlq`."""
