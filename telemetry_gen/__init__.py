"""telemetry_gen stage (see DESIGN.md); built by later issues."""
