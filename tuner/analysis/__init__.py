"""What a history means: campaign summaries and the best trial (``summary``), success curves
(``convergence``), which parameters matter (``importance``), Pareto sets (``pareto``), a report's data
(``report``), and which workloads are alike (``workloads``)."""
