"""Root cause: the topology graph, symptoms and their suspects, ranking, the incident engine,
its evaluation and incident states for Grafana. Reads anomalies and predictions as plain records;
never imports the predictor or scikit-learn."""
