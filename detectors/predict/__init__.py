"""Failure prediction: precursor features, the model, online scoring."""
