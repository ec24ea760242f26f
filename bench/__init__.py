"""roost's benchmarks: ``python -m bench [--quick] [NAME...]`` (see bench/README.md).

Each benchmark runs the real daemon in a throwaway ``ROOST_HOME`` and, in the same run, a
baseline that is the physical limit on this machine (a bare anyio Unix-socket newline-JSON
forwarder between the same client processes, a bare append+fsync group commit to the same
disk, a bare interpreter start), and reports roost's figure, the baseline's and the ratio.
"""
