"""rca stage (see DESIGN.md); built by later issues."""
