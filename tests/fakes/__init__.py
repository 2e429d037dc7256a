"""Test doubles and tiny fixtures that stand in for large real artefacts."""
