"""Supervised execution, one engine for every child process gapbench starts.

    channel     the event stream: one JSON object per line, from a child to its parent
    events      the events of a workload worker, each a typed record the parent reads strictly
    lifeline    a child dies with its parent (PR_SET_PDEATHSIG on Linux, a watchdog elsewhere)
    supervise   the parent's side: start a child in its own process group, follow its events under a
                deadline, classify how it ended, kill it and every descendant that escaped (the parent is
                their subreaper)
    failures    how a child ended, as a status and a one-line reason
    journal     an fsynced JSON-lines journal of finished work, for resume
    jobs        the typed job a workload worker receives
    variant     inside a child: run one workload variant into a Measurement (single process or rank)
    worker      the single-process workload worker (python -m gapbench.engine.worker)
    workload    the parent's side of one workload: workers, restarts after a crash, the failing variant named

Suite runs (runner), coverage audits (coverage.audit), rank groups (distributed.launch) and the framework
probes all run their children through `supervise`.
"""
