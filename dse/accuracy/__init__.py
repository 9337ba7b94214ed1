"""Accuracy evidence for answers: per-prompt scores, the paired floor against dense attention."""
