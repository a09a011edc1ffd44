"""Redis servers started on this machine: the embedded one behind `aeon ask` and the test
fixture, and a local Redis Cluster for tests and benchmarks. Kept apart from `bus/`, which
only talks to a Redis and never starts one."""
