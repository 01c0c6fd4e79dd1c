"""Direct Preference Optimization on reflection pairs (UI-TARS's reflection tuning)."""
