"""`flywheel verifier`: a learned outcome reward model trained on the log, served as the judge."""
