"""`aiops bench …`: benchmarks that print tables (throughput, state, latency, goodput, soak,
backlog, scale). Apart from the product: their subcommand is a plugin (cli.py, registered as an
entry point, which the product finds without importing it); they drive the product through its
public API and the CLI's settings helper (`aiops.cli.common`), and their comparison libraries come
with the `bench` extra."""
