"""The program on top of the stages: the `aiops` command line, the pipeline wiring (runner.py),
the default failure model's training, benches and demos."""
