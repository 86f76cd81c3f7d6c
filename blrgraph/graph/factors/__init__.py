"""Conditional factors, one module per kind (a rule table)."""
