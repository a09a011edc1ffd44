"""Webhooks: when a run ends, its answer POSTed to the URL its request named, signed.

Three modules, so that a gateway that only checks a request's URL and reads a run's outcome
loads no consumer, retry or worker module (tests/unit/test_layers.py counts them): which URLs
may be named (`policy`), what became of a run's webhook (`outcome`), and the group that POSTs
(`delivery`).

- A request may carry `webhook_url`. Gateways refuse it (HTTP 422, exit 2) unless webhooks are
  on (AEON_WEBHOOK_SECRET and AEON_WEBHOOK_ALLOWED_HOSTS both set) and the URL is allowed
  (`policy.WebhookSettings.refusal`).
- Delivery is a consumer group of its own on the answers stream (`delivery.route`), so it scales
  with the workers and survives their kills like any hop: an answer whose run named a URL is POSTed,
  `{"correlation_id", "result"}`, signed by the Standard Webhooks spec (the `standardwebhooks`
  package: `webhook-id`, the answer's event id, the same on every try; `webhook-timestamp`;
  `webhook-signature`). A try that fails (no 2xx, a redirect, which is never followed, no answer
  within AEON_WEBHOOK_TIMEOUT_S) raises, and the bus tries again, AEON_WEBHOOK_ATTEMPTS tries in
  all, waiting AEON_WEBHOOK_BACKOFF_S after the first and twice as long after each next (the route's
  own bound: a receiver that is down is not the pipeline's failure, and deserves longer than a
  phase's retries); after the last try the answer goes to dead letters, the reason named. At least
  once: a worker killed mid-delivery leaves the entry to be claimed and sent again.
- The outcome is kept on the run, and told: the commit that acks the answer's entry writes
  the run record `webhook` (keys.WEBHOOK_RECORD, kept as long as the answer) and publishes a
  `WebhookSettled` (delivered or failed, with the tries) that gateways follow, in one script:
  exactly one outcome per run, however often the entry was delivered.
- Allowed: host names (`hooks.example.com`, `*.example.com`), over https only, whose addresses
  are all public; or origins (`http://127.0.0.1:9000`), exactly: the only way to allow plain
  http, or a private or loopback address. The addresses are checked when the answer is sent,
  so a name that later resolves to a private address is refused then. A URL with a user name
  or password (`user:password@host`) is never allowed, and no line Aeon writes shows one, nor
  a URL's query (`settings.bare_url`).
"""
