#!/usr/bin/env python3
"""The power-loss soak (docs/power-loss.md): sqlite3 under `containerfs run --launches
--power-cut random`, many cuts at seeded moments.

    scripts/power-soak.py SEED [--cuts N] [--within SECONDS] [--modes wal:FULL,truncate:FULL,...]

For each mode (journal_mode:synchronous), a fresh container runs N+1 launches of a write
loop: every launch but the last is cut at a moment drawn from the seed. At its start each
launch checks `PRAGMA integrity_check` and that every transaction a previous launch saw
committed (logged on the host once COMMIT returned) is there, and fails otherwise; so the
run fails, naming the seed, at the first cut the database does not survive. The default
modes are the ones SQLite makes durable: WAL and TRUNCATE with FULL, DELETE with EXTRA
(with FULL, DELETE may roll back the last transaction after a power loss, as SQLite's
documentation says: add delete:FULL to see it). Needs root or a user who can mount;
CONTAINERFS names the binary (default: .build/debug/containerfs).
"""
import argparse, json, os, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("CONTAINERFS", os.path.join(ROOT, ".build/debug/containerfs"))

PROGRAM = r"""
import os, sqlite3, sys, time
mode, sync, log, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
os.chdir(os.path.join(os.environ['HOME'], 'Documents'))
committed = [int(x) for x in open(log).read().split()] if os.path.exists(log) else []
db = sqlite3.connect('app.db', isolation_level=None)
db.execute('pragma journal_mode=%s' % mode)
db.execute('pragma synchronous=%s' % sync)
db.execute('create table if not exists t(id integer primary key, body text)')
check = db.execute('pragma integrity_check').fetchone()[0]
if check != 'ok':
    print('integrity_check: %s' % check, file=sys.stderr); sys.exit(2)
have = {row[0] for row in db.execute('select id from t')}
missing = [i for i in committed if i not in have]
if missing:
    print('lost %d of %d committed transactions (first %d)' % (len(missing), len(committed), missing[0]), file=sys.stderr)
    sys.exit(3)
i = max(have | set(committed) | {0})
end = time.monotonic() + seconds
with open(log, 'a') as out:
    while time.monotonic() < end:
        i += 1
        db.execute('begin')
        db.execute('insert into t values (?, ?)', (i, 'x' * 300))
        db.execute('commit')
        out.write('%d\n' % i); out.flush()
"""


def soak(seed, mode, sync, cuts, within):
    base = tempfile.mkdtemp(prefix="containerfs-power-soak-")
    try:
        bundle = os.path.join(base, "Soak.app")
        os.makedirs(bundle)
        with open(os.path.join(bundle, "Info.plist"), "w") as f:
            f.write("<plist>soak</plist>\n")
        env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(base, "config"))
        store = os.path.join(base, "store")
        subprocess.run([BINARY, "create", store, "--bundle", bundle], check=True, capture_output=True, env=env)
        program = os.path.join(base, "app.py")
        with open(program, "w") as f:
            f.write(PROGRAM)
        log = os.path.join(base, "committed")
        result = subprocess.run(
            [BINARY, "run", store, "--no-confine", "--launches", str(cuts + 1), "--power-cut", "random",
             "--within", str(within), "--seed", str(seed), "--json", "--",
             "python3", program, mode, sync, log, str(within)],
            capture_output=True, text=True, env=env)
        lines = result.stdout.strip().splitlines()
        report = json.loads(lines[-1]) if lines else {}
        launches = report.get("launches", [])
        cut = [entry for entry in launches if entry.get("event") == "power-cut"]
        dropped = sum(entry.get("dropped", {}).get("bytes", 0) for entry in cut)
        committed = sum(1 for _ in open(log)) if os.path.exists(log) else 0
        verdict = "ok" if result.returncode == 0 else "FAILED (status %d)" % result.returncode
        print("%s:%s seed %d: %d cuts, %d committed transactions, %d bytes dropped: %s"
              % (mode, sync, seed, len(cut), committed, dropped, verdict))
        if result.returncode != 0:
            sys.stderr.write(result.stderr)
        return result.returncode == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("seed", type=int)
    parser.add_argument("--cuts", type=int, default=100)
    parser.add_argument("--within", type=float, default=0.5)
    parser.add_argument("--modes", default="wal:FULL,truncate:FULL,delete:EXTRA")
    options = parser.parse_args()
    ok = True
    for item in options.modes.split(","):
        mode, sync = item.split(":")
        ok = soak(options.seed, mode, sync, options.cuts, options.within) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
