"""The benchmarks' container content: a 1 GiB backup set of mixed files (4 x 128 MiB,
224 x 1 MiB, 8,192 x 32 KiB, 8,192 x 4 KiB in 64 folders, half in Documents, half in
Library/Application Support, some user.* xattrs) plus 64 MiB in Library/Caches.
Usage: python3 bench/mixed_set.py STORE SCALE (SCALE 16: a sixteenth, for --quick)."""
import os, sys
store, scale = sys.argv[1], int(sys.argv[2])
block = os.urandom(1 << 20)
def write(path, size, seed):
    with open(path, "wb") as f:
        f.write(seed.to_bytes(8, "little"))
        left = size - 8
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
seed = 0
groups = [(4, 128 << 20), (224, 1 << 20), (8192, 32 << 10), (8192, 4 << 10)]
for count, size in groups:
    for i in range(max(1, count // scale) if size >= 1 << 20 else count // scale):
        top = "Documents" if seed % 2 == 0 else "Library/Application Support"
        folder = f"{store}/{top}/d{seed % 64:02d}"
        os.makedirs(folder, exist_ok=True)
        path = f"{folder}/f{seed:05d}"
        write(path, size // scale if size >= 1 << 20 else size, seed)
        if seed % 100 == 0: os.setxattr(path, "user.tag", b"bench")
        seed += 1
for i in range(64 // scale):
    write(f"{store}/Library/Caches/c{i}", 1 << 20, i)
