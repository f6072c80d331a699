"""`pulse`: the console, and its headless commands.

Imports of heavy modules (Textual, asyncssh) happen inside the command that needs
them, so `pulse classify` and `pulse check` start fast.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING


from console import paths
from console.crash import report_crash

if TYPE_CHECKING:
    from console.config import Config

#: The commands, with the one line `pulse --help` gives each.
COMMANDS = {
    "demo": "the whole console on a simulated run (no GPU, no remote host needed)",
    "check": "one-shot diagnosis; exit 0 healthy, 1 a problem, 2 unreachable or bad config",
    "classify": "log lines in, one JSON object per line out: kind and metrics",
    "dump": "py-spy dump of the run's main process",
    "restart": "safe kill-and-relaunch: the plan, a confirm, stop, wait for GPU memory, launch, verify",
    "warmup": "the configured warmup, once per (GPU, sequence length)",
    "watch": "monitor, diagnose, journal and alert with no UI; SIGTERM stops it (exit 0)",
    "journal": "the run's journal: what happened, when",
    "report": "a Markdown post-mortem of a window of the run's journal",
}
#: What `pulse COMMAND --help` shows last.
COMMAND_EXAMPLES = {
    "demo": ["pulse demo", "pulse demo --scenario hang --theme pulse-light"],
    "check": ["pulse check run.toml", "pulse check --host gpu-box --log /workspace/train.log --match 'train\\.py' --json"],
    "classify": ["pulse classify train.log", "tail -f train.log | pulse classify --config run.toml"],
    "dump": ["pulse dump run.toml", "pulse dump --pid 4242 --native"],
    "restart": ["pulse restart run.toml", "pulse restart run.toml --yes --grace 60"],
    "warmup": ["pulse warmup run.toml --yes"],
    "watch": ["pulse watch run.toml", "nohup pulse watch run.toml >> watch.log 2>&1 &",
              "pulse watch run.toml --restart-on hung --max-restarts 2 --restart-after 15m --metrics :9464",
              "pulse watch fleet.toml --slurm-job 4242 --restart-on hung --max-restarts 2 --metrics :9464"],
    "journal": ["pulse journal run.toml", "pulse journal run.toml --since 2d --json", "pulse journal fleet.toml --slurm-job 4242"],
    "report": ["pulse report run.toml --since 12h > incident.md"],
}
EXIT_USAGE = 2
#: The commands that start a console. The cyclic GC waits while one starts: its collections walked the
#: objects that imports and the app's start create, all of them kept (42-57 ms of the 470-640 ms to the
#: first frame). The app resumes it when its start-up is over (ThemedApp.settle_heap_once), at the
#: latest a few seconds after it mounted (ThemedApp.START_GC_PAUSE_S); leaving main resumes it too.
CONSOLE_COMMANDS = ("console", "demo")

EXAMPLES = r"""
examples:
  pulse run.toml                      the console on the run run.toml describes
  pulse train                         a named run: ~/.config/pulse/runs/train.toml
  pulse --host root@gpu-box --pct 200 --log /workspace/train.log --match 'python3.*train\.py'
  pulse --slurm-job 123456            a multi-node Slurm job, one row per node
  pulse check run.toml --json         one-shot diagnosis as JSON
  pulse demo --scenario hang          try it on a simulated hung run
  pulse --print-completion bash > ~/.local/share/bash-completion/completions/pulse
"""


#: Marks an argument that completes as a file name; shtab's own marker is set when a script is
#: printed (importing shtab and importlib.metadata at every start cost ~25 ms of `pulse demo`'s).
COMPLETE_FILE = "file"


def completes_files(action: argparse.Action) -> argparse.Action:
    """Mark `action` as completing a file name (shtab reads an action's `complete` attribute)."""
    setattr(action, "complete", COMPLETE_FILE)
    return action

COMPLETION_SHELLS = ("bash", "zsh", "tcsh", "fish", "powershell")


def sentence(text: str) -> str:
    """`text` as a sentence: its first letter raised, the rest as written (GPU, JSON keep their case),
    and a program's name (py-spy) as its own."""
    return (text if text.startswith("py-spy") else text[:1].upper() + text[1:]) + "."


def pulse_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pulse-console")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class _PrintVersion(argparse.Action):
    """`--version`: the installed version is looked up only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace, values, option_string=None) -> None:
        print(f"pulse {pulse_version()}")
        parser.exit()


class _PrintCompletion(argparse.Action):
    """`--print-completion SHELL`: shtab's script for the whole CLI (completion_parser)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace, shell, option_string=None) -> None:
        import shtab

        if shell not in shtab.SUPPORTED_SHELLS:  # an older shtab than the one the choices name
            parser.error(f"this shtab ({shtab.__version__}) cannot write a {shell} completion")
        whole = completion_parser()
        for each in _all_parsers(whole):
            for action in each._actions:
                if getattr(action, "complete", None) == COMPLETE_FILE:
                    setattr(action, "complete", shtab.FILE)
        print(shtab.complete(whole, shell=shell))
        parser.exit()


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [parser, *(p for s in subparsers for child in s.choices.values() for p in _all_parsers(child))]


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    completes_files(parser.add_argument(
        "config", nargs="?", help="run config (TOML), or the NAME of ~/.config/pulse/runs/NAME.toml; flags below override it"
    ))


def add_target_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that stand in for a config file (same meaning as its keys)."""
    g = parser.add_argument_group("target (instead of, or on top of, a config)")
    g.add_argument("--host", help="user@host or a ~/.ssh/config alias; default: this machine")
    g.add_argument("--port", type=int, help="SSH port (default: ~/.ssh/config's, else 22)")
    c = g.add_mutually_exclusive_group()
    c.add_argument("--pct", metavar="ID", help="run inside Proxmox container ID (pct exec ID --)")
    c.add_argument("--docker", metavar="NAME", help="run inside docker container NAME")
    c.add_argument("--kubectl", metavar="POD", help="run inside kubernetes pod POD")
    g.add_argument("--namespace", help="the kubectl pod's namespace (--kubectl POD's, or the config's pod's)")
    g.add_argument("--slurm-job", metavar="ID", help="the run is this Slurm job: every node it runs on")
    g.add_argument("--hosts", metavar="A,B,C", help="the run's nodes, without a scheduler")
    g.add_argument(
        "--reach", choices=("ssh", "srun"),
        help="reach a Slurm job's nodes by ssh (default) or by srun --overlap steps through the login node",
    )
    g.add_argument("--log", help="the run's log file (Slurm patterns %%j %%N %%t allowed for a fleet)")
    g.add_argument("--match", help="regex over process command lines that finds the run (with --slurm-job: narrows within the job)")
    g.add_argument("--pidfile", help="file holding the run's main PID")
    g.add_argument("--launch", help="command that starts the run (for restart)")
    g.add_argument("--baseline", type=float, help="normal tokens/s of the run")
    g.add_argument("--known-hosts", help="known_hosts file to check the host key against")
    g.add_argument("--ssh-config", metavar="FILE", help="an ssh_config to read instead of ~/.ssh/config")
    g.add_argument("--py-spy", metavar="PATH", help="py-spy on the target (default: py-spy on its login PATH)")
    g.add_argument(
        "--stall-after", type=float, metavar="SECONDS",
        help="log silence that counts as a stall (default: the run's rhythm, learned while the console follows, "
        "estimated from the log's size by pulse check)",
    )
    g.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="trust an unknown host key on first contact (a changed key is always refused)",
    )
    g.add_argument("--read-only", action="store_true", help="disable every mutating action")


def build_parser() -> argparse.ArgumentParser:
    command_lines = "\n".join(f"  {name:<10} {line}" for name, line in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="pulse",
        description="Terminal operations console for long multi-GPU training runs.",
        epilog=f"commands (pulse COMMAND --help):\n{command_lines}\n{EXAMPLES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_PrintVersion, help="show the version and exit")
    parser.add_argument(
        "--print-completion", action=_PrintCompletion, choices=COMPLETION_SHELLS, help="print a shell completion script"
    )
    add_config_argument(parser)
    add_console_flags(parser)
    return parser


def add_console_flags(parser: argparse.ArgumentParser) -> None:
    """`pulse [CONFIG]`'s flags: the target's and the theme."""
    add_target_flags(parser)
    parser.add_argument("--theme", help="theme name or a theme .toml file (built-in, or ~/.config/pulse/themes)")


def build_command_parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"pulse {command}",
        description=sentence(COMMANDS[command]),
        epilog="examples:\n" + "\n".join(f"  {line}" for line in COMMAND_EXAMPLES[command]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if command == "classify":
        completes_files(parser.add_argument("file", nargs="?", help="log file; standard input when absent"))
        completes_files(parser.add_argument("--config", help="config (or named run) whose [metrics] patterns to apply"))
        return parser
    if command == "demo":
        parser.add_argument(
            "--scenario",
            default="healthy",
            choices=("healthy", "slow", "oom", "nan", "hang", "buffered", "dead"),
            help="what the simulated run does (default: %(default)s)",
        )
        parser.add_argument("--theme", help="theme name or a theme .toml file")
        parser.add_argument("--read-only", action="store_true", help="disable every mutating action")
        return parser
    add_config_argument(parser)
    add_target_flags(parser)
    if command == "check":
        parser.add_argument("--json", action="store_true", help="print the documented JSON object")
    elif command == "dump":
        parser.add_argument("--pid", type=int, help="dump this PID instead of the run's main process")
        parser.add_argument("--native", action="store_true", help="include native (C/C++) frames")
        parser.add_argument("--locals", action="store_true", help="show each frame's local variables")
        parser.add_argument("--children", action="store_true", help="dump child processes too")
        parser.add_argument("--nonblocking", action="store_true", help="do not pause the process while reading it")
        parser.add_argument("--json", action="store_true", help="print the dump as JSON")
    elif command == "restart":
        parser.add_argument("--yes", action="store_true", help="do not ask")
        parser.add_argument("--grace", type=float, metavar="SECONDS", help="wait this long after SIGTERM before SIGKILL")
        parser.add_argument("--force", action="store_true", help="launch even if old PIDs still hold GPU memory")
        parser.add_argument("--root", type=int, metavar="PID", help="the run, when the match finds several process trees")
        parser.add_argument("--all-roots", action="store_true", help="stop every process tree the match finds")
    elif command == "warmup":
        parser.add_argument("--yes", action="store_true", help="do not ask")
    elif command == "watch":
        w = parser.add_argument_group("restart policy and metrics (or the config's [watch] table; these win)")
        w.add_argument("--restart-on", metavar="VERDICT[,VERDICT…]",
                       help="restart the run (as pulse restart --yes; a Slurm job: as pulse restart --slurm-job ID --yes) once "
                       "its verdict has been one of these for --restart-after")
        w.add_argument("--max-restarts", type=int, metavar="N", help="at most N automatic restarts per --restart-window")
        w.add_argument("--restart-window", metavar="DURATION", help="the window --max-restarts counts in (default 6h)")
        w.add_argument("--restart-after", metavar="DURATION", help="how long the verdict must last first (default 10m)")
        w.add_argument("--metrics", metavar="HOST:PORT",
                       help="serve Prometheus metrics at http://HOST:PORT/metrics (HOST defaults to 127.0.0.1)")
    elif command in ("journal", "report"):
        parser.add_argument("--since", default="6h" if command == "journal" else "24h", metavar="DURATION",
                            help="how far back: 90s, 30m, 6h, 2d (default %(default)s)")
        parser.add_argument("--demo", action="store_true", help="the last `pulse demo` run's journal (no config needed)")
        if command == "journal":
            parser.add_argument("--json", action="store_true", help="one JSON object: entries and per-minute figures")
    if command in ("restart", "warmup"):
        parser.add_argument("--no-audit", action="store_true", help="run even when the audit log cannot be written")
        parser.add_argument("--accept-escaped", action="append", metavar="COMMAND",
                            help="with --yes, run a command that holds control characters: its escaped form, "
                                 "exactly as the plan shows it")
    return parser


def completion_parser() -> argparse.ArgumentParser:
    """The whole CLI as one parser with subcommands, for shtab: `pulse <TAB>` offers the commands."""
    parser = argparse.ArgumentParser(prog="pulse")
    parser.add_argument("--version", action="store_true", help="print the version")
    add_console_flags(parser)
    commands = parser.add_subparsers(metavar="COMMAND")
    for name, line in COMMANDS.items():
        commands.add_parser(name, help=line, parents=[build_command_parser(name)], add_help=False)
    return parser


class UsageError(Exception):
    """The command line names nothing Pulse can use; the message is one line."""


def named_runs() -> list[str]:
    folder = paths.runs_dir()
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def resolve_config(name: str, command: str) -> str:
    """`name` as given when it is a file; else ~/.config/pulse/runs/NAME.toml; else a UsageError that
    names the commands and named runs and suggests the closest."""
    if Path(name).expanduser().exists() or os.sep in name or name.endswith(".toml"):
        return name  # a path: the config loader reports a missing one
    named = paths.runs_dir() / f"{name}.toml"
    if named.is_file():
        return str(named)
    runs = named_runs()
    known = f"named runs in {paths.runs_dir()}: {', '.join(runs) if runs else 'none'}"
    if command == "console":
        problem = f"{name!r} is not a command, a config file or a named run (commands: {', '.join(COMMANDS)}; {known})"
        candidates = [*COMMANDS, *runs]
    else:
        problem = f"{name!r} is not a config file or a named run ({known})"
        candidates = runs
    close = difflib.get_close_matches(name, candidates, n=1)
    raise UsageError(problem + (f"; did you mean {close[0]}?" if close else ""))


def parse(argv: list[str]) -> tuple[str, argparse.Namespace]:
    """The command ("console" when none is named) and its arguments, named runs resolved."""
    if argv and argv[0] in COMMANDS:
        command, args = argv[0], build_command_parser(argv[0]).parse_args(argv[1:])
    else:
        command, args = "console", build_parser().parse_args(argv)
    if getattr(args, "config", None) is not None:
        from console.config import value_problem  # here, not at the top: `pulse demo` names no config

        # An empty name (`pulse restart "$RUN"`, unset) is not "no config": that would be this machine.
        if problem := value_problem(args.config, "text"):
            raise UsageError(f"{'--config' if command == 'classify' else 'config'}: {problem}")
        args.config = resolve_config(args.config, command)
    return command, args


def main(argv: list[str] | None = None) -> int:
    try:
        command, args = parse(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(f"pulse: {exc}", file=sys.stderr)
        return EXIT_USAGE
    gc_was_on = gc.isenabled()
    if command in CONSOLE_COMMANDS:
        gc.disable()
    try:
        status = _dispatch(command, args)
        sys.stdout.flush()  # a reader gone by now shows here, not in the interpreter's last flush
        return status
    except KeyboardInterrupt:  # Ctrl+C: one line, and the shell's 128 + SIGINT
        print(f"{'pulse' if command == 'console' else f'pulse {command}'}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`pulse check … | head`): stop quietly, as a Unix filter does. Standard output
        # now points at /dev/null so that the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # as if killed by SIGPIPE
    except Exception as exc:  # noqa: BLE001 - the last stop: a crash is saved, not lost
        return report_crash(exc)
    finally:
        if gc_was_on:
            gc.enable()


def _dispatch(command: str, args: argparse.Namespace) -> int:
    if command == "classify":
        from console.commands.classify import run_classify

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
    return _on_target(command, config, args)


def _on_target(command: str, config: Config, args: argparse.Namespace) -> int:
    """Run `command` on the machines the config names: its fleet version for a fleet, never this machine instead."""
    from console.targets import fleet_refusal, fleet_size

    if refusal := fleet_refusal(command, config, getattr(args, "pid", None)):
        print(refusal, file=sys.stderr)
        return 2
    if fleet_size(config.target) is not None:
        if command == "check":
            from console.commands.fleet_check import run_fleet_check

            return run_fleet_check(config, args)
        if command == "watch":
            from console.commands.fleet_watch import run_fleet_watch

            return run_fleet_watch(config, args)
        if command in ("dump", "restart", "warmup"):
            from console.commands import fleet_actions

            return getattr(fleet_actions, command)(config, args)
        if command in ("journal", "report"):  # a Slurm job's journal (fleet_refusal refuses a host list's)
            from console.commands import journal

            return getattr(journal, f"run_{command}")(config, args)
        from console.ui.screens.fleet_screen import run_fleet_console

        return run_fleet_console(config, args)
    if command == "check":
        from console.commands.check import run_check

        return run_check(config, args)
    if command in ("watch", "journal", "report"):
        from console.commands import journal

        return getattr(journal, f"run_{command}")(config, args)
    if command in ("dump", "restart", "warmup"):
        from console.commands import actions

        return getattr(actions, command)(config, args)
    from console.ui.start import run_console

    return run_console(config, args)


if __name__ == "__main__":
    sys.exit(main())
