"""Ablations of the main job: whole `flywheel demo` runs per configuration and seed, measured in
ClickHouse with app.measures, each mechanism's effect against the full recipe with its standard
error, and the curves. Run as ``python -m benchmarks.ablate`` (and ``benchmarks.ablate_effects``);
the logic lives here, in the package, so the tests import it and no test imports a benchmark."""
