"""Acting on incidents and predictions: policies as data, a plan for every action, dry run by
default, a circuit breaker, per-entity attempt limits, exclusions, approval, an audit log, and
the executors (Slurm, a site command, a webhook) that do what a policy asked for and no more."""
