"""`mptfx standby start [--wait SECONDS] | status | stop`: the warm processes by hand.

    mptfx standby start --wait 300   # start one for this environment, wait until it is ready
    mptfx standby status             # each standby: pid, warming or ready, this environment?
    mptfx standby stop               # SIGTERM to every standby that is not running a command

Exit codes: 0; 1 when `start --wait` saw no standby become ready (its log is named);
2 when standbys are switched off (MPTFX_STANDBY=off) or their folder is unusable.
"""

from __future__ import annotations

import argparse
import os
import signal

from components.errors import EXIT_OK, EXIT_PIPELINE_FAILED, UsageError
from pipelines import standby
from pipelines.standby import client


def register(commands) -> None:
    parser = commands.add_parser("standby", help="the warm process that runs the next `run`")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    start = verbs.add_parser("start", help="start one for this environment")
    start.add_argument("--wait", type=float, metavar="SECONDS", default=0.0,
                       help="wait until it takes commands (default: do not wait)")
    verbs.add_parser("status", help="list the standbys of this user")
    verbs.add_parser("stop", help="stop every standby that is not running a command")
    parser.set_defaults(handler=command_standby)


def _folder():
    if not standby.enabled():
        raise UsageError(f"mptfx standby: switched off by {standby.ENV_SWITCH}="
                         f"{os.environ.get(standby.ENV_SWITCH)}")
    folder = standby.standby_dir()
    if folder is None:
        raise UsageError("mptfx standby: no private folder for the sockets (set "
                         f"{standby.ENV_DIR} to a folder only you can open)")
    return folder


def _standbys(folder) -> list[tuple[str, int]]:
    """(key, pid) of every standby holding its lock (starting or waiting)."""
    found = []
    for lock_path in sorted(folder.glob("*.lock")):
        if client.lock_held(lock_path):
            try:
                found.append((lock_path.stem, int(lock_path.read_text().split()[0])))
            except (OSError, ValueError, IndexError):
                continue
    return found


def command_standby(args: argparse.Namespace) -> int:
    folder = _folder()
    if args.verb == "start":
        pid = client.start() or dict(_standbys(folder)).get(standby.key())
        if not args.wait:
            print(f"mptfx standby: pid {pid}, starting or ready (log: "
                  f"{standby.paths(folder, standby.key())[2]})")
            return EXIT_OK
        ready = client.wait_ready(args.wait, pid)
        log = standby.paths(folder, standby.key())[2]
        if ready is None:
            print(f"mptfx standby: not ready after {args.wait:.0f} s (log: {log})")
            return EXIT_PIPELINE_FAILED
        print(f"mptfx standby: pid {ready} ready")
        return EXIT_OK
    if args.verb == "status":
        mine = standby.key()
        rows = _standbys(folder)
        for standby_key, pid in rows:
            ready = client.ping(standby.paths(folder, standby_key)[0], 0.5)
            state = "ready" if ready else "importing"
            print(f"pid {pid}: {state}, "
                  f"{'this environment' if standby_key == mine else 'another environment'}")
        if not rows:
            print(f"no standby ({folder})")
        return EXIT_OK
    for _, pid in _standbys(folder):
        try:
            os.kill(pid, signal.SIGTERM)
            print(f"mptfx standby: stopped pid {pid}")
        except ProcessLookupError:
            pass
    return EXIT_OK
