"""A candidate's process after a total compromise: the worst it could say, said on purpose.

The judge's Python guards are a first layer; the security boundary is the process and the
OS. To test that boundary, the judge's tests start this module in place of
``kernels.judge.sandbox`` (``runner.SANDBOX_MODULE``): it speaks the sandbox's protocol but
obeys no rule, as if the candidate had taken over its interpreter. What it does is named by
the first line of the "candidate" source (``# attack: NAME``):

- ``forge_outputs``: claims every checked call with an empty outputs file;
- ``wrong_key``: answers each checked call with another call's key;
- ``skip_work_when_timed``: correct outputs when checked, no work when timed, true
  (tiny) times and made-up digests;
- ``fake_fast_times``: does the work when timed but reports a thousandth of the time;
- ``impossible_times``: reports timed calls longer than the whole batch took;
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


def main() -> None:
    import torch

    from kernels.judge import plan as planning, protocol
    from kernels.registry import get_problem

    config = json.loads(sys.stdin.readline())
    fd, nonce = config["report_fd"], config["nonce"]
    source = open(config["source_path"]).read()
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
    protocol.send(fd, nonce, {"kind": "started"})
    saved = 0
    sets: dict[int, list] = {}
    for line in sys.stdin:
        command = json.loads(line)
        op = command.get("op")
        if op == "load":
            reply = {"kind": "loaded"}
        elif op == "check":
            call = planning.Call(**command["call"])
            path = os.path.join(config["workdir"], f"forged-{saved}.pt")
            saved += 1
            if attack == "forge_outputs":
                torch.save({}, path)
            else:
                out = reference(**planning.inputs_of(problem, call, device, dtype))
                torch.save({call.key: out}, path)
            import hashlib

            digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
            key = "v0/seed0" if attack == "wrong_key" and call.key != "v0/seed0" else call.key
            if attack == "wrong_key" and call.key == "v0/seed0":
                key = "v0/seed1"
            reply = {"kind": "output", "key": key, "path": path, "sha256": digest}
        elif op == "warm":
            reply = {"kind": "warmed"}
        elif op == "time":
            bench, batch = command["bench"], command["batch"]
            if bench["index"] not in sets:
                sets[bench["index"]] = [planning.make_inputs(problem, bench["shape"], seed, bench["regime"], device, dtype)
                                        for seed in bench["seeds"]]
            batch_plan = planning.Batch(**batch)
            events, walls, digests = [], [], []
            for index in range(batch["calls"]):
                inputs = sets[bench["index"]][batch_plan.seed_index(index)]
                start = time.perf_counter()
                if attack == "skip_work_when_timed" and not batch_plan.guarded:
                    out = torch.zeros(problem.output(tuple(bench["shape"]), dtype)[0])
                else:
                    out = reference(**inputs)
                    # Real work takes time: 10 ms stands far above the noise of a loaded
                    # two-core machine in the baseline's per-call overhead (2 ms did not, once).
                    time.sleep(0.01)
                elapsed = (time.perf_counter() - start) * 1e3
                digests.append([0.0] * command["digests"] if attack == "skip_work_when_timed" and not batch_plan.guarded
                               else planning.digest(out, batch["digest_seed"], command["digests"]))
                if batch_plan.guarded:
                    continue  # a spot check is not a sample
                if attack == "fake_fast_times":
                    elapsed /= 1000
                if attack == "impossible_times":
                    elapsed += 1000.0
                events.append(elapsed)
                walls.append(elapsed)
            reply = {"kind": "timed", "event_ms": events, "wall_ms": walls, "digests": digests}
        elif op == "finish":
            reply = {"kind": "finished", "resources": {}, "launches": 1}
        else:
            break
        protocol.send(fd, nonce, reply)
    os._exit(0)


if __name__ == "__main__":
    main()
