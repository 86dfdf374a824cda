"""Writes N TSBS cpu-like rows (time, hostname, eight integer fields) as CSV with a
header: the COPY benchmarks' input. Usage: cpu_csv.py ROWS PATH"""
import datetime
import random
import sys

rows, path = int(sys.argv[1]), sys.argv[2]
random.seed(1)
start = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
with open(path, "w") as f:
    f.write("time,hostname,usage_user,usage_system,usage_idle,usage_nice,usage_iowait,usage_irq,usage_softirq,usage_steal\n")
    for i in range(rows):
        t = start + datetime.timedelta(seconds=i // 100 * 10)
        vals = ",".join(str(random.randint(0, 100)) for _ in range(8))
        f.write("%s,host_%d,%s\n" % (t.strftime("%Y-%m-%d %H:%M:%S+00"), i % 100, vals))
