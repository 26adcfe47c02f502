"""Every command of README.md and docs/*.md, as written, is checked; a documented command that
does not parse fails with its page and line.

The commands are taken from the pages' fenced `sh` blocks (continuation lines joined, the
trailing comment apart), and from `$ ` lines of plain blocks with the output below them. Each
page runs in order in a mirror of the repository (a temp dir of links to its folders, with its
own `build/` and `p4/build/`), so that what a command writes lands there and later commands
of the page find it:

- every `inaemu` command (`.venv/bin/inaemu`, `inaemu`, `python -m inaemu....`) runs in
  parse-only mode (`INAEMU_PARSE_ONLY=1`: it checks its arguments and the files they name and
  says so, without doing anything), in this process, unless it runs for real: the quick ones
  (`inaemu topo`, `inaemu schedule`, `inaemu bmv2 --print`, `inaemu train --example`,
  `make -C p4` where p4c is found), the transcripts (their output must show), and the block
  that starts a softswitch in the background (README's controller block: the switch, the
  pipeline, a job, a run id and the counters, for real, on a free port instead of 9559);
- `inaemu train` also hands the script's own arguments (those after the script) to the
  script, outside the launcher: its argparse must take them (it then stops, telling to use
  the launcher);
- a synopsis (a line with `[`, `|` or `...`) must name only options that the program's
  `--help` shows;
- other programs: `make` targets exist (`make -n`; `make mininet ARGS=...` also parses its
  ARGS as `inaemu mininet`'s), bench scripts' and test scripts' `--help` runs and shows every
  option the line gives, a `simple_switch_grpc` line is one of those `inaemu bmv2 --print`
  printed above it, programs are installed or made by a line above; the p4runtime-shell
  lines run in tests/test_docs_p4runtime.py (slow).

Root: a command that needs root is marked `# as root` and none that does not; no command is
written with `sudo` (README.md says so once). The option tables of `inaemu demo` and `inaemu
train` in docs/user-guide.md state the parsers' defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from inaemu.common.args import PARSE_ONLY_ENV
from inaemu.p4.tools import P4C, find_tool

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ROOT_MARK = "# as root"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
PARSE_ONLY_LINE = f"arguments checked, nothing run ({PARSE_ONLY_ENV}=1)"
DOC_PORT = "127.0.0.1:9559"  # the README's controller block: a free port in the test


# ---------------------------------------------------------------------- extraction


@dataclass(frozen=True)
class Command:
    page: str  # README.md, docs/user-guide.md
    line: int  # the page's line of the command's first line
    text: str  # as written: continuation lines joined, no comment
    comment: str  # its trailing comment, "" if none
    block: int  # which block of the page
    background: bool = False  # ends with &
    output: tuple[str, ...] = ()  # a transcript's output lines (`$ ` lines only)
    transcript: bool = False

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def as_root(self) -> bool:
        return self.comment.startswith(ROOT_MARK)


def split_comment(line: str) -> tuple[str, str]:
    """(command, comment) of one shell line: the comment starts at a `#` outside quotes
    that begins a word."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i:].strip()
    return line.rstrip(), ""


def page_commands(page: Path) -> list[Command]:
    text = page.read_text()
    name = page.relative_to(REPO).as_posix()
    found: list[Command] = []
    for block, m in enumerate(FENCE.finditer(text)):
        first = text[: m.start(2)].count("\n") + 1
        lines = m.group(2).splitlines()
        if m.group(1) == "sh":
            i = 0
            while i < len(lines):
                start, joined = i, lines[i]
                while joined.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    joined = joined.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
                command, comment = split_comment(joined.strip())
                if not command or command == "...":
                    continue
                previous = found[-1] if found and found[-1].block == block else None
                if joined[:1].isspace() and previous is not None:  # a synopsis's next line
                    found[-1] = Command(
                        name,
                        previous.line,
                        f"{previous.text} {command}",
                        previous.comment or comment,
                        block,
                    )
                    continue
                background = command.endswith("&")
                command = command.rstrip("&").rstrip()
                found.append(Command(name, first + start, command, comment, block, background))
        elif m.group(1) == "":
            for i, line in enumerate(lines):
                if not line.startswith("$ "):
                    continue
                out = []
                for after in lines[i + 1 :]:
                    if after.startswith("$ "):
                        break
                    out.append(after)
                command, comment = split_comment(line[2:])
                found.append(
                    Command(
                        name, first + i, command, comment, block, output=tuple(out), transcript=True
                    )
                )
    return found


COMMANDS = [c for page in PAGES for c in page_commands(page)]


# ---------------------------------------------------------------------- what a command is

INAEMU_MODULES = {
    "inaemu.cli": "inaemu",
    "inaemu.softswitch": "inaemu softswitch",
    "inaemu.softswitch.p4runtime.server": "p4runtime server",
    "inaemu.mininet": "inaemu mininet",
    "inaemu.hostlib.collective.worker": "collective worker",
}
PYTHONS = {".venv/bin/python", "python", "python3"}


def inaemu_call(argv: list[str]) -> tuple[str, list[str]] | None:
    """(module, its arguments) for an inaemu command line, None for another program's."""
    if argv[0] in (".venv/bin/inaemu", "inaemu"):
        return "inaemu.cli", argv[1:]
    if argv[0] in PYTHONS and len(argv) > 2 and argv[1] == "-m" and argv[2] in INAEMU_MODULES:
        return argv[2], argv[3:]
    return None


def is_synopsis(text: str) -> bool:
    return bool(re.search(r"\[|\||\.\.\.", text))


def needs_root(argv: list[str]) -> bool:
    """Whether the command needs root: Mininet, bmv2's interfaces, AF_PACKET ports, the
    Mininet benchmarks."""
    words = set(argv)
    if "--help" in words:
        return False
    call = inaemu_call(argv)
    if call is not None:
        module, args = call
        if module == "inaemu.cli" and args[:1] == ["softswitch"]:
            module, args = "inaemu.softswitch", args[1:]
        if module == "inaemu.mininet" or args[:1] == ["mininet"]:
            return True
        if args[:1] == ["train"]:
            return "--mininet" in args
        if args[:1] == ["bmv2"]:
            return "--print" not in args
        if module == "inaemu.softswitch":
            return "--iface" in args
        return False
    if argv[0] == "make":
        return any(t in words for t in ("mininet", "mininet-deps"))
    script = next((Path(a).name for a in argv[1:] if a.endswith(".py")), "")
    if script in ("bench_collectives.py", "bench_e2e.py", "bench_mininet.py"):
        return True
    return script == "papers.py" and "--from-json" not in words


# ---------------------------------------------------------------------- running them


@dataclass
class Outcome:
    ok: bool = True
    message: str = ""
    skipped: str = ""


@dataclass
class Page:
    """What the commands of one page share while they run in order."""

    mirror: Path
    env: dict[str, str] = field(default_factory=dict)  # shell variables (W=$(...))
    printed: list[list[str]] = field(default_factory=list)  # `inaemu bmv2 --print` lines
    unavailable: dict[str, str] = field(default_factory=dict)  # path -> why it was not made
    made: list[str] = field(default_factory=list)  # programs made by lines above


class Refused(AssertionError):
    """The documented command failed its check; the message says how."""


def make_mirror(where: Path) -> Path:
    """A temp dir of links to the repository's folders and files, with its own build/ and a
    p4/ whose build output is its own."""
    skip = {".git", "build", ".venv", ".venv-p4rt-shell", ".mypy_cache", ".ruff_cache"}
    skip |= {".pytest_cache", ".hypothesis", "inaemu.egg-info"}
    for entry in REPO.iterdir():
        if entry.name in skip or entry.name == "p4":
            continue
        (where / entry.name).symlink_to(entry)
    (where / "p4").mkdir()
    for entry in (REPO / "p4").iterdir():
        if entry.name not in ("build", "logs", "pcaps"):
            (where / "p4" / entry.name).symlink_to(entry)
    return where


def entry_point(module: str) -> Callable[[list[str]], int | None]:
    if module == "inaemu.cli":
        from inaemu.cli.main import main as cli
    elif module == "inaemu.softswitch":
        from inaemu.softswitch.__main__ import main as cli
    elif module == "inaemu.softswitch.p4runtime.server":
        from inaemu.softswitch.p4runtime.server import main as cli
    elif module == "inaemu.mininet":
        from inaemu.mininet.run import main as cli
    else:
        from inaemu.hostlib.collective.worker import main as cli
    return cli


@contextlib.contextmanager
def environment(cwd: Path, parse_only: bool) -> Iterator[None]:
    old_cwd, old = Path.cwd(), os.environ.get(PARSE_ONLY_ENV)
    os.chdir(cwd)
    if parse_only:
        os.environ[PARSE_ONLY_ENV] = "1"
    else:
        os.environ.pop(PARSE_ONLY_ENV, None)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        if old is None:
            os.environ.pop(PARSE_ONLY_ENV, None)
        else:
            os.environ[PARSE_ONLY_ENV] = old


def call(module: str, args: list[str], cwd: Path, *, parse_only: bool) -> tuple[int, str]:
    """Run an inaemu entry point in this process: (exit status, stdout and stderr)."""
    out = io.StringIO()
    with (
        environment(cwd, parse_only),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(out),
    ):
        try:
            status = entry_point(module)(args)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return int(status or 0), out.getvalue()


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INAEMU_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def expand(text: str, page: Page) -> str:
    text = text.replace("$PWD", str(page.mirror))
    for name, value in page.env.items():
        text = text.replace(f"${name}", value)
    return text


def options_of(argv: list[str]) -> list[str]:
    """The options a command line (or a synopsis: `[--size BYTES]`) names."""
    return re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", " ".join(argv))


def shows_options(help_text: str, argv: list[str], what: str) -> None:
    missing = [
        o for o in options_of(argv) if not re.search(rf"(?<![\w-]){re.escape(o)}\b", help_text)
    ]
    if missing:
        raise Refused(f"{what} has no option {', '.join(missing)} (its --help)")


def check_inaemu(c: Command, argv: list[str], page: Page) -> str:
    module, args = inaemu_call(argv) or ("", [])
    if is_synopsis(c.text):
        head = [a for a in args if not a.startswith("-") and not re.search(r"[\[|.]", a)]
        status, out = call(
            module,
            [*head[:1], "--help"] if module == "inaemu.cli" else ["--help"],
            page.mirror,
            parse_only=False,
        )
        if status != 0:
            raise Refused(f"--help exited {status}: {out[-300:]}")
        shows_options(out, args, " ".join([INAEMU_MODULES[module], *head[:1]]))
        return "a synopsis: every option it shows is in --help"
    sub = args[0] if module == "inaemu.cli" and args else ""
    real = (
        c.transcript
        or sub in ("topo", "schedule")
        or (sub == "bmv2" and "--print" in args)
        or (sub == "train" and "--example" in args)
    )
    if sub == "topo" and args[1:2] == ["show"]:
        try:
            import matplotlib  # noqa: F401
            import networkx  # noqa: F401
        except ImportError:
            real = False  # parse-only: the picture needs the [draw] extra
    status, out = call(module, args, page.mirror, parse_only=not real)
    if c.transcript:
        missing = [line for line in c.output if line.strip() not in ("", "...") and line not in out]
        if missing:
            raise Refused(f"its output lacks {missing[0]!r}; it printed: {out[-500:]}")
        return "run: its output shows"
    if status != 0:
        raise Refused(f"exit status {status}: {out.strip()[-500:]}")
    if not real:
        if PARSE_ONLY_LINE not in out:
            raise Refused(f"did not stop in parse-only mode: {out[-300:]}")
        if sub == "train" and "--example" not in args:
            check_script_arguments(args[1:], page)
        return "parsed"
    if sub == "bmv2":
        lines = [line for line in out.splitlines() if not line.startswith(("#", "mkdir "))]
        page.printed += [shlex.split(line) for line in lines if line.strip()]
    if sub == "topo" and "-o" in args:
        page.unavailable.pop(args[args.index("-o") + 1], None)  # there now
    return "run"


_SCRIPT_CHECKED: dict[tuple[str, ...], str] = {}


def check_script_arguments(args: list[str], page: Page) -> None:
    """The script of an `inaemu train` line takes the arguments after it: run outside the
    launcher, its argparse must pass them (it then stops: no launcher)."""
    from inaemu.cli.train.launcher import build_parser

    parsed = build_parser().parse_args(args)
    script_args = list(parsed.args)
    if script_args[:1] == ["--"]:  # as the launcher reads them
        script_args = script_args[1:]
    key = (str(parsed.script), *script_args)
    if key not in _SCRIPT_CHECKED:
        if not _torch():
            raise pytest.skip.Exception(
                "PyTorch is not installed: the script's arguments unchecked"
            )
        proc = subprocess.run(
            [sys.executable, str(parsed.script), *script_args],
            cwd=page.mirror,
            capture_output=True,
            text=True,
            timeout=300,
            env=subprocess_env(),
        )
        refused = proc.returncode == 2
        told = "inaemu train SCRIPT" in proc.stderr
        _SCRIPT_CHECKED[key] = (
            f"{parsed.script} refuses {' '.join(script_args)!r}: {proc.stderr.strip()[-300:]}"
            if refused or not told
            else "ok"
        )
    if _SCRIPT_CHECKED[key] != "ok":
        raise Refused(_SCRIPT_CHECKED[key])


def _torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


_HELP: dict[str, str] = {}


def script_help(script: str, page: Page) -> str:
    if script not in _HELP:
        proc = subprocess.run(
            [sys.executable, script, "--help"],
            cwd=page.mirror,
            capture_output=True,
            text=True,
            timeout=120,
            env=subprocess_env(),
        )
        if proc.returncode != 0 or "usage" not in proc.stdout:
            raise Refused(f"{script} --help failed: {proc.stderr.strip()[-300:]}")
        _HELP[script] = proc.stdout
    return _HELP[script]


def check_other(c: Command, argv: list[str], page: Page) -> str:
    program = argv[0]
    if "=" in program and program.split("=", 1)[0].isidentifier():  # W=$(mktemp -d)
        name, _, value = c.text.partition("=")
        inner = re.fullmatch(r"\$\((.*)\)", value.strip())
        if inner is None:
            raise Refused("an assignment this test does not know")
        proc = subprocess.run(
            inner.group(1),
            shell=True,
            capture_output=True,
            text=True,
            env={**subprocess_env(), "TMPDIR": str(page.mirror.parent)},
            check=True,
        )
        page.env[name] = proc.stdout.strip()
        return "run"
    if program == "make":
        return check_make(argv, page)
    if program in PYTHONS and len(argv) > 1 and argv[1].endswith(".py"):
        if not (page.mirror / argv[1]).is_file():
            raise Refused(f"no such script: {argv[1]}")
        shows_options(script_help(argv[1], page), argv[2:], argv[1])
        return "its --help shows every option given"
    if Path(program).name == "simple_switch_grpc":
        mine = [Path(argv[0]).name, *argv[1:]]
        if not any([Path(p[0]).name, *p[1:]] == mine for p in page.printed):
            raise Refused(
                "not one of the lines `inaemu bmv2 --print` printed above: "
                + " | ".join(shlex.join(p) for p in page.printed)
            )
        return "what inaemu bmv2 --print prints"
    if program.startswith(".venv-p4rt-shell/bin/"):
        made = any(".venv-p4rt-shell" in m for m in page.made)
        if not made:
            raise Refused(f"{program}: no line above makes .venv-p4rt-shell")
        if "-m" in argv and "p4runtime_sh" in argv:
            from tests.test_docs_p4runtime import DOC, command_line

            if c.page == "docs/p4runtime.md" and command_line(DOC, "-m p4runtime_sh") != argv:
                raise Refused("not the line tests/test_docs_p4runtime.py runs")
            return "run by tests/test_docs_p4runtime.py (slow)"
        script = next((a for a in argv[1:] if a.endswith(".py")), None)
        if script is not None:
            shows_options(script_help(script, page), argv[argv.index(script) + 1 :], script)
            return "its --help shows every option given; run by tests/test_docs_p4runtime.py"
        return f"{program}: made by a line above"
    if shutil.which(program) is None:
        raise Refused(f"{program}: not installed here")
    if argv[1:3] == ["-m", "venv"]:
        page.made.append(argv[3])
    return f"{program} is installed"


def check_make(argv: list[str], page: Page) -> str:
    args = argv[1:]
    if args == ["-C", "p4"]:
        p4c = find_tool(P4C)
        if p4c is None:
            page.unavailable["p4/build/"] = f"make -C p4: {P4C} is not installed"
            raise pytest.skip.Exception(page.unavailable["p4/build/"])
        env = {**subprocess_env(), "PATH": f"{Path(p4c).parent}{os.pathsep}{os.environ['PATH']}"}
        proc = subprocess.run(
            ["make", "-C", "p4"], cwd=page.mirror, capture_output=True, text=True, env=env
        )
        if proc.returncode != 0:
            raise Refused(f"make -C p4 failed: {proc.stderr.strip()[-500:]}")
        return "run"
    proc = subprocess.run(
        ["make", "-n", *args], cwd=page.mirror, capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:
        raise Refused(f"make -n {' '.join(args)}: {proc.stderr.strip()[-300:]}")
    given = [a.split("=", 1)[1] for a in args if a.startswith("ARGS=")]
    if "mininet" in args and given:
        status, out = call("inaemu.mininet", shlex.split(given[0]), page.mirror, parse_only=True)
        if status != 0 or PARSE_ONLY_LINE not in out:
            raise Refused(f"ARGS are not inaemu mininet's: {out.strip()[-300:]}")
    return "the target exists (make -n)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_background_block(commands: list[Command], page: Page, outcomes: dict[str, Outcome]) -> None:
    """A block that starts a switch in the background (the README's controller block): the
    switch, then every other line for real, on a free port instead of DOC_PORT."""
    address = f"127.0.0.1:{free_port()}"
    [starter] = [c for c in commands if c.background]
    argv = shlex.split(starter.text.replace(DOC_PORT, address))
    call_ = inaemu_call(argv)
    assert call_ is not None, starter.id
    module, args = call_
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=page.mirror,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        outcomes[starter.id] = (
            Outcome(message="run in the background")
            if line.startswith("READY")
            else Outcome(False, f"no READY line: {line}{proc.stdout.read()[-500:]}")
        )
        for c in commands:
            if c is starter:
                continue
            if not outcomes[starter.id].ok:
                outcomes[c.id] = Outcome(skipped=f"the switch of {starter.id} did not start")
                continue
            module, args = inaemu_call(shlex.split(c.text.replace(DOC_PORT, address))) or ("", [])
            status, out = call(module, args, page.mirror, parse_only=False)
            outcomes[c.id] = (
                Outcome(message="run")
                if status == 0
                else Outcome(False, f"exit status {status}: {out.strip()[-500:]}")
            )
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run_page(page_name: str, mirror: Path) -> dict[str, Outcome]:
    page = Page(make_mirror(mirror))  # no build/: a fresh clone has none
    outcomes: dict[str, Outcome] = {}
    commands = [c for c in COMMANDS if c.page == page_name]
    blocks: dict[int, list[Command]] = {}
    for c in commands:
        blocks.setdefault(c.block, []).append(c)
    for block in blocks.values():
        if any(c.background for c in block):
            run_background_block(block, page, outcomes)
            continue
        for c in block:
            outcomes[c.id] = run_one(c, page)
    STRAY[page_name] = stray_files(page.mirror)
    return outcomes


STRAY: dict[str, list[str]] = {}  # page -> what its commands wrote outside build/


def stray_files(mirror: Path) -> list[str]:
    """What the commands wrote into the mirror's root (or p4/) instead of build/: every entry
    that is no link to the repository, but build/ (and p4/'s build output, ignored by git)."""
    ours = {"build", "p4"}
    stray = [e.name for e in mirror.iterdir() if not e.is_symlink() and e.name not in ours]
    made_by_make = {"build", "logs", "pcaps"}  # p4/Makefile's, in .gitignore
    stray += [
        f"p4/{e.name}"
        for e in (mirror / "p4").iterdir()
        if not e.is_symlink() and e.name not in made_by_make
    ]
    return sorted(stray)


def run_one(c: Command, page: Page) -> Outcome:
    text = expand(c.text, page)
    waiting = [why for path, why in page.unavailable.items() if path in text]
    if waiting:
        for token in shlex.split(text):  # what it would write is not there either
            if token.startswith("build/"):
                page.unavailable[token] = waiting[0]
        return Outcome(skipped=waiting[0])
    argv = shlex.split(text)
    try:
        if inaemu_call(argv) is not None:
            return Outcome(message=check_inaemu(c, argv, page))
        return Outcome(message=check_other(c, argv, page))
    except Refused as exc:
        return Outcome(False, str(exc))
    except pytest.skip.Exception as exc:
        return Outcome(skipped=str(exc))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    found: dict[str, Outcome] = {}
    for page in PAGES:
        name = page.relative_to(REPO).as_posix()
        found |= run_page(name, tmp_path_factory.mktemp("mirror"))
    return found


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_every_documented_command(command: Command, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[command.id]
    if outcome.skipped:
        pytest.skip(f"{command.id}: {outcome.skipped}")
    assert outcome.ok, f"{command.id}: `{command.text}`: {outcome.message}"


def test_documented_commands_write_under_build(outcomes: dict[str, Outcome]) -> None:
    """Files that documented commands write (topologies, job state, bmv2's run dirs, the
    example) land under build/, ignored by git, never in the repository's root."""
    assert set(STRAY) == {p.relative_to(REPO).as_posix() for p in PAGES}
    wrote = {page: files for page, files in STRAY.items() if files}
    assert not wrote, f"written outside build/: {wrote}"


# ---------------------------------------------------------------------- conventions


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_root_is_marked_where_needed(command: Command) -> None:
    argv = shlex.split(command.text)
    assert argv[0] != "sudo", f"{command.id}: written with sudo; mark it `{ROOT_MARK}` instead"
    needed = needs_root(argv)
    assert command.as_root == needed, (
        f"{command.id}: `{command.text}` needs root: mark it `{ROOT_MARK}`"
        if needed
        else f"{command.id}: `{command.text}` needs no root: drop `{ROOT_MARK}`"
    )


def test_no_page_writes_a_command_with_sudo() -> None:
    found = [
        f"{page.relative_to(REPO)}:{n}: {line.strip()}"
        for page in PAGES
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if re.search(r"`sudo \S|^\s*sudo \S", line)
    ]
    assert not found, "commands written with sudo (mark them `# as root`):\n" + "\n".join(found)


def test_the_readme_says_what_as_root_means() -> None:
    text = " ".join((REPO / "README.md").read_text().split())
    assert f"a command marked `{ROOT_MARK}` needs root" in text
    assert "or put `sudo` in front of it" in text


def test_the_readme_trains_with_launcher_options_before_the_script() -> None:
    """The README's training lines, as written: the launcher's options before the script
    (they run above in parse-only mode, and the script takes what follows it)."""
    from inaemu.cli.train.launcher import build_parser

    lines = [
        c
        for c in COMMANDS
        if c.page == "README.md" and (inaemu_call(c.argv) or ("", [""]))[1][:1] == ["train"]
    ]
    assert len(lines) >= 3
    launcher_options = set(build_parser()._option_string_actions)
    for c in lines:
        parsed = build_parser().parse_args(c.argv[2:])
        late = [a for a in parsed.args if a.split("=", 1)[0] in launcher_options]
        assert not late, f"{c.id}: {late} after the script go to the script, not the launcher"


# ---------------------------------------------------------------------- option tables


def table_defaults(page: Path, section: str) -> dict[str, str]:
    """`| --option ... | default | ...` rows of the table in `section` (a heading's text)."""
    text = page.read_text().split(section, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\| `(--[\w-]+)[^`]*` \| ([^|]*) \|", text, re.M):
        rows[m.group(1)] = m.group(2).strip()
    return rows


def parser_defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    return {
        option: action.default
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--")
    }


def same(documented: str, default: Any) -> bool:
    if isinstance(default, bool) or default is None:
        return True  # flags and computed defaults: said in words
    if isinstance(default, int | float):
        try:
            return float(documented.replace(",", "")) == float(default)
        except ValueError:
            return False
    return documented.strip("`") == str(default)


@pytest.mark.parametrize("command", ["demo", "train"])
def test_the_user_guide_states_the_defaults(command: str) -> None:
    from inaemu.cli.main import build_parser as cli_parser
    from inaemu.cli.train.launcher import build_parser as train_parser

    if command == "demo":
        [sub] = [a for a in cli_parser()._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices["demo"]
        section = "## `inaemu demo`"
    else:
        parser, section = train_parser(), "## `inaemu train`"
    rows = table_defaults(REPO / "docs" / "user-guide.md", section)
    defaults = parser_defaults(parser)
    assert rows, section
    wrong = [
        f"{option}: the guide says {documented!r}, --help {defaults[option]!r}"
        for option, documented in rows.items()
        if option in defaults and documented and not same(documented, defaults[option])
    ]
    assert not wrong, "\n".join(wrong)


def test_the_arbitration_figures_are_the_code_s() -> None:
    """docs/p4runtime.md's frozen primary: the keepalive and the commands' wait it quotes."""
    import inspect

    from inaemu.controller.p4rt import SAME_ID_WAIT, Controller
    from inaemu.softswitch.p4runtime.server import P4RuntimeServer

    text = " ".join((REPO / "docs" / "p4runtime.md").read_text().split())
    section = text.split("### A frozen primary", 1)[1].split("###", 1)[0]
    params = inspect.signature(P4RuntimeServer).parameters
    keepalive, timeout = params["keepalive_time"].default, params["keepalive_timeout"].default
    election = inspect.signature(Controller).parameters["election_id"].default
    assert f"`keepalive_time` {keepalive:g} s, then `keepalive_timeout` {timeout:g} s" in section
    assert f"{timeout:g} to {keepalive + timeout:g} s after it froze" in section
    assert f"waits {SAME_ID_WAIT:g} s for it to end (`SAME_ID_WAIT`" in section
    assert f"election id {election}" in section
