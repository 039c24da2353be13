"""Results analysis: loading runs, statistics, figures and the HTML report."""
