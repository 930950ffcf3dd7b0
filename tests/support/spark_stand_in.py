"""A stand-in for pyspark's ``spark-submit``: a small Python script that binds the port it is
given in ``spark.connect.grpc.binding.port=`` (or exits as Spark does when it cannot), so the
embedded server's start, keeper and stop logic is checked exactly and fast in unit tests; the
real server is in tests/integration/test_spark_server.py.

Modes: ``binds`` (at once), ``slow`` (binds after 3 s: a start still under way), ``deaf``
(alive, never binds).
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

STAND_IN = """\
import socket, sys, time
port = int([a.split("=", 1)[1] for a in sys.argv if a.startswith("spark.connect.grpc.binding.port=")][0])
if "{mode}" == "deaf":  # alive, never binds: only someone else can answer at the port
    time.sleep(600)
if "{mode}" == "slow":
    time.sleep(3)
s = socket.socket()
try:
    s.bind(("127.0.0.1", port))
except OSError:
    print(f"java.net.BindException: Failed to bind to address /127.0.0.1:{{port}}", flush=True)
    sys.exit(255)
s.listen()
time.sleep(600)
"""


def stand_in(folder: Path, mode: str) -> Path:
    """The stand-in script in `mode`, written into `folder`."""
    script = folder / f"spark-submit-{mode}"
    script.write_text(f"#!{sys.executable}\n" + STAND_IN.format(mode=mode))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script
