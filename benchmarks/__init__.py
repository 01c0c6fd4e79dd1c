"""Flywheel's benchmarks: each module measures a figure against its raw baseline side by side in one
run, and is run as a module of the installed package from the checkout's root
(``python -m benchmarks.run_all``, ``python -m benchmarks.ablate --minutes 30 ...``). They import
the package as any user would (the measuring SQL from app.measures and app.demo_queries); nothing in
the package or the tests imports them."""
