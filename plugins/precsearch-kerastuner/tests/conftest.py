import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# As precsearch's own tests: no probes, 0.1 s timed blocks (the loader is the subject here,
# not the probes or how precisely the instrument measures).
os.environ.setdefault("PRECSEARCH_PROBE_TIME", "0")
os.environ.setdefault("PRECSEARCH_BLOCK_TIME", "0.1")
