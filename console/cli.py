"""`pulse`: the console, and its headless commands.

Imports of heavy modules (Textual, asyncssh) happen inside the command that needs
them, so `pulse classify` and `pulse check` start fast.
"""

from __future__ import annotations

import argparse
import sys

COMMANDS = ("demo", "check", "classify", "dump", "restart", "warmup")


def add_target_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that stand in for a config file (same meaning as its keys)."""
    parser.add_argument("config", nargs="?", help="run config (TOML); flags below override it")
    g = parser.add_argument_group("target (instead of, or on top of, a config)")
    g.add_argument("--host", help="user@host or a ~/.ssh/config alias; default: this machine")
    g.add_argument("--port", type=int)
    c = g.add_mutually_exclusive_group()
    c.add_argument("--pct", metavar="ID", help="run inside Proxmox container ID (pct exec ID --)")
    c.add_argument("--docker", metavar="NAME", help="run inside docker container NAME")
    c.add_argument("--kubectl", metavar="POD", help="run inside kubernetes pod POD")
    g.add_argument("--namespace", help="kubectl namespace")
    g.add_argument("--slurm-job", metavar="ID", help="the run is this Slurm job: every node it runs on")
    g.add_argument("--hosts", metavar="A,B,C", help="the run's nodes, without a scheduler")
    g.add_argument("--reach", choices=("ssh", "srun"), help="reach a Slurm job's nodes by ssh (default) or srun --overlap")
    g.add_argument("--log", help="the run's log file (Slurm patterns %%j %%N %%t allowed for a fleet)")
    g.add_argument("--match", help="regex over process command lines that finds the run")
    g.add_argument("--pidfile", help="file holding the run's main PID")
    g.add_argument("--launch", help="command that starts the run (for restart)")
    g.add_argument("--baseline", type=float, help="normal tokens/s of the run")
    g.add_argument("--known-hosts", help="known_hosts file to check the host key against")
    g.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="trust an unknown host key on first contact (a changed key is always refused)",
    )
    g.add_argument("--read-only", action="store_true", help="disable every mutating action")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pulse",
        description="Terminal operations console for long multi-GPU training runs.",
        epilog="commands: demo, check, classify, dump, restart, warmup (pulse COMMAND --help)",
    )
    add_target_flags(parser)
    parser.add_argument("--theme", help="theme name (see themes/)")
    return parser


def build_command_parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"pulse {command}")
    if command == "classify":
        parser.description = "Log lines in, one JSON object per line out: kind and metrics."
        parser.add_argument("file", nargs="?", help="log file; standard input when absent")
        parser.add_argument("--config", help="config whose [metrics] patterns to apply")
        return parser
    if command == "demo":
        parser.description = "The whole console on a simulated run, through a real in-process SSH server."
        parser.add_argument(
            "--scenario",
            default="healthy",
            choices=("healthy", "slow", "oom", "nan", "hang", "buffered", "dead"),
        )
        parser.add_argument("--theme")
        parser.add_argument("--read-only", action="store_true")
        return parser
    add_target_flags(parser)
    if command == "check":
        parser.description = "One-shot diagnosis; exit 0 healthy, 1 a problem, 2 unreachable or bad config."
        parser.add_argument("--json", action="store_true", help="print the documented JSON object")
        parser.add_argument("--stall-after", type=float, metavar="SECONDS", help="log silence that counts as a stall (default: learned from the run's rhythm)")
    elif command == "dump":
        parser.description = "py-spy dump of the run's main process (or --pid)."
        parser.add_argument("--pid", type=int)
        parser.add_argument("--native", action="store_true")
        parser.add_argument("--locals", action="store_true")
        parser.add_argument("--children", action="store_true", help="dump child processes too")
        parser.add_argument("--nonblocking", action="store_true")
        parser.add_argument("--json", action="store_true")
    elif command == "restart":
        parser.description = "Safe kill-and-relaunch: show the plan, ask, stop, wait for GPU memory, launch, verify."
        parser.add_argument("--yes", action="store_true", help="do not ask")
        parser.add_argument("--grace", type=float, metavar="SECONDS")
        parser.add_argument("--force", action="store_true", help="launch even if old PIDs still hold GPU memory")
    elif command == "warmup":
        parser.description = "Run the configured warmup once per (GPU, sequence length), one at a time."
        parser.add_argument("--yes", action="store_true", help="do not ask")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        command, rest = argv[0], argv[1:]
        args = build_command_parser(command).parse_args(rest)
    else:
        command, args = "console", build_parser().parse_args(argv)
    try:
        return _dispatch(command, args)
    except KeyboardInterrupt:
        return 130


def _dispatch(command: str, args: argparse.Namespace) -> int:
    if command == "classify":
        from console.observe.classify import run_classify

        return run_classify(args)
    if command == "demo":
        from console.demo.run import run_demo

        return run_demo(args)

    from console.config import ConfigError, load_from_args

    try:
        config = load_from_args(args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if command == "check" and (config.target.slurm_job or config.target.hosts):
        from console.fleet.fleet_check import run_fleet_check

        return run_fleet_check(config, args)
    if command == "check":
        from console.check import run_check

        return run_check(config, args)
    if command == "restart" and config.target.slurm_job:
        from console.fleet import headless as fleet_headless

        return fleet_headless.restart(config, args)
    if command in ("dump", "restart", "warmup"):
        from console.actions import headless

        return getattr(headless, command)(config, args)
    if config.target.slurm_job or config.target.hosts:
        from console.ui.fleet_screen import run_fleet_console

        return run_fleet_console(config, args)
    from console.ui.app import run_console

    return run_console(config, args)


if __name__ == "__main__":
    sys.exit(main())
