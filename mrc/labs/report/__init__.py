"""What a run's tables say: summary.json, the printed comparison, the figures."""
