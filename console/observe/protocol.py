"""The agents' protocol, console side: the hello line each agent sends first, checked strictly.

Both agents (agent.py, follow_agent.py) run on the target under whatever Python is there. Each
announces itself before anything else with one JSON line:

    {"ev": "hello", "program": "pulse-agent", "protocol": 1, "python": "3.8.10", "pynvml": "12.535.161"}

(`pynvml`: the nvidia-ml-py version the agent loaded, or null). The console refuses an agent
that speaks another protocol version, in one line, instead of misreading its output.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.observe.textsafe import sanitize


class ProtocolError(ValueError):
    """An agent's output that does not follow the protocol: one line saying what is wrong."""


@dataclass(frozen=True, slots=True)
class Hello:
    program: str
    protocol: int
    python: str
    pynvml: str | None


def _text(value: object) -> str:
    return sanitize(str(value), 80)[0]


def field(obj: dict, key: str, what: str, error: type[ProtocolError] = ProtocolError) -> object:
    """`obj[key]`; `error` naming it when the agent left it out (a renamed field is not a silent zero)."""
    try:
        return obj[key]
    except KeyError:
        raise error(f"{what} has no {key!r}") from None


def check_hello(obj: object, program: str, protocol: int) -> Hello:
    """The hello `obj` (a decoded first line) when it is `program`'s at `protocol`; ProtocolError otherwise."""
    if not isinstance(obj, dict) or obj.get("ev") != "hello":
        raise ProtocolError(f"{program} did not start with its hello line (got {_text(obj)[:60]!r})")
    name = _text(field(obj, "program", "the hello"))
    spoken = field(obj, "protocol", "the hello")
    python = _text(field(obj, "python", "the hello"))
    pynvml = None if (version := field(obj, "pynvml", "the hello")) is None else _text(version)
    if name != program:
        raise ProtocolError(f"expected {program}, but {name!r} answered")
    if spoken != protocol:
        raise ProtocolError(
            f"{program} (Python {python}) speaks protocol {_text(spoken)}, this console {protocol}: "
            "the console and the agent it sent are from different Pulse versions"
        )
    return Hello(program=name, protocol=protocol, python=python, pynvml=pynvml)

