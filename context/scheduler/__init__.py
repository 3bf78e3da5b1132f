"""The schedule, from the scheduler: Slurm (slurmrestd or the CLI's JSON) and Kubernetes, read
into snapshots, turned into the project's job and maintenance events."""
