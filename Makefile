# The two commands of the README: `make demo` and `make test`. Both install what is
# missing first (apt-get), then build.
SWIFT ?= swift
BUILD_FLAGS ?=
BIN = .build/debug/containerfs
RELEASE_BIN = .build/release/containerfs
PREFIX ?= /usr/local
# The version is written once, in Sources/containerfs/Version.swift.
VERSION := $(shell sed -n 's/^let containerfsVersion = "\(.*\)"$$/\1/p' Sources/containerfs/Version.swift)
ARCH := $(shell dpkg --print-architecture 2>/dev/null)
# A package per Debian release, each linked against that release's libraries and naming
# its packages: version 0.1.0+deb12 for Debian 12 (bookworm), 0.1.0+deb13 for Debian 13
# (trixie). `make deb` builds the one of the release this machine runs; `make deb-other`
# the other one, in a clean root of that release (docs/packaging.md).
DEBIAN_RELEASE := $(shell . /etc/os-release 2>/dev/null && echo $$VERSION_ID)
OTHER_RELEASE := $(if $(filter 12,$(DEBIAN_RELEASE)),13,12)
DEB = containerfs_$(VERSION)+deb$(DEBIAN_RELEASE)_$(ARCH).deb
OTHER_DEB = containerfs_$(VERSION)+deb$(OTHER_RELEASE)_$(ARCH).deb
# The package's build: the Swift runtime linked in statically, in a folder of its own, and
# with relocations resolved at start so that they can be read-only (full RELRO).
STATIC_BUILD = .build-static
DEB_BUILD_FLAGS = -c release --static-swift-stdlib --scratch-path $(STATIC_BUILD) -Xlinker -z -Xlinker now $(BUILD_FLAGS)

.PHONY: deps build release test demo bench bench-compare soak install deb deb-other clean

deps:
	@scripts/install-deps.sh

build: deps
	$(SWIFT) build $(BUILD_FLAGS)

release: deps
	$(SWIFT) build -c release $(BUILD_FLAGS)

# Every test: the pure policy, the store, and real mounts driven by real programs.
# Then the Debian packages, this release's and the other's, are built, checked, and
# installed and tried, each in a clean root of its release (scripts/test-deb.sh).
# The scale runs in LONG_TESTS take minutes: `make soak` runs them (CI runs both).
LONG_TESTS = manyFilesFromALoginShell|gitCloneAndTarOfLargeTrees|largeContainerInBoundedMemory
test: build
	SWIFT=$(SWIFT) scripts/run-tests.sh --skip '$(LONG_TESTS)' $(BUILD_FLAGS)
	$(MAKE) deb deb-other
	scripts/test-deb.sh $(DEB)
	scripts/test-deb.sh $(OTHER_DEB)

demo: release
	scripts/demo.sh $(RELEASE_BIN)

bench: release
	scripts/install-deps.sh --bench
	bench/run.sh $(RELEASE_BIN)

# The main table with another commit's build beside this tree's, same run (a regression is
# seen the day it is made): make bench-compare BASE=acea77d [BENCH_GROUPS=metadata,tree]
bench-compare: release
	@test -n "$(BASE)" || { echo "make bench-compare: name the commit to compare with: BASE=COMMIT" >&2; exit 64; }
	scripts/install-deps.sh --bench
	bench/compare.sh $(BASE) $(RELEASE_BIN)

# The long runs: the scale tests make test leaves out, then the capacity soak
# (docs/capacity.md), longer than the three seeds the tests run: random workloads through a
# mount with a capacity, the daemon's count checked against a walk. A failure prints its
# seed: replay it with scripts/capacity-soak.py SEED (same options). The long run allows the
# count four blocks off the walk (a rare one-block race, docs/capacity.md); make test's three
# seeds allow none.
SOAK_SEEDS ?= $(shell seq 101 120)
# Then the backup soak (docs/backup.md): backups and a listing of a mounted container while
# three processes change it, each checked against GNU tar, the processes' logs and a
# restore; three seeds as they come, one with a capacity, one with -o power-loss: 40 s on a
# quiet machine, two minutes on a busy one. A failure prints its seed: replay with scripts/backup-soak.py SEED (same options).
BACKUP_SOAK_SEEDS ?= 1 2 3
BACKUP_SOAK = CONTAINERFS=$(BIN) python3 scripts/backup-soak.py --rounds 3 --workers 3 --backups 6
# Then the power-loss soak (docs/power-loss.md): sqlite3 in WAL and TRUNCATE with
# synchronous=FULL and DELETE with EXTRA, 100 seeded power cuts each; a failure names the seed.
POWER_SOAK_SEED ?= 1
soak: build
	CONTAINERFS_FUZZ_SEED=9 CONTAINERFS_FUZZ_SEEDS=12 timeout --kill-after=30 1500 $(SWIFT) test $(BUILD_FLAGS) --no-parallel \
		--filter '$(LONG_TESTS)|DifferentialTests/mountAgreesWithModel'; \
		status=$$?; scripts/sweep-mounts.sh; test $$status -eq 0
	@for seed in $(SOAK_SEEDS); do \
		CONTAINERFS=$(BIN) python3 scripts/capacity-soak.py $$seed --rounds 12 --workers 4 --ops 100 --tolerance 16384 || exit 1; \
	done
	@for seed in $(BACKUP_SOAK_SEEDS); do $(BACKUP_SOAK) $$seed || exit 1; done
	$(BACKUP_SOAK) 4 --capacity 256
	$(BACKUP_SOAK) 5 -o power-loss
	CONTAINERFS=$(BIN) python3 scripts/power-soak.py $(POWER_SOAK_SEED) --cuts 100

# The helper goes where mount(8) looks for mount.TYPE: /sbin (on a merged-/usr system, /usr/sbin).
# mount.fuse.containerfs serves the FUSE convention's type name, fuse.containerfs.
install: release
	install -D -m 0755 $(RELEASE_BIN) $(DESTDIR)$(PREFIX)/bin/containerfs
	install -D -m 0755 mount-helper/mount.containerfs $(DESTDIR)/sbin/mount.containerfs
	ln -sf mount.containerfs $(DESTDIR)/sbin/mount.fuse.containerfs

# The package for this machine's Debian release: needs no Swift where it is installed
# (docs/packaging.md).
deb: deps
	$(SWIFT) build $(DEB_BUILD_FLAGS)
	$(SWIFT) build $(DEB_BUILD_FLAGS) --product generate-manual
	scripts/build-deb.sh $(STATIC_BUILD) $(VERSION)+deb$(DEBIAN_RELEASE) $(DEB)

# The package for the other Debian release, built in a root of that release with this
# machine's Swift toolchain bound in (the root is made once per machine).
deb-other: deps
	SWIFT=$(SWIFT) BUILD_FLAGS='$(BUILD_FLAGS)' scripts/build-deb-in-root.sh $(OTHER_RELEASE) $(VERSION)+deb$(OTHER_RELEASE) $(OTHER_DEB)

clean:
	rm -rf .build $(STATIC_BUILD) .build-static-deb* .build-deb containerfs_*.deb
