"""`flywheel ui`: a loopback web app over the run's data (Run, Episodes and Annotate views)."""
