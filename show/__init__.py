"""Showing people: the incident page and the run report, drawn server-side (SVG, PNG), with
nothing fetched from outside the machine."""
