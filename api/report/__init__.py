"""The web report, drawn with plotly from ``storetune.tuner.analysis.report``'s data: one page for the command
line's file and the service's live view."""
