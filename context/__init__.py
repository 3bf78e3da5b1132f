"""Cluster context: what the cluster is (its fabric and inventory, as the site's own tools describe
them) and, next, what runs on it. The detectors and the engine read from here."""
