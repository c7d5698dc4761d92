"""A candidate's process after a total compromise: the worst it could say, said on purpose.

The judge's Python guards are a first layer; the security boundary is the process and the
OS. To test that boundary, the judge's tests start this module in place of
``kernels.judge.sandbox`` (``runner.SANDBOX_MODULE``): it speaks the sandbox's protocol but
obeys no rule, as if the candidate had taken over its interpreter. What it does is named by
the first line of the "candidate" source (``# attack: NAME``):

- ``forge_outputs``: answers every checked call with no output bytes;
- ``wrong_key``: answers each checked call with another call's key;
- ``skip_work_when_timed``: correct outputs when checked, zeros when timed, true (tiny) times;
- ``memoised_timed``: when timed, replays the outputs of its checked calls (the old
  "memoise the outputs, forge the timing answer" exploit), with true times;
- ``memo_by_content``: keeps every output keyed by its inputs' bytes and replays it when the
  same inputs come back; prints how often that happened;
- ``fake_fast_times``: does the work when timed but reports a thousandth of the time;
- ``scaled_timer``: its clock runs at 1/8 (a patched ``perf_counter``), for every time it reports;
- ``impossible_times``: reports timed calls longer than the whole batch took;
- ``burn_idle``: a thread that burns CPU from start to end, to slow the baseline down;
- ``late_thread``: the same thread, started at its first timed batch (after every check);
- ``thread_storm``: starts threads until it cannot, holds them 25 s, reports how many it got;
- ``fill_disk``: writes to its directory, /tmp and /dev/shm until each is full, reports bytes;
- ``huge_output``: announces an output of 2**40 bytes (the trusted side must not read it);
- ``name_dev_zero``: answers a checked call with the path ``/dev/zero`` and no bytes;
- ``forge_markers``: in a census session, launches each timed window's closing marker before
  its work (the census must call it ``suspicious``); under a census, every attack's torch
  compute shows as aten kernels (``forbidden``);
- ``hunt_secrets``: before anything else, reads every environment, every ``/proc/*/environ``
  and ``cmdline`` and every small file under the usual roots it can see, tries the host's
  PostgreSQL port and writes outside its directory, and reports all of it (in its output
  and in its rejection, as JSON after ``hunt``).

It computes the toy problem's outputs with torch (no guards here), exactly as a
compromised process could.
"""

from __future__ import annotations

import json
import os
import sys
import time

SECRET_MARK = "sk-judge-" + "fake"  # built, so this file does not hold it
HUNT_ROOTS = ("/", "/tmp", "/root", "/home", "/work", "/etc", "/var", "/run")


def _hunt() -> list[str]:
    found: list[str] = []
    for name, value in os.environ.items():
        if SECRET_MARK in value:
            found.append(f"env {name}")
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        for leaf in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{leaf}", "rb") as handle:
                    if SECRET_MARK.encode() in handle.read():
                        found.append(f"/proc/{pid}/{leaf}")
            except OSError:
                pass
    deadline = time.monotonic() + 20
    seen = 0
    for root in HUNT_ROOTS:
        for dirpath, dirnames, filenames in os.walk(root):
            if time.monotonic() > deadline:
                break
            dirnames[:] = [d for d in dirnames if not os.path.join(dirpath, d).startswith(("/proc", "/sys", "/dev", "/usr"))
                           and "site-packages" not in d and ".pyenv" not in d and ".venv" not in d]
            if dirpath.count(os.sep) > 6:
                dirnames[:] = []
            for name in filenames:
                path = os.path.join(dirpath, name)
                seen += 1
                try:
                    if os.path.getsize(path) > 1 << 20:
                        continue
                    with open(path, "rb") as handle:
                        if SECRET_MARK.encode() in handle.read():
                            found.append(path)
                except OSError:
                    pass
    return sorted(set(found))


def _reach(address) -> bool:
    """Whether a TCP connection to ``address`` (the host's PostgreSQL) can be opened."""
    import socket

    try:
        socket.create_connection(address, timeout=2).close()
        return True
    except OSError:
        return False


def _writes(config) -> list[str]:
    """The places outside its sandbox directory where a file could be created."""
    here = os.path.dirname(os.path.abspath(__file__))
    targets = [os.path.join(here, "planted.txt"), os.path.join(os.path.dirname(config["workdir"]), "planted.txt"),
               "/usr/planted.txt", os.path.join(sys.prefix, "planted.txt")]
    wrote = []
    for path in targets:
        try:
            with open(path, "w") as handle:
                handle.write("x")
            wrote.append(path)
            os.remove(path)
        except OSError:
            pass
    return wrote


def _storm() -> int:
    import threading

    stop = threading.Event()
    count = 0
    try:
        while count < 8192:
            threading.Thread(target=stop.wait, daemon=True).start()
            count += 1
    except RuntimeError:  # "can't start new thread": the box's pids.max
        pass
    time.sleep(25)
    stop.set()
    return count


def _fill(folder: str) -> int:
    written = 0
    block = b"x" * (1 << 20)
    try:
        with open(os.path.join(folder, "fill.bin"), "wb") as handle:
            while written < (8 << 30):
                handle.write(block)
                handle.flush()
                written += len(block)
    except OSError:
        pass
    return written


def _burn() -> None:
    import hashlib
    import threading

    # Hashing a large block releases the GIL, so the thread burns a core of its own without
    # stalling the main thread: a pure-Python spin would hold the GIL and make every call wait
    # its turn (on a 2-core box that pushed a call past its deadline instead of testing the clock).
    block = bytes(1 << 22)

    def spin():
        while True:
            hashlib.sha256(block).digest()

    threading.Thread(target=spin, daemon=True).start()


def raw(out) -> bytes:
    import torch

    return out.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes()


def main() -> None:
    from kernels.judge import plan as planning, protocol
    from kernels.registry import get_problem

    config = json.loads(sys.stdin.readline())
    fd, nonce = config["report_fd"], config["nonce"]
    source = config["source"]
    attack = source.splitlines()[0].partition("attack:")[2].strip()
    problem = get_problem(config["problem"])
    reference = problem.load_reference()
    device, dtype = config["device"], config["dtype"]
    if attack == "hunt_secrets":
        result = {"found": _hunt(), "uid": os.getuid(), "network": _reach(("127.0.0.1", 5432)),
                  "wrote": _writes(config), "pids": len([p for p in os.listdir("/proc") if p.isdigit()])}
        print("hunted:", json.dumps(result), flush=True)
        protocol.send(fd, nonce, {"kind": "reject", "status": "runtime_error", "message": "hunt " + json.dumps(result)})
        os._exit(0)
    if attack == "burn_idle":
        _burn()
    clock = time.perf_counter
    if attack == "scaled_timer":
        def clock():
            return time.perf_counter() / 8
    protocol.send(fd, nonce, {"kind": "started"})
    checked: list = []
    memo: dict[bytes, object] = {}
    hits = 0
    for line in sys.stdin:
        command = json.loads(line)
        op = command.get("op")
        payload = None
        if op == "load":
            if attack == "thread_storm":
                count = _storm()
                protocol.send(fd, nonce, {"kind": "reject", "status": "runtime_error", "message": f"storm {count}"})
                os._exit(0)
            if attack == "fill_disk":
                sizes = {name: _fill(name) for name in (config["workdir"], "/tmp", "/dev/shm")}
                protocol.send(fd, nonce, {"kind": "reject", "status": "runtime_error",
                                          "message": "filled " + json.dumps(sizes)})
                os._exit(0)
            reply = {"kind": "loaded"}
        elif op == "check":
            call = planning.Call(**command["call"])
            out = reference(**planning.inputs_of(problem, call, device, dtype))
            key = call.key
            if attack == "wrong_key":
                key = "v0/seed1" if call.key == "v0/seed0" else "v0/seed0"
            reply = {"kind": "output", "key": key}
            payload = b"" if attack == "forge_outputs" else raw(out)
            if attack == "name_dev_zero":
                reply, payload = {"kind": "output", "key": key, "path": "/dev/zero"}, None
            if attack == "huge_output":
                protocol.send(fd, nonce, dict(reply, nbytes=1 << 40))
                time.sleep(30)
                os._exit(0)
        elif op == "warm":
            bench = command["bench"]
            checked[:] = [reference(**planning.make_inputs(problem, bench["shape"], seed, bench["regime"], device, dtype))
                          for seed in bench["seeds"]]
            reply = {"kind": "warmed"}
        elif op == "time":
            if attack == "late_thread" and not hits:
                _burn()
                hits = 1
            reply, payload = _timed(command, attack, problem, reference, device, dtype, checked, memo, clock)
            hits += reply.pop("hits") if attack != "late_thread" else 0
        elif op in ("census_blank", "census_time"):
            reply, payload = _census(command, attack, problem, reference, device, dtype, checked, memo, clock)
        elif op == "finish":
            if attack == "memo_by_content":
                print(f"memo hits: {hits}", flush=True)
            reply = {"kind": "finished", "resources": {}, "launches": 1}
        else:
            break
        protocol.send(fd, nonce, reply, payload)
    os._exit(0)


def _census(command, attack, problem, reference, device, dtype, checked, memo, clock):
    """A census session's commands (``kernels/judge/sandbox_census.py``), the markers launched
    as the harness launches them; ``forge_markers`` launches the window's closing marker early,
    so that its work would fall outside the window (``census.analyze`` must see the code twice)."""
    import torch

    from kernels.judge.census_mark import mark

    mark(torch, command["open"], device)
    if command["op"] == "census_blank":
        mark(torch, command["close"], device)
        return {"kind": "blanked"}, None
    if attack == "forge_markers":
        mark(torch, command["close"], device)
    reply, payload = _timed(command, attack, problem, reference, device, dtype, checked, memo, clock)
    reply.pop("hits")
    mark(torch, command["close"], device)
    return reply, payload


def _timed(command, attack, problem, reference, device, dtype, checked, memo, clock):
    import torch

    from kernels.judge import plan as planning

    started = clock()
    bench, batch = command["bench"], command["batch"]
    shape = tuple(bench["shape"])
    calls, outputs, payload, hits = [], [], bytearray(), 0
    for index, seed in enumerate(batch["seeds"]):
        inputs = planning.make_inputs(problem, shape, seed, bench["regime"], device, dtype)
        start = clock()
        if attack == "skip_work_when_timed":
            out = torch.zeros(problem.output(shape, dtype)[0])
        elif attack == "memoised_timed":
            out = checked[index % len(checked)]  # the warm-up's outputs at this shape
        elif attack == "memo_by_content":
            key = b"".join(raw(v) if isinstance(v, torch.Tensor) else repr(v).encode() for v in inputs.values())
            hits += key in memo
            out = memo.setdefault(key, reference(**inputs))
        else:
            out = reference(**inputs)
            # Real work takes time: 10 ms stands far above the noise of a loaded two-core machine.
            time.sleep(0.01)
        elapsed = (clock() - start) * 1e3
        if attack == "fake_fast_times":
            elapsed /= 1000
        if attack == "impossible_times":
            elapsed += 1000.0
        data = raw(out)
        calls.append(elapsed)
        outputs.append({"key": f"b{bench['index']}/t{batch['index']}/{index}", "nbytes": len(data)})
        payload += data
    batch_ms = (clock() - started) * 1e3
    if attack == "fake_fast_times":
        batch_ms /= 1000
    return {"kind": "timed", "call_ms": calls, "batch_ms": batch_ms, "outputs": outputs, "hits": hits}, bytes(payload)


if __name__ == "__main__":
    main()
