#!/usr/bin/env python3
"""Group commits per second with many sales committing at once (run by
scripts/bench-commits.sh, which makes the scratch database and its user and drops them).

For each cell of the matrix V vouchers x C connections x B purchases per batch, C
processes (one MySQL connection each, kept open) call the group commit over and over for
W + T seconds, each batch of B new (order id, user id) pairs, as the component sends it
(core/src/sql.rs, batch_json). Only the calls that end within the last T seconds count.

The procedure is seckill_commit_batch as migrations/999_procedures.sql creates it. No lock
is shared between vouchers' batches: each holds its own voucher's stock row, and the feed's
places are given by its reads (seckill_feed_page). Until they were, every batch of every
voucher took the one tb_event_seq row FOR UPDATE until its commit; BENCHMARKS.md keeps the
figures of that procedure beside these.

Besides throughput and client-side latency, each cell reports the server's deltas of
Innodb_row_lock_waits / Innodb_row_lock_time (every row lock wait, on any row) and
Innodb_data_fsyncs (the redo log's among them), and the cores mariadbd, the clients and
everything else on the machine kept busy in the window (other CPU: anything but these two,
which should be about 0 for figures worth keeping).
Uses only the stdlib and pymysql.
"""

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

import pymysql

# core/src/order_id.rs's EPOCH: 2024-01-01T00:00:00Z.
ORDER_EPOCH = 1_704_067_200

STATUS = ("Innodb_row_lock_waits", "Innodb_row_lock_time", "Innodb_data_fsyncs",
          "Innodb_deadlocks")


def connect(a):
    return pymysql.connect(host=a.host, port=a.port, user=a.user, password=a.password,
                           database=a.db, autocommit=True)


def create_voucher_call(c, **given):
    """The CALL of seckill_create_voucher with each parameter bound by its name (`p_<name>`,
    as MySQL's catalogue lists them), so that a parameter added, dropped or moved fails
    here rather than binding a value to the wrong one."""
    c.execute("SELECT PARAMETER_NAME FROM information_schema.PARAMETERS"
              " WHERE SPECIFIC_SCHEMA = DATABASE() AND SPECIFIC_NAME = 'seckill_create_voucher'"
              " ORDER BY ORDINAL_POSITION")
    names = [row[0].removeprefix("p_") for row in c.fetchall()]
    if sorted(names) != sorted(given):
        sys.exit(f"bench-commits: seckill_create_voucher takes {names}, given {sorted(given)}")
    return ("CALL seckill_create_voucher(" + ", ".join(["%s"] * len(names)) + ")",
            [given[name] for name in names])


def setup(a):
    db = connect(a)
    with db.cursor() as c:
        vouchers = []
        for i in range(max(a.vouchers)):
            # The schema's own way to make a sale: tb_voucher + tb_seckill_voucher.
            c.execute("SELECT UTC_TIMESTAMP(), UTC_TIMESTAMP() + INTERVAL 1 DAY")
            begin, end = c.fetchone()
            call, args = create_voucher_call(
                c, title=f"bench-commits {i}", description="", stock=a.stock, begin=begin,
                end=end, pay_within_s=900, buckets=1, draw_ms=0, ids=None, per_buyer=1,
                announce=None)
            c.execute(call, args)
            vouchers.append(int(c.fetchone()[0]))
            while c.nextset():
                pass
    db.close()
    return vouchers


def reset(a):
    """Every cell starts from empty order and event tables and full stock."""
    db = connect(a)
    with db.cursor() as c:
        c.execute("TRUNCATE tb_voucher_order")
        c.execute("TRUNCATE tb_order_event")
        c.execute("UPDATE tb_event_seq SET next = 1 WHERE id = 1")
        c.execute("UPDATE tb_seckill_voucher SET stock = initial_stock, orders = 0")
    db.close()


def worker(a, mine, batch, ident, barrier, start_at, out):
    db = connect(a)
    c = db.cursor()
    sql = "CALL seckill_commit_batch(%s, %s)"
    # Order ids as the component composes them (core/src/order_id.rs): the second admitted
    # since ORDER_EPOCH above bit 32, which the group commit holds against the sale's
    # creation (an id from before it is another sale's), and a sequence below.
    base = ((int(time.time()) - ORDER_EPOCH) << 32) | (ident << 26)
    users = (ident + 1) * 10**9
    n = 0
    lat = []
    created = 0
    errors = {}
    cpu0 = cpu1 = None
    barrier.wait()
    t_win, t_end = start_at.value + a.warmup, start_at.value + a.warmup + a.seconds
    k = 0
    while True:
        now = time.monotonic()
        if now >= t_end:
            break
        if now < start_at.value:
            time.sleep(start_at.value - now)
            continue
        if cpu0 is None and now >= t_win:
            cpu0 = time.process_time()
        voucher = mine[k % len(mine)]
        k += 1
        pairs = []
        for _ in range(batch):
            n += 1
            pairs.append([str(base + n), str(users + n), 1])
        t0 = time.monotonic()
        try:
            c.execute(sql, (voucher, json.dumps(pairs)))
            row = c.fetchone()
            while c.nextset():
                pass
        except pymysql.MySQLError as e:
            code = e.args[0] if e.args else "?"
            errors[code] = errors.get(code, 0) + 1
            continue
        t1 = time.monotonic()
        if t_win <= t1 <= t_end:
            lat.append(t1 - t0)
            created += int(row[3])
    cpu1 = time.process_time()
    out.put((lat, created, errors, (cpu1 - cpu0) if cpu0 is not None else 0.0))
    db.close()


def server_cpu():
    """mariadbd's CPU seconds so far, when it runs on this machine and is readable."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if open(f"/proc/{pid}/comm").read().strip() in ("mariadbd", "mysqld"):
                f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return None


def fsync_probe(a):
    """fdatasync latency of a 4 KiB write on the server's data directory (when it is on
    this machine and writable): with innodb_flush_log_at_trx_commit=1 every commit waits
    for one (shared by the commits that join its group), and on a virtual disk it varies."""
    db = connect(a)
    with db.cursor() as c:
        c.execute("SELECT @@datadir")
        datadir = c.fetchone()[0]
    db.close()
    path = os.path.join(datadir, f"bench_commits_fsync_probe.{os.getpid()}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        return "fdatasync probe: data directory not writable here"
    try:
        lat = []
        for i in range(200):
            os.pwrite(fd, b"x" * 4096, (i % 16) * 4096)
            t = time.monotonic()
            os.fdatasync(fd)
            lat.append(time.monotonic() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    return f"fdatasync on {datadir}: p50 {lat[100] * 1e3:.2f} ms, p99 {lat[197] * 1e3:.2f} ms"


def busy_cpu():
    """CPU seconds the whole machine spent busy so far (all but idle and iowait)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


def wait_quiet(limit):
    """Waits, up to `limit` seconds, until the machine is close to idle (under a quarter of
    a core busy over half a second): this is a shared 2-core box, and a build running
    beside the benchmark takes cores and disk from MariaDB. Returns the seconds waited."""
    t0 = time.monotonic()
    while True:
        b0 = busy_cpu()
        time.sleep(0.5)
        if (busy_cpu() - b0) / 0.5 < 0.25 or time.monotonic() - t0 >= limit:
            return time.monotonic() - t0


def status(c):
    c.execute("SHOW GLOBAL STATUS WHERE Variable_name IN (%s)" % ",".join(["%s"] * len(STATUS)),
              STATUS)
    return {k: int(v) for k, v in c.fetchall()}


def cell(a, vouchers, v, conns, batch):
    reset(a)
    used = vouchers[:v]
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(conns + 1)
    start_at = ctx.Value("d", 0.0)
    out = ctx.Queue()
    procs = []
    for i in range(conns):
        # Connections spread over the vouchers: with fewer connections than vouchers each
        # takes its own share of them in turn (no two at one voucher); with more, each
        # voucher has conns / v connections.
        mine = used[i::conns] if conns < v else [used[i % v]]
        p = ctx.Process(target=worker, args=(a, mine, batch, i, barrier, start_at, out))
        p.start()
        procs.append(p)
    probe = connect(a)
    pc = probe.cursor()
    start_at.value = time.monotonic() + 0.2
    barrier.wait()
    time.sleep(max(0.0, start_at.value + a.warmup - time.monotonic()))
    s0, cpu0, busy0 = status(pc), server_cpu(), busy_cpu()
    time.sleep(max(0.0, start_at.value + a.warmup + a.seconds - time.monotonic()))
    s1, cpu1, busy1 = status(pc), server_cpu(), busy_cpu()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    # Every purchase was new and the stock ample: all must have been ordered.
    pc.execute("SELECT COUNT(*) FROM tb_voucher_order")
    orders = pc.fetchone()[0]
    probe.close()
    lat = sorted(x for r in results for x in r[0])
    created = sum(r[1] for r in results)
    errors = {}
    for r in results:
        for k, n in r[2].items():
            errors[k] = errors.get(k, 0) + n
    commits = len(lat)
    d = {k: s1[k] - s0[k] for k in STATUS}
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")
    return {
        "V": v, "C": conns, "B": batch,
        "commits_s": commits / a.seconds,
        "purchases_s": created / a.seconds,
        "p50_ms": pct(0.50), "p99_ms": pct(0.99),
        "lock_waits_per_commit": d["Innodb_row_lock_waits"] / commits if commits else 0,
        "lock_wait_ms_per_s": d["Innodb_row_lock_time"] / a.seconds,
        "fsyncs_per_commit": d["Innodb_data_fsyncs"] / commits if commits else 0,
        "deadlocks": d["Innodb_deadlocks"],
        "server_cpu": (cpu1 - cpu0) / a.seconds if cpu0 is not None and cpu1 is not None else None,
        "client_cpu": sum(r[3] for r in results) / a.seconds,
        "busy_cpu": (busy1 - busy0) / a.seconds,
        "errors": errors,
        "all_ordered": created == commits * batch and orders >= created,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=3306)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--vouchers", type=lambda s: [int(x) for x in s.split()], default=[1, 8, 64])
    p.add_argument("--conns", type=lambda s: [int(x) for x in s.split()], default=[1, 8, 32])
    p.add_argument("--batches", type=lambda s: [int(x) for x in s.split()], default=[1, 16])
    p.add_argument("--stock", type=int, default=1_000_000_000)
    p.add_argument("--quiet-wait", type=float, default=30.0,
                   help="seconds to wait at most before each cell for other load to stop")
    p.add_argument("--json", help="also write every cell's figures here")
    a = p.parse_args()

    vouchers = setup(a)
    print(f"bench-commits: before, {fsync_probe(a)}", flush=True)
    print(f"bench-commits: {a.seconds:g} s per cell after {a.warmup:g} s warm-up", flush=True)
    head = ("| V | C | B | commits/s | purchases/s | p50 ms | p99 ms | "
            "row-lock waits/commit | lock wait ms/s | fsyncs/commit | mariadbd CPU | client CPU | other CPU | errors |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    rows = []
    for b in a.batches:
        for v in a.vouchers:
            for conns in a.conns:
                waited = wait_quiet(a.quiet_wait)
                if waited > 1:
                    print(f"bench-commits: waited {waited:.0f} s for a quiet machine", flush=True)
                r = cell(a, vouchers, v, conns, b)
                rows.append(r)
                scpu = f"{r['server_cpu']:.2f}" if r["server_cpu"] is not None else "?"
                other = "?"
                if r["server_cpu"] is not None:
                    o = r["busy_cpu"] - r["server_cpu"] - r["client_cpu"]
                    # Flagged: another load shared the machine with this cell.
                    other = f"{o:.2f}" + (" BUSY" if o > 0.25 else "")
                errs = ",".join(f"{k}:{n}" for k, n in r["errors"].items()) or "0"
                if not r["all_ordered"]:
                    errs += " NOT-ALL-ORDERED"
                print(f"| {v} | {conns} | {b} | {r['commits_s']:.0f} | "
                      f"{r['purchases_s']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                      f"{r['lock_waits_per_commit']:.2f} | {r['lock_wait_ms_per_s']:.0f} | "
                      f"{r['fsyncs_per_commit']:.2f} | {scpu} | {r['client_cpu']:.2f} | {other} | {errs} |",
                      flush=True)
    print(f"bench-commits: after, {fsync_probe(a)}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if not r["all_ordered"]]
    if bad:
        print(f"bench-commits: {len(bad)} cells where not every purchase was ordered", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
