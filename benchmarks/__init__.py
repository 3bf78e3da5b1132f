"""`aiops bench …`: benchmarks that print tables (throughput, state, latency, goodput, soak,
backlog, scale). Apart from the product: they drive it through its public API and the CLI's
settings helper (`aiops.cli.common`), and their comparison libraries come with the `bench` extra."""
