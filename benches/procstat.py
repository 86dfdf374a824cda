"""A server process as /proc shows it, for the attack scripts in benches/: CPU
seconds used, resident memory, and the peak resident memory over a stretch of time."""
import os
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class PeakRss:
    """`with PeakRss(pid) as p:` samples the resident memory every 50 ms; `p.mib`
    is the highest seen."""

    def __init__(self, pid):
        self.pid, self.mib = pid, rss_mib(pid)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch)

    def _watch(self):
        while not self._done.is_set():
            self.mib = max(self.mib, rss_mib(self.pid))
            time.sleep(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
