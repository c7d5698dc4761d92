"""The judge's child processes: one command line in, one framed message out, every wait bounded.

``Child`` starts a process in its own session with a pipe of its own (messages framed by a
random nonce, so the process's prints are never parsed) and keeps the head and tail of its
output. ``Session`` drives the sandbox and the referee: each wait has the command's deadline
and the judgement's, heartbeats the caller and honours its cancel event.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import threading
import time
from typing import Any, Callable

from kernels.judge import protocol

HEAD_BYTES, TAIL_BYTES = 1024, 3072  # what a report keeps of the candidate's stdout and stderr


class Capture:
    """Keeps the head and the tail of a stream, whatever its length."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        del self.tail[:-TAIL_BYTES]

    def text(self) -> str:
        body = bytes(self.head)
        if self.total > len(self.head) + len(self.tail):
            body += f"\n[... {self.total - len(self.head) - len(self.tail)} bytes of output dropped ...]\n".encode()
        return (body + bytes(self.tail)).decode(errors="replace")


# Referee commands that read what the candidate's process wrote: a referee failing on one of these
# may have been made to fail by the candidate (a hostile output file), so that is the candidate's
# verdict. Failing on anything else (references, the baseline) is the judge's own failure.
CANDIDATE_DATA_OPS = ("compare",)


class RefereeFailure(Exception):
    """The trusted referee failed on its own work (its references or the baseline: out of GPU
    memory, a baseline that cannot run): no verdict on the candidate. Callers retry elsewhere
    or later; a Temporal activity raises it, and Temporal retries."""


class Stop(Exception):
    """Ends a judgement with a status and a message."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Child:
    """One child process: a command line in on stdin, one framed message out per command."""

    def __init__(self, who: str, argv: list[str], config: dict[str, Any], env: dict[str, str], cwd: str,
                 max_payload: int = 0, preexec=None):
        self.who = who
        # The most bytes one message may carry after it (the largest output the plan asks for):
        # checked before a byte of it is read.
        self.max_payload = max_payload
        read_fd, write_fd = os.pipe()
        self.nonce = secrets.token_hex(16)
        self.messages: queue.Queue = queue.Queue()
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=env,
            pass_fds=(write_fd,), start_new_session=True, preexec_fn=preexec,
        )
        os.close(write_fd)
        self.capture = Capture()
        self.threads = [
            threading.Thread(target=self._drain, daemon=True),
            threading.Thread(target=self._read_reports, args=(read_fd,), daemon=True),
        ]
        # Commands sent and messages received after the first line: equal when the process owes no answer.
        self.sent = self.received = 0
        self.last_op = ""  # the op of the last command sent, for telling whose failure an error is
        for thread in self.threads:
            thread.start()
        self._write(dict(config, report_fd=write_fd, nonce=self.nonce))

    def send(self, command: dict[str, Any]) -> None:
        self.sent += 1
        self.last_op = str(command.get("op", ""))
        self._write(command)

    def pending(self) -> int:
        """Commands not answered yet (each command gets one message)."""
        return self.sent - self.received

    def _write(self, command: dict[str, Any]) -> None:
        try:
            self.process.stdin.write((json.dumps(command) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def _drain(self) -> None:
        stream = self.process.stdout
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                return
            self.capture.add(chunk)

    def _read_reports(self, fd: int) -> None:
        buffer = b""
        owed = 0  # payload bytes still to read for ``pending``
        pending: dict[str, Any] | None = None
        payload = bytearray()
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(1 << 20)
                if not chunk:
                    break
                buffer += chunk
                while True:
                    if pending is not None:
                        take = buffer[:owed]
                        payload += take
                        buffer = buffer[len(take):]
                        owed -= len(take)
                        if owed:
                            break
                        pending["payload"] = bytes(payload)
                        self.received += 1
                        self.messages.put(pending)
                        pending, payload = None, bytearray()
                    if b"\n" not in buffer:
                        break
                    line, buffer = buffer.split(b"\n", 1)
                    message = protocol.parse(line, self.nonce)
                    if message is None:
                        continue
                    size = message.get("nbytes")
                    if size is None:
                        self.received += 1
                        self.messages.put(message)
                        continue
                    if not isinstance(size, int) or size < 0 or size > self.max_payload:
                        # Refused before reading: the process is told nothing and heard no more.
                        self.received += 1
                        self.messages.put({"kind": "reject", "status": "crashed",
                                           "message": f"the {self.who}'s process announced {size!r} bytes of output; "
                                           f"the plan's largest output is {self.max_payload} bytes: protocol broken"})
                        self.messages.put(None)
                        return
                    pending, owed = message, size
                if pending is None and len(buffer) > protocol.MAX_LINE_BYTES:
                    buffer = b""
        self.messages.put(None)

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for thread in self.threads:
            thread.join(timeout=2)

    def exit_description(self) -> str:
        try:
            code = self.process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            return "stopped talking but is still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (out of memory?)" if -code == signal.SIGKILL else ""
            return f"was killed by {name}{hint}"
        if code >= 128 and code - 128 in signal.Signals._value2member_map_:
            # bubblewrap reports its child's death by signal N as exit status 128 + N
            name = signal.Signals(code - 128).name
            hint = " (out of memory?)" if code - 128 == signal.SIGKILL else ""
            return f"was killed by {name}{hint}"
        return f"exited with code {code} without a report"


class Session:
    """Drives the two children through the plan; every wait has a deadline."""

    def __init__(self, sandbox: Child, referee: Child, deadline: float, timeout_s: float,
                 cancel: threading.Event | None, heartbeat: Callable[[str], None] | None):
        self.sandbox, self.referee = sandbox, referee
        self.deadline, self.timeout_s = deadline, timeout_s
        self.cancel, self.heartbeat = cancel, heartbeat
        self.phase = "starting"
        self.beat_at = 0.0
        # Wall seconds per kind of phase ("verify", "timing", ...), for the report's ``phases``.
        self.phases: dict[str, float] = {}
        self._kind, self._kind_started = "", time.monotonic()

    def enter(self, kind: str, label: str) -> None:
        """Start phase ``kind`` (a key of the report's ``phases``), described to people as ``label``
        in heartbeats and timeout messages; the previous phase's time is added to its kind."""
        self.close_phase()
        self._kind, self._kind_started = kind, time.monotonic()
        self.phase = label
        if self.heartbeat is not None:
            self.heartbeat(label)
            self.beat_at = self._kind_started + 2.0

    def close_phase(self) -> None:
        now = time.monotonic()
        if self._kind:
            self.phases[self._kind] = round(self.phases.get(self._kind, 0.0) + now - self._kind_started, 3)
        self._kind, self._kind_started = "", now

    def add_phase(self, kind: str, seconds: float) -> None:
        """``seconds`` just spent inside the current phase on something with a name of its own
        (waiting for the GPU lease): moved from the current phase to ``kind``, so that the
        phases still add up to the judgement's wall time."""
        if seconds > 0:
            self.phases[kind] = round(self.phases.get(kind, 0.0) + seconds, 3)
            self._kind_started += seconds

    def beat(self) -> None:
        """Heartbeat now if one is due (while waiting for something other than a child)."""
        now = time.monotonic()
        if self.heartbeat is not None and now >= self.beat_at:
            self.heartbeat(self.phase)
            self.beat_at = now + 2.0

    def wait(self, child: Child, limit_s: float | None, what: str) -> dict[str, Any]:
        """The next message of ``child``, within ``limit_s`` seconds and the overall deadline."""
        started = time.monotonic()
        while True:
            now = time.monotonic()
            if self.heartbeat is not None and now >= self.beat_at:
                self.heartbeat(self.phase)
                self.beat_at = now + 2.0
            if self.cancel is not None and self.cancel.is_set():
                raise Stop("timeout", f"cancelled by the caller while {self.phase}")
            if now >= self.deadline:
                raise Stop("timeout", f"no verdict within {self.timeout_s:g} s (while {self.phase}): "
                            "the process group was killed")
            if limit_s is not None and now - started >= limit_s:
                raise Stop("timeout", f"the candidate did not finish {what} within its deadline of {limit_s:.0f} s "
                            "(hang or far too slow): the process group was killed")
            try:
                message = child.messages.get(timeout=0.2)
            except queue.Empty:
                continue
            if message is None:
                if child is self.referee:
                    self._referee_failed(f"the referee {child.exit_description()}: {child.capture.text()[-600:]}",
                                         child.last_op)
                raise Stop("crashed", f"the candidate's process {child.exit_description()} (while {self.phase}); "
                            "an early exit is not a pass")
            kind = message.get("kind")
            if child is self.sandbox and kind == "reject":
                raise Stop(str(message.get("status", "runtime_error")), str(message.get("message", "")))
            if child is self.referee and kind == "error":
                self._referee_failed(str(message.get("message", "referee failed"))[-1500:],
                                     str(message.get("op", child.last_op)))
            return message

    def _referee_failed(self, message: str, op: str) -> None:
        """Raise what a referee's failure during command ``op`` means (``CANDIDATE_DATA_OPS``)."""
        if op in CANDIDATE_DATA_OPS:
            raise Stop("crashed", f"the referee failed on the candidate's output ({op}): {message}")
        raise RefereeFailure(f"the judge's referee failed ({op or 'starting'}), not the candidate: {message}")

    def ask(self, child: Child, command: dict[str, Any], limit_s: float | None, what: str,
            expect: str) -> dict[str, Any]:
        child.send(command)
        message = self.wait(child, limit_s, what)
        if message.get("kind") != expect:
            who = "referee" if child is self.referee else "candidate's process"
            raise Stop("crashed", f"the {who} answered {message.get('kind')!r} to {command.get('op')!r} "
                        f"(expected {expect!r}): protocol broken")
        return message
