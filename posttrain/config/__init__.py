"""The typed config tree (YAML + dotted overrides, loaded by base.load_config).

Layout: base.py (Strict, load_config, overrides, save_config), common.py (shared sections),
one module per command: sft.py, pref.py (rm, dpo), rl.py, sched.py, eval.py, cluster.py, and
pipeline.py (`posttrain run`, `posttrain base`) on top. Import each name from its defining module.
"""
