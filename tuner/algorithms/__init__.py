"""The search algorithms behind one ask/tell interface (``base.Tuner``), found by name through ``registry``,
which imports each only when it is asked for (torch for DQN, scikit-optimize for BO)."""
