"""Exit codes and the one exception every command turns into a one-line message."""

EXIT_OK = 0  # the command did what it was asked (a run completed, blessed or not)
EXIT_PIPELINE_FAILED = 1  # a pipeline component (or the work itself) failed
EXIT_USAGE = 2  # bad command line, config key or value, input data, unreachable server
# `mptfx serve rollout` gave up without a verdict (too little traffic to judge the canary):
# nothing was promoted or removed, the canary gets no traffic until the next rollout.
EXIT_INCONCLUSIVE = 3
EXIT_DRIFT = 4  # mptfx monitor: served traffic drifted from (or is skewed against) training
# mptfx predict: every input has its row, but some rows carry an error instead of a class
# (a truncated image, a file that is no image): the rest were predicted.
EXIT_SOME_INPUTS_FAILED = 5
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad command line, config, input data or environment: exit 2 with this one line."""
