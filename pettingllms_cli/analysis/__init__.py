"""Reading runs and held-out problems: scoring (evaluate.py), statistics, reports, plots and compare's tables."""
