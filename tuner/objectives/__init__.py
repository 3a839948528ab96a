"""What a trial's measurements are worth: the objective over one metric or several (``objective``), and which
configuration leads while repeats are still coming in (``intensify``)."""
