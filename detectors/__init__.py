"""Detection: per tick, vectorised over every series. The detector stack (rules, peer groups,
own-history statistics, presence, maintenance), counter rates, tick assembly in event time, the
detect loop both runners share, and the failure predictor (detectors/predict)."""
